"""The static scan and the normalized identity of one bundle, in a process of their own.

verify/static/bound.py starts this module behind the sandbox wall (its own uid, namespaces, seccomp)
with CPU, memory and wall budgets. Why: both parse hostile source with `ast` and walk what it
built. A parser crash, a MemoryError or a shape that is slow to check ends this process, never
the validator's pass, and the host turns it into a FAIL with its reason.

Input: the file at --fd (unlinked, read only): a `protocol.Head` line (every member's path, the
Python members' sizes, the manifest's size or null, the other members' sha256 computed by the
host, whether the identity is asked), then the .py bytes and the manifest's, in that order.
Only Python and the manifest travel: the scan needs every member's path, the identity the other
members' hashes, neither their bytes.

Output: stdout, one frame a line (verify/static/protocol.py, which the host decodes strictly):
`At` as each step starts (so a budget breach names its file; the first, "starting", before the
payload is read: without it the host knows the child never began), `Findings`, then with
identity asked and no finding `Identity`, then `Done`; each carries "cpu", the CPU seconds used
so far. A Python exception is a `Crash` frame, exit code 3.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from types import MappingProxyType
from typing import Any

from cacheon_subnet.verify.static.protocol import At, Crash, Done, Findings, Frame, Head, Identity, frame_line, read_head


def _emit(frame: Frame) -> None:
    """One frame, with this process's CPU seconds so far (behind the wall the host's wait4 sees
    none of it: the sandbox's inner init reaps this process)."""
    sys.stdout.write(frame_line(dataclasses.replace(frame, cpu=round(time.process_time(), 3))) + "\n")
    sys.stdout.flush()


def read_payload(fd: int) -> tuple[Head, dict[str, bytes], bytes | None]:
    """(header, member path -> bytes (Python only; every other member b""), manifest bytes)."""
    with os.fdopen(fd, "rb") as f:
        head = read_head(f.readline())
        files = dict.fromkeys(head.paths, b"")
        for py in head.py:
            files[py.path] = f.read(py.size)
        manifest = f.read(head.manifest) if head.manifest is not None else None
    return head, files, manifest


def run(head: Head, files: dict[str, bytes], manifest: bytes | None) -> None:
    from cacheon_subnet.policy import scan as policy

    parsed: dict[str, Any] = {}
    findings = policy.scan_files(
        files, progress=lambda step, path: _emit(At(step, path)), parsed=parsed, cuda_modules=frozenset(head.cuda)
    )
    _emit(Findings(tuple(str(f) for f in findings)))
    if head.identity and not findings and manifest is not None:
        _emit(At("computing the normalized identity", ""))
        from cacheon_subnet.bundle.archive import Bundle
        from cacheon_subnet.bundle.identity.normalize import normalized_identity
        from cacheon_subnet.bundle.manifest import parse_manifest

        man = parse_manifest(manifest, frozenset(files))
        bundle = Bundle(MappingProxyType({**files, "manifest.toml": manifest}), "", man, "<static child>")
        _emit(Identity(normalized_identity(bundle, other=head.other, parsed=parsed)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fd", type=int, required=True)
    args = ap.parse_args(argv)
    _emit(At("starting", ""))  # before any byte of the bundle: its absence is the host's trouble
    try:
        head, files, manifest = read_payload(args.fd)
        run(head, files, manifest)
    except BaseException as e:  # noqa: BLE001 - MemoryError, RecursionError, ...: the host's FAIL reason
        try:
            _emit(Crash(f"{type(e).__name__[:200]}: {str(e)[:300]}"))
        except BaseException:  # noqa: BLE001 - no memory left even for that: the exit code says it
            pass
        return 3
    _emit(Done())
    return 0


if __name__ == "__main__":
    sys.exit(main())
