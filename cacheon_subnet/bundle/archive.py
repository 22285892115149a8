"""Reading, validating, extracting and packing bundles.

A bundle is a directory or a `.tar.gz`. Either way we read every member ourselves (never
`extractall`), check it against the rules in limits.py while streaming (so a bomb stops at
the first byte over a limit), and write only into a fresh scratch directory we own. An archive
is pre-scanned first (tarscan.py) so tarfile never reads an unbounded header. Worst-case memory
of a load: the files themselves (<= unpacked_bytes) + one member being read (<= file_bytes) +
about 2 MiB of scan windows (tested in tests/bundle/test_archive_bounds.py).
"""

from __future__ import annotations

import gzip
import io
import os
import re
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import IO

from cacheon_subnet.bundle.cuda import check_source_sizes
from cacheon_subnet.bundle.digest import content_digest
from cacheon_subnet.bundle.limits import (
    DEFAULT_LIMITS,
    MANIFEST,
    Budget,
    Limits,
    check_content,
    check_file_type,
    check_path,
)
from cacheon_subnet.bundle.manifest import Manifest, parse_manifest
from cacheon_subnet.bundle.tarscan import Entry, prescan
from cacheon_subnet.env import SCRATCH
from cacheon_subnet.errors import BundleError
from cacheon_subnet.procs import starttime
from cacheon_subnet.resources import is_resource_error


@dataclass(frozen=True)
class Bundle:
    """A validated bundle held in memory: member path -> bytes, its digest and manifest."""

    files: Mapping[str, bytes]
    digest: str
    manifest: Manifest
    source: str

    def write_to(self, root: Path, read_only: bool = True) -> Path:
        """Materialise into `root` (must not exist yet). Files 0444, dirs 0555 when read_only."""
        root.mkdir(parents=True, exist_ok=False)
        for path, data in sorted(self.files.items()):
            dest = root.joinpath(*path.split("/"))
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(dest, "xb") as f:
                f.write(data)
            if read_only:
                os.chmod(dest, 0o444)
        if read_only:
            for d, _, _ in os.walk(root):
                os.chmod(d, 0o555)
        return root

    @property
    def size(self) -> int:
        return sum(len(v) for v in self.files.values())


def load_bundle(path: str | os.PathLike[str], limits: Limits = DEFAULT_LIMITS) -> Bundle:
    """Load a directory or .tar.gz bundle; raise BundleError naming the member and rule."""
    p = Path(path)
    if p.is_symlink():
        raise BundleError(str(p), "symlink", "the bundle path itself is a symlink")
    if p.is_dir():
        files = _read_dir(p, limits)
    elif p.is_file():
        files = _read_archive(p, limits)
    else:
        raise BundleError(str(p), "not-found", "no such directory or .tar.gz file")
    return _finish(files, str(p))


def bundle_from_files(files: Mapping[str, bytes], source: str = "<memory>", limits: Limits = DEFAULT_LIMITS) -> Bundle:
    budget = Budget(limits)
    checked: dict[str, bytes] = {}
    for raw, data in files.items():
        path = check_path(raw, limits)
        check_file_type(path)
        budget.add(path, len(data))
        check_content(path, data)
        checked[path] = data
    return _finish(checked, source)


def _finish(files: dict[str, bytes], source: str) -> Bundle:
    if MANIFEST not in files:
        raise BundleError(MANIFEST, "manifest-missing", "manifest.toml must sit at the bundle root")
    _check_no_file_dir_clash(files)
    manifest = parse_manifest(files[MANIFEST], frozenset(files))
    check_source_sizes(manifest.ops, files)
    return Bundle(MappingProxyType(dict(files)), content_digest(files), manifest, source)


def _check_no_file_dir_clash(files: Mapping[str, bytes]) -> None:
    dirs = {"/".join(p.split("/")[:i]) for p in files for i in range(1, p.count("/") + 1)}
    for p in files:
        if p in dirs:
            raise BundleError(p, "file-dir-clash", "a path is both a file and a directory")


def _read_dir(root: Path, limits: Limits) -> dict[str, bytes]:
    budget = Budget(limits)
    files: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(dirnames) + sorted(filenames):
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                raise BundleError(rel, "symlink", "symbolic links are not allowed")
            if name == "__pycache__" and stat.S_ISDIR(st.st_mode):
                dirnames.remove(name)  # interpreter caches are not part of the contribution
                continue
            if stat.S_ISDIR(st.st_mode):
                check_path(rel, limits)
                continue
            if not stat.S_ISREG(st.st_mode):
                raise BundleError(rel, "special-file", "devices, fifos and sockets are not allowed")
            if st.st_nlink > 1:
                raise BundleError(rel, "hardlink", "hard-linked files are not allowed")
            path = check_path(rel, limits)
            check_file_type(path)
            budget.add(path, st.st_size)
            with open(full, "rb") as f:
                data = f.read(limits.file_bytes + 1)
            budget_check_size(path, len(data), limits)
            check_content(path, data)
            files[path] = data
    return files


def budget_check_size(path: str, n: int, limits: Limits) -> None:
    if n > limits.file_bytes:
        raise BundleError(path, "file-too-large", f"more than {limits.file_bytes} bytes")


def _read_archive(path: Path, limits: Limits) -> dict[str, bytes]:
    size = path.stat().st_size
    if size > limits.archive_bytes:
        raise BundleError(path.name, "archive-too-large", f"{size} bytes > {limits.archive_bytes}")
    if not path.name.endswith((".tar.gz", ".tgz")):
        raise BundleError(path.name, "archive-type", "bundles are directories or .tar.gz archives")
    layout = prescan(path, limits)  # bounded: PAX / long-name headers are sized before tarfile reads them
    budget = Budget(limits)
    files: dict[str, bytes] = {}
    seen = 0
    try:
        with open(path, "rb") as raw, tarfile.open(fileobj=raw, mode="r|gz") as tar:
            for member in tar:
                name = member.name
                _same_layout(path.name, name, layout, seen, member, tar.offset)
                seen += 1
                if member.isdir():
                    check_path(name, limits)
                    continue
                if member.issym():
                    raise BundleError(name, "symlink", "symbolic links are not allowed")
                if member.islnk():
                    raise BundleError(name, "hardlink", "hard links are not allowed")
                if not member.isreg():
                    raise BundleError(name, "special-file", "only regular files and directories are allowed")
                rel = check_path(name, limits)
                check_file_type(rel)
                budget.add(rel, member.size)
                fobj = tar.extractfile(member)
                data = _read_capped(fobj, rel, limits) if fobj else b""
                if len(data) != member.size:
                    raise BundleError(rel, "archive-corrupt", "member shorter than its header says")
                check_content(rel, data)
                files[rel] = data
    except (tarfile.TarError, EOFError, OSError, gzip.BadGzipFile) as e:
        if is_resource_error(e):
            raise  # this host ran out of fds/memory/disk: not the archive's fault (cacheon_subnet/resources.py)
        raise BundleError(path.name, "archive-corrupt", f"cannot read as .tar.gz: {e}") from None
    if seen != len(layout):
        raise BundleError(
            path.name,
            "archive-parse-mismatch",
            f"tarfile read {seen} entries, the bounded scan {len(layout)}: the archive parses two ways",
        )
    return files


def _same_layout(archive: str, name: str, layout: list[Entry], i: int, member: tarfile.TarInfo, next_offset: int) -> None:
    """tarfile must walk exactly the headers the bounded scan walked: otherwise the next header
    it reads may be one the scan took for data (a PAX header of any size, read whole)."""
    got = Entry(member.offset, member.size, next_offset)
    want = layout[i] if i < len(layout) else None
    if got != want:
        raise BundleError(
            name,
            "archive-parse-mismatch",
            f"{archive}: entry {i + 1} is {got} to tarfile but {want} to the bounded scan: the archive parses two ways",
        )


def _read_capped(fobj: IO[bytes], rel: str, limits: Limits) -> bytes:
    data = fobj.read(limits.file_bytes + 1)  # one allocation, never more than the cap + 1
    if len(data) > limits.file_bytes:
        raise BundleError(rel, "file-too-large", f"more than {limits.file_bytes} bytes")
    return data


def pack(src: str | os.PathLike[str], out: str | os.PathLike[str], limits: Limits = DEFAULT_LIMITS) -> Bundle:
    """Deterministic .tar.gz: sorted members, zero mtimes/owners, fixed modes, no gzip name."""
    bundle = load_bundle(src, limits)
    tmp = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=tmp, mtime=0, compresslevel=9) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(bundle.files, key=lambda s: s.encode("utf-8")):
                data = bundle.files[path]
                info = tarfile.TarInfo(path)
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                tar.addfile(info, io.BytesIO(data))
    blob = tmp.getvalue()
    if len(blob) > limits.archive_bytes:
        raise BundleError(str(out), "archive-too-large", f"{len(blob)} bytes > {limits.archive_bytes}")
    out_path = Path(out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out_path.with_name(out_path.name + ".part")
    tmp_out.write_bytes(blob)
    os.replace(tmp_out, out_path)
    return bundle


def _scratch_base() -> str | None:
    base = SCRATCH.get()
    if base:
        os.makedirs(base, exist_ok=True)
    return base


# <prefix>p<pid>.<start ticks>-<random>: the process that made it, for the sweep after a kill -9
_OWNER = re.compile(r"^cacheon-[a-z-]*p(\d+)\.(\d+)-[^/]+$")


class Scratch:
    """A private temporary directory removed on exit (read-only trees are made writable first).
    Its name carries its maker (pid and start time), so `sweep_scratch` can remove what a killed
    process left behind and never what a live one still uses."""

    def __init__(self, prefix: str = "cacheon-") -> None:
        me = os.getpid()
        self.path = Path(tempfile.mkdtemp(prefix=f"{prefix}p{me}.{starttime(me) or 0}-", dir=_scratch_base()))

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def cleanup(self) -> None:
        if self.path.exists():
            for d, _dirs, fs in os.walk(self.path):
                os.chmod(d, 0o755)
                for f in fs:
                    try:
                        os.chmod(os.path.join(d, f), 0o644, follow_symlinks=False)
                    except OSError:
                        pass
            shutil.rmtree(self.path, ignore_errors=True)


def sweep_scratch() -> list[Path]:
    """Remove the scratch dirs of this user whose maker is gone (a kill -9 skips every cleanup);
    returns what it removed. A dir whose maker still runs, another user's, or one without an owner
    tag is left alone."""
    base = Path(_scratch_base() or tempfile.gettempdir())
    gone = []
    for d in base.glob("cacheon-*"):
        m = _OWNER.match(d.name)
        try:
            mine = d.is_dir() and not d.is_symlink() and d.stat().st_uid == os.getuid()
        except OSError:
            continue
        if m and mine and starttime(int(m.group(1))) != int(m.group(2)):
            scratch = Scratch.__new__(Scratch)
            scratch.path = d
            scratch.cleanup()
            gone.append(d)
    return gone
