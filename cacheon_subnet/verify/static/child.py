"""The static scan and the normalized identity of one bundle, in a process of their own.

verify/static/bound.py starts this module behind the sandbox wall (its own uid, namespaces, seccomp)
with CPU, memory and wall budgets. Why: both parse hostile source with `ast` and walk what it
built. A parser crash, a MemoryError or a shape that is slow to check ends this process, never
the validator's pass, and the host turns it into a FAIL with its reason.

Input: the file at --fd (unlinked, read only): one JSON line
`{"paths": [...every member...], "py": [[path, size], ...], "manifest": size or null,
"other": {path: sha256}, "identity": bool}`, then the .py bytes and the manifest's, in that
order. Only Python and the manifest travel: the scan needs every member's path, the identity
the other members' hashes (computed by the host), neither their bytes.

Output: stdout, one frame per line, `FRAME` + a JSON object: {"at": [step, path]} as each step
starts (so a budget breach names its file; the first, "starting", before the payload is read:
without it the host knows the child never began), {"findings": [...]}, then with identity asked and
no finding {"identity": "norm-..." or null}, then {"done": true}; each also carries "cpu", the
CPU seconds used so far. A Python exception is a {"crash": "Type: message"} frame, exit code 3.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

FRAME = "#cacheon-static "


def _emit(doc: dict[str, Any]) -> None:
    """One frame, with this process's CPU seconds so far (behind the wall the host's wait4 sees
    none of it: the sandbox's inner init reaps this process)."""
    sys.stdout.write(FRAME + json.dumps({**doc, "cpu": round(time.process_time(), 3)}) + "\n")
    sys.stdout.flush()


def read_payload(fd: int) -> tuple[dict[str, Any], dict[str, bytes], bytes | None]:
    """(header, member path -> bytes (Python only; every other member b""), manifest bytes)."""
    with os.fdopen(fd, "rb") as f:
        head = json.loads(f.readline())
        files = dict.fromkeys(head["paths"], b"")
        for path, size in head["py"]:
            files[path] = f.read(size)
        manifest = f.read(head["manifest"]) if head["manifest"] is not None else None
    return head, files, manifest


def run(head: Mapping[str, Any], files: dict[str, bytes], manifest: bytes | None) -> None:
    from cacheon_subnet.policy import scan as policy

    parsed: dict[str, Any] = {}
    findings = policy.scan_files(files, progress=lambda step, path: _emit({"at": [step, path]}), parsed=parsed)
    _emit({"findings": [str(f) for f in findings]})
    if head["identity"] and not findings and manifest is not None:
        _emit({"at": ["computing the normalized identity", ""]})
        from cacheon_subnet.bundle.archive import Bundle
        from cacheon_subnet.bundle.identity.normalize import normalized_identity
        from cacheon_subnet.bundle.manifest import parse_manifest

        man = parse_manifest(manifest, frozenset(files))
        bundle = Bundle(MappingProxyType({**files, "manifest.toml": manifest}), "", man, "<static child>")
        _emit({"identity": normalized_identity(bundle, other=head["other"], parsed=parsed)})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fd", type=int, required=True)
    args = ap.parse_args(argv)
    _emit({"at": ["starting", ""]})  # before any byte of the bundle: its absence is the host's trouble
    try:
        head, files, manifest = read_payload(args.fd)
        run(head, files, manifest)
    except BaseException as e:  # noqa: BLE001 - MemoryError, RecursionError, ...: the host's FAIL reason
        try:
            _emit({"crash": f"{type(e).__name__}: {str(e)[:300]}"})
        except BaseException:  # noqa: BLE001 - no memory left even for that: the exit code says it
            pass
        return 3
    _emit({"done": True})
    return 0


if __name__ == "__main__":
    sys.exit(main())
