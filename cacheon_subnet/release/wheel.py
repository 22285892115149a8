"""A pure-Python wheel written and read with the standard library's zipfile.

Why not `build`/`wheel`: neither is a dependency, and a release must build offline and byte for
byte the same from the same crowns (fixed timestamps, sorted members, fixed modes), so two
builders can compare wheels by digest. RECORD follows the wheel spec (urlsafe-base64 SHA-256,
no padding, and the size; RECORD itself unhashed); reading refuses any layout but the one written
here (zipform.py: a member listed twice, an absolute or `..` path, bytes outside the members) and a
wheel larger than the bounds below, and inflates each member in bounded steps: zipfile's `read()`
inflates a member's whole stream in one call before cutting it to the declared size (a 206 KiB
member declared 10 bytes took 434 MiB, red team session 20).
"""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cacheon_subnet.errors import CacheonError
from cacheon_subnet.release.zipform import layout_problem

ZIP_TIME = (1980, 1, 1, 0, 0, 0)
MAX_MEMBERS = 8192
MAX_BYTES = 512 << 20  # unpacked; a release carries kernels, not weights
MAX_WHEEL_BYTES = 128 << 20  # the file itself
CHUNK = 1 << 20  # what one inflate step may produce
# what zipfile raises on a damaged member (a CRC error, a broken deflate stream, a bad name)
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, RuntimeError, NotImplementedError)
GENERATOR = "cacheon release build"


class WheelError(CacheonError):
    """A wheel that cannot be read as one (names the file and what is wrong)."""


@dataclass(frozen=True)
class WheelName:
    dist: str  # normalized distribution name (underscores)
    version: str

    @property
    def dist_info(self) -> str:
        return f"{self.dist}-{self.version}.dist-info"

    @property
    def filename(self) -> str:
        return f"{self.dist}-{self.version}-py3-none-any.whl"


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def metadata(name: WheelName, summary: str, requires: tuple[str, ...]) -> bytes:
    lines = ["Metadata-Version: 2.1", f"Name: {name.dist}", f"Version: {name.version}", f"Summary: {summary}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    return ("\n".join(lines) + "\n").encode()


def wheel_file() -> bytes:
    return f"Wheel-Version: 1.0\nGenerator: {GENERATOR}\nRoot-Is-Purelib: true\nTag: py3-none-any\n".encode()


def entry_points(group: str, plugin: str, target: str) -> bytes:
    return f"[{group}]\n{plugin} = {target}\n".encode()


def record(files: Mapping[str, bytes], record_path: str) -> bytes:
    rows = [f"{p},{record_hash(d)},{len(d)}" for p, d in sorted(files.items())]
    return ("\n".join([*rows, f"{record_path},,"]) + "\n").encode()


def write_wheel(out: Path, name: WheelName, files: Mapping[str, bytes]) -> Path:
    """`files` are every member but RECORD (dist-info included); RECORD is computed here."""
    rec = f"{name.dist_info}/RECORD"
    members = dict(files)
    members[rec] = record(files, rec)
    path = out / name.filename
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        # dist-info last, RECORD very last: what installers expect and what a reader streams
        for p in sorted(members, key=lambda p: (p.startswith(name.dist_info), p == rec, p)):
            info = zipfile.ZipInfo(p, ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, members[p])
    tmp = path.with_suffix(".whl.tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(path)
    return path


def read_wheel(path: Path) -> dict[str, bytes]:
    """Every member of the wheel at `path`, bounded; WheelError says which file and why."""
    try:
        size = path.stat().st_size
        if size > MAX_WHEEL_BYTES:
            raise WheelError(f"{path}: {size} bytes, more than a release wheel's {MAX_WHEEL_BYTES}")
        raw = path.read_bytes()
    except OSError as e:
        raise WheelError(f"{path}: not a readable wheel ({e.strerror})") from None
    problem = layout_problem(raw, MAX_MEMBERS)
    if problem:
        raise WheelError(f"{path}: {problem}")
    try:
        z = zipfile.ZipFile(io.BytesIO(raw))
    except _ZIP_ERRORS as e:
        raise WheelError(f"{path}: not a readable wheel ({e})") from None
    with z:
        infos = z.infolist()
        if sum(i.file_size for i in infos) > MAX_BYTES:
            raise WheelError(f"{path}: more than {MAX_BYTES >> 20} MiB unpacked")
        out: dict[str, bytes] = {}
        for i in infos:
            try:
                out[i.filename] = _inflate(z, i)
            except _ZIP_ERRORS as e:
                raise WheelError(f"{path}: member {i.filename!r} cannot be read ({e})") from None
        return out


def _inflate(z: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """One member, CHUNK bytes an inflate step; zipfile stops at the declared size, then checks the CRC."""
    parts = []
    with z.open(info) as f:
        while chunk := f.read(CHUNK):
            parts.append(chunk)
    return b"".join(parts)


def parse_record(text: bytes, where: str) -> dict[str, tuple[str, str]]:
    """RECORD rows: path -> (hash, size) (both empty for RECORD itself)."""
    rows: dict[str, tuple[str, str]] = {}
    for n, line in enumerate(text.decode("utf-8", "replace").splitlines(), 1):
        if not line:
            continue
        parts = line.rsplit(",", 2)
        if len(parts) != 3:
            raise WheelError(f"{where} line {n}: {line[:80]!r} is not path,hash,size")
        if parts[0] in rows:
            raise WheelError(f"{where} line {n}: {parts[0]} listed twice")
        rows[parts[0]] = (parts[1], parts[2])
    return rows
