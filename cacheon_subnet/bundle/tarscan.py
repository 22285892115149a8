"""Bounded pre-scan of a .tar.gz before `tarfile` reads a single header.

Why: `tarfile` reads a PAX ('x'/'g') or GNU long-name ('L'/'K') header's whole payload into
memory before any caller sees a member: a 510 KiB archive whose PAX header claims 512 MiB grew
the process by 1 GB (a 64 MiB archive of such headers: ~64 GiB). This scan walks the decompressed
stream ourselves, 512-byte block by block, in bounded memory, and refuses before tarfile runs:

* a metadata header payload over `limits.header_bytes`, or all of them over `limits.meta_bytes`;
* more than `limits.entries` headers of any kind (dirs and metadata included);
* a member over `file_bytes`, regular data over `unpacked_bytes` in total;
* sparse, multi-volume or unknown entry types (their data size is not what the header says);
* a decompressed stream more than `limits.max_ratio` times the compressed bytes read (past
  `limits.ratio_floor_bytes`), or longer than `limits.stream_bytes` (all data + all headers);
* anything on which tarfile would walk other headers than this scan: two metadata headers of
  one kind before one member (tarfile lets the *first* PAX `size` win, a naive scan the last),
  a V7 directory (type NUL, name ending in `/`) with a size (tarfile reads no data for it);
  a gzip header with FEXTRA or reserved flags (CPython 3.11's tarfile inflates the extra field
  as if it were the archive, where zlib skips it: two different tar streams in one file).
  The scan returns each member's layout (`Entry`) and archive.py checks that tarfile reads the
  very same one, member by member, before it lets tarfile read the next header.

Memory: one compressed chunk + one decompressed window (`_CHUNK` each) + one metadata payload.
"""

from __future__ import annotations

import tarfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, NamedTuple

from cacheon_subnet.bundle.limits import Limits
from cacheon_subnet.errors import BundleError

_CHUNK = 1 << 20
_BLOCK = tarfile.BLOCKSIZE
_META = frozenset({b"x", b"g", b"L", b"K"})
_REGULAR = frozenset({b"0", b"\x00", b"7"})
_GZIP_TWO_VIEWS = 0x04 | 0xE0  # FEXTRA, reserved
_NO_DATA = frozenset({b"1", b"2", b"3", b"4", b"5", b"6"})  # links, devices, dirs, fifos: no data blocks
# tarfile's own header-field parsers, so a field reads here exactly as tarfile.open reads it; they are
# module-level but private (not in typeshed), hence the ignores.
_nti: Callable[[bytes], int] = tarfile.nti  # type: ignore[attr-defined]
_calc_chksums: Callable[[bytes], tuple[int, int]] = tarfile.calc_chksums  # type: ignore[attr-defined]
_InvalidHeaderError: type[Exception] = tarfile.InvalidHeaderError  # type: ignore[attr-defined]


class Entry(NamedTuple):
    """One member as the scan walked it: `offset` of its first header (a PAX / long-name header
    when it has one: what tarfile reports as TarInfo.offset), its data `size`, and the offset of
    the header that follows its data (where tarfile must read next)."""

    offset: int
    size: int
    next_offset: int


class _Inflater:
    """The gzip stream, decompressed on demand: at most one window (`_CHUNK`) of output held."""

    def __init__(self, f: BinaryIO, name: str, limits: Limits) -> None:
        self.f, self.name, self.limits = f, name, limits
        self.z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self.buf, self.pos = b"", 0
        self.compressed = 0
        self.out = 0

    def _more(self) -> None:
        if self.z.eof:
            raise BundleError(self.name, "archive-corrupt", "tar stream ends inside an entry")
        data = self.z.unconsumed_tail
        if not data:
            data = self.f.read(_CHUNK)
            self.compressed += len(data)
            if not data:
                raise BundleError(self.name, "archive-corrupt", "gzip stream ends early")
        try:
            piece = self.z.decompress(data, _CHUNK)
        except zlib.error as exc:
            raise BundleError(self.name, "archive-corrupt", f"not a gzip stream: {exc}") from None
        self.out += len(piece)
        lim = self.limits
        if self.out > lim.stream_bytes:
            raise BundleError(self.name, "unpacked-too-large", f"tar stream over {lim.stream_bytes} bytes")
        if self.out > lim.ratio_floor_bytes and self.out > lim.max_ratio * max(1, self.compressed):
            raise BundleError(
                self.name,
                "archive-ratio",
                f"decompresses to over {lim.max_ratio}x its "
                f"compressed size ({self.out} bytes from {self.compressed}): a bomb",
            )
        self.buf, self.pos = self.buf[self.pos :] + piece, 0

    @property
    def offset(self) -> int:
        """How many decompressed bytes have been consumed (taken or skipped)."""
        return self.out - (len(self.buf) - self.pos)

    def take(self, n: int) -> bytes:
        """Exactly n bytes (n is small: one block or one bounded payload)."""
        while len(self.buf) - self.pos < n:
            self._more()
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def skip(self, n: int) -> None:
        """Discard n bytes without holding more than one window."""
        while n > 0:
            if self.pos >= len(self.buf):
                self._more()
            k = min(n, len(self.buf) - self.pos)
            self.pos += k
            n -= k


def _size(header: bytes, name: str) -> int:
    try:
        n = _nti(header[124:136])
    except _InvalidHeaderError:
        raise BundleError(name, "archive-corrupt", "bad size field in a tar header") from None
    if n < 0:
        raise BundleError(name, "archive-corrupt", "negative size in a tar header")
    return n


def _checksum_ok(header: bytes) -> bool:
    try:
        want = _nti(header[148:156])
    except _InvalidHeaderError:
        return False
    return want in _calc_chksums(header)


def _pax_size(payload: bytes, name: str) -> int | None:
    """The `size` record of a PAX header, if any (it overrides the next header's size field)."""
    size, pos = None, 0
    while pos < len(payload) and payload[pos : pos + 1] != b"\x00":
        sp = payload.find(b" ", pos)
        try:
            length = int(payload[pos:sp])
        except ValueError:
            raise BundleError(name, "archive-corrupt", "malformed PAX record") from None
        if sp < 0 or length <= 0 or pos + length > len(payload):
            raise BundleError(name, "archive-corrupt", "malformed PAX record")
        key, _, value = payload[sp + 1 : pos + length - 1].partition(b"=")
        if key.startswith(b"GNU.sparse"):
            raise BundleError(name, "special-file", "sparse members are not allowed")
        if key == b"size":
            try:
                size = int(value)
            except ValueError:
                raise BundleError(name, "archive-corrupt", "non-numeric PAX size") from None
        pos += length
    return size


def _gzip_flags(f: BinaryIO, name: str) -> None:
    """tarfile parses the gzip header itself (not through zlib): only flags both read alike."""
    head = f.read(4)
    f.seek(0)
    if len(head) == 4 and head[:3] == b"\x1f\x8b\x08" and head[3] & _GZIP_TWO_VIEWS:
        raise BundleError(
            name,
            "archive-gzip-header",
            f"gzip header flags 0x{head[3]:02x}: FEXTRA "
            "(tarfile inflates the extra field as the archive) and reserved flags are "
            "not allowed; write the archive with `cacheon pack`",
        )


def prescan(path: Path, limits: Limits) -> list[Entry]:
    """Each member's layout, or BundleError unless the archive's headers fit the limits (see
    the module doc)."""
    name = path.name
    layout: list[Entry] = []
    with open(path, "rb") as f:
        _gzip_flags(f, name)
        inf = _Inflater(f, name, limits)
        entries = meta = data = 0
        pending_size: int | None = None
        chain: set[bytes] = set()  # metadata kinds seen since the last member
        first: int | None = None  # offset of the first header of the current member
        while True:
            start = inf.offset
            header = inf.take(_BLOCK)
            if header == bytes(_BLOCK):
                if chain:
                    raise BundleError(name, "archive-corrupt", "the archive ends after a metadata header")
                return layout  # end of archive: tarfile stops here too and never reads what follows
            if not _checksum_ok(header):
                raise BundleError(name, "archive-corrupt", f"bad tar header checksum (entry {entries + 1})")
            entries += 1
            if entries > limits.entries:
                raise BundleError(name, "too-many-members", f"more than {limits.entries} tar entries")
            kind, size = header[156:157], _size(header, name)
            first = start if first is None else first
            if kind in _META:
                if kind in chain:
                    raise BundleError(
                        name,
                        "archive-header-chain",
                        f"two {kind.decode()!r} metadata "
                        f"headers before one member (entry {entries}): tarfile and a scan "
                        "disagree on which one applies",
                    )
                chain.add(kind)
                if size > limits.header_bytes:
                    raise BundleError(
                        name,
                        "archive-header-too-large",
                        f"a {kind.decode()!r} metadata header of {size} bytes > {limits.header_bytes} (PAX / GNU long name)",
                    )
                meta += size
                if meta > limits.meta_bytes:
                    raise BundleError(
                        name, "archive-header-too-large", f"metadata headers total over {limits.meta_bytes} bytes"
                    )
                payload = inf.take(size)
                inf.skip(-size % _BLOCK)
                if kind == b"x":
                    pending_size = _pax_size(payload, name)
                elif kind == b"g" and _pax_size(payload, name) is not None:
                    raise BundleError(name, "archive-corrupt", "a global PAX header may not set size")
                continue
            if pending_size is not None:
                size, pending_size = pending_size, None
            chain.clear()
            if kind == b"\x00" and header[:100].split(b"\x00", 1)[0].endswith(b"/"):
                if size:  # tarfile's frombuf: a V7 directory, and directories have no data blocks
                    raise BundleError(
                        name,
                        "archive-corrupt",
                        f"a type-NUL entry named like a directory claims {size} bytes of data (entry {entries})",
                    )
                kind = b"5"
            if kind in _NO_DATA:
                layout.append(Entry(first, size, inf.offset))
                first = None
                continue
            if kind not in _REGULAR:
                raise BundleError(name, "special-file", f"tar entry type {kind!r} is not allowed")
            if size > limits.file_bytes:
                raise BundleError(name, "file-too-large", f"a member of {size} bytes > {limits.file_bytes}")
            data += size
            if data > limits.unpacked_bytes:
                raise BundleError(name, "unpacked-too-large", f"total unpacked size > {limits.unpacked_bytes}")
            inf.skip(size + (-size % _BLOCK))
            layout.append(Entry(first, size, inf.offset))
            first = None
