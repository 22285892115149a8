"""A pure-Python wheel written and read with the standard library's zipfile.

Why not `build`/`wheel`: neither is a dependency, and a release must build offline and byte for
byte the same from the same crowns (fixed timestamps, sorted members, fixed modes), so two
builders can compare wheels by digest. RECORD follows the wheel spec (urlsafe-base64 SHA-256,
no padding, and the size; RECORD itself unhashed); reading refuses a member listed twice, an
absolute or `..` path, and a wheel larger than the bounds below.
"""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cacheon_subnet.errors import CacheonError

ZIP_TIME = (1980, 1, 1, 0, 0, 0)
MAX_MEMBERS = 8192
MAX_BYTES = 512 << 20  # unpacked; a release carries kernels, not weights
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
        z = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as e:
        raise WheelError(f"{path}: not a readable wheel ({e})") from None
    with z:
        infos = z.infolist()
        if len(infos) > MAX_MEMBERS:
            raise WheelError(f"{path}: {len(infos)} members, more than {MAX_MEMBERS}")
        if sum(i.file_size for i in infos) > MAX_BYTES:
            raise WheelError(f"{path}: more than {MAX_BYTES >> 20} MiB unpacked")
        out: dict[str, bytes] = {}
        for i in infos:
            if i.is_dir():
                continue
            n = i.filename
            if n.startswith("/") or ".." in n.split("/") or "\\" in n:
                raise WheelError(f"{path}: member {n!r} is not a relative path inside the wheel")
            if n in out:
                raise WheelError(f"{path}: member {n!r} appears twice")
            try:
                out[n] = z.read(i)
            except (zipfile.BadZipFile, OSError) as e:  # a CRC error is a damaged member
                raise WheelError(f"{path}: member {n!r} cannot be read ({e})") from None
        return out


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
