"""Bundle limits and path rules. Every rule has a stable id used in error messages."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from cacheon_subnet.errors import BundleError

MiB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    archive_bytes: int = 64 * MiB
    unpacked_bytes: int = 256 * MiB
    members: int = 4096
    file_bytes: int = 16 * MiB
    path_chars: int = 255
    depth: int = 8
    # Archive headers, checked before tarfile reads one (bundle/tarscan.py):
    header_bytes: int = 64 * 1024  # one PAX / GNU long-name header payload
    meta_bytes: int = 4 * MiB  # all such payloads together
    entries: int = 16384  # tar headers of any kind (members, dirs, metadata)
    max_ratio: int = 200  # decompressed / compressed bytes ...
    ratio_floor_bytes: int = 4 * MiB  # ... once past this much output

    @property
    def stream_bytes(self) -> int:
        """The longest decompressed tar stream these limits allow: data, metadata, two blocks
        (header + padding) per entry, and the end-of-archive record."""
        return self.unpacked_bytes + self.meta_bytes + self.entries * 2 * 512 + 20 * 512


DEFAULT_LIMITS = Limits()

ALLOWED_SUFFIXES = frozenset({".py", ".toml", ".md", ".txt", ".json", ".rst", ".cu", ".cuh", ".h", ".hpp", ".cpp", ".c"})
ALLOWED_BARE_NAMES = frozenset({"LICENSE", "NOTICE", "README", "AUTHORS"})
# Names Python or pytest would execute on their own: a bundle never gets to plant them.
FORBIDDEN_NAMES = frozenset({"sitecustomize.py", "usercustomize.py", "conftest.py", "__main__.py"})
TEXT_SUFFIXES = ALLOWED_SUFFIXES  # every allowed type is source text

_COMPONENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")
MANIFEST = "manifest.toml"


@dataclass(frozen=True)
class CudaLimits:
    """An op's CUDA sources (manifest `[ops.cuda]`, compiled by native/): few, small files with
    plain names, so the compile lane's input is bounded before nvcc reads a byte of it."""

    sources: int = 32  # files in `sources` (.cu translation units and the .cuh headers they include)
    source_bytes: int = 512 * 1024  # one file
    total_bytes: int = 2 * MiB  # all of an op's sources together
    bundle_bytes: int = 4 * MiB  # every op's sources added up (a shared file counts once an op)
    kernels: int = 32  # declared kernels per op
    params: int = 64  # parameters per kernel


DEFAULT_CUDA_LIMITS = CudaLimits()
# No dash, space, dot or leading `-` anywhere but the suffix: a name can never read as a compiler
# flag, a second argument or a path outside the bundle (nvcc gets it as one argv element anyway).
CUDA_SOURCE = re.compile(r"^(?:[A-Za-z0-9_]{1,64}/){0,3}[A-Za-z0-9_]{1,64}\.(?:cu|cuh)$")


def check_path(raw: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """Validate a member path and return its canonical POSIX form, or raise BundleError."""
    if not raw or "\x00" in raw:
        raise BundleError(repr(raw), "path-empty-or-nul", "empty path or NUL byte in path")
    if "\\" in raw:
        raise BundleError(raw, "path-backslash", "backslashes are not allowed in paths")
    if raw.startswith("/") or re.match(r"^[A-Za-z]:", raw):
        raise BundleError(raw, "path-absolute", "absolute paths are not allowed")
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise BundleError(raw, "path-parent", "'..' components are not allowed")
    if not parts:
        raise BundleError(raw, "path-empty-or-nul", "path has no components")
    path = "/".join(parts)
    if len(path) > limits.path_chars:
        raise BundleError(path, "path-too-long", f"{len(path)} chars > {limits.path_chars}")
    if len(parts) > limits.depth:
        raise BundleError(path, "path-too-deep", f"{len(parts)} levels > {limits.depth}")
    if "__pycache__" in parts:  # the dir reader and the engine tree's re-digest skip it: two digests
        raise BundleError(path, "path-pycache", "__pycache__ holds interpreter caches, never bundle content")
    for p in parts:
        if not _COMPONENT.fullmatch(p):  # fullmatch: `$` also matches before a trailing newline
            raise BundleError(path, "path-chars", f"component {p!r} must match {_COMPONENT.pattern}")
    return path


def check_file_type(path: str) -> None:
    """Only source/text types are allowed: no binaries, no .pth, no compiled Python."""
    name = PurePosixPath(path).name
    if name in FORBIDDEN_NAMES:
        raise BundleError(path, "file-name", f"{name} is executed implicitly by Python tooling; not allowed")
    suffix = PurePosixPath(path).suffix
    if name in ALLOWED_BARE_NAMES:
        return
    if suffix not in ALLOWED_SUFFIXES:
        allowed = " ".join(sorted(ALLOWED_SUFFIXES))
        raise BundleError(path, "file-type", f"type {suffix or '(none)'!r} is not allowed (allowed: {allowed})")


def check_content(path: str, data: bytes) -> None:
    if b"\x00" in data:
        raise BundleError(path, "file-binary", "NUL byte in a source file (binary content is not allowed)")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BundleError(path, "file-encoding", f"not UTF-8 text ({e.reason} at byte {e.start})") from None


class Budget:
    """Running totals while reading members, so a bomb stops at the first byte over."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.members = 0
        self.bytes = 0
        self.seen_lower: dict[str, str] = {}

    def add(self, path: str, size: int) -> None:
        self.members += 1
        if self.members > self.limits.members:
            raise BundleError(path, "too-many-members", f"more than {self.limits.members} files")
        if size > self.limits.file_bytes:
            raise BundleError(path, "file-too-large", f"{size} bytes > {self.limits.file_bytes}")
        self.bytes += size
        if self.bytes > self.limits.unpacked_bytes:
            raise BundleError(path, "unpacked-too-large", f"total unpacked size > {self.limits.unpacked_bytes}")
        low = path.lower()
        if low in self.seen_lower:
            other = self.seen_lower[low]
            rule = "duplicate-path" if other == path else "case-collision"
            raise BundleError(path, rule, f"collides with {other!r}")
        self.seen_lower[low] = path
