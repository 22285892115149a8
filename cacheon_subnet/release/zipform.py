"""The one zip layout a release wheel may have: what `wheel.write_wheel` writes, and nothing any
reader could see otherwise.

Why: `zipfile` (verify, pip) reads the central directory; a streaming unzipper reads the local
headers front to back; Python 3.12's zipfile honours an Info-ZIP Unicode Path extra field that
3.11 ignores; zip readers differ on prepended bytes, directory and symlink entries. Verify judges
the members zipfile lists, so bytes outside them are bytes nobody verified: an extra local entry
spliced before the central directory, a whole zip prepended, a directory entry, trailing bytes
all verified (red team, session 20). So a release wheel is refused unless its bytes are exactly
the local entries, back to back from offset 0, each matching its central directory entry field for
field, then the central directory, then an end record with no comment; plain relative ASCII
names, regular files, stored or deflated, no flags but UTF-8, no extra fields, no zip64.
"""

from __future__ import annotations

import re
import stat
import struct

LOCAL = struct.Struct("<4sHHHHHIIIHH")  # local file header (30 bytes)
CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")  # central directory header (46 bytes)
END = struct.Struct("<4sHHHHIIH")  # end of central directory record (22 bytes)
UTF8_FLAG = 0x800
METHODS = {0: "stored", 8: "deflated"}
# a path of plain parts: the names a release holds (bundle file names are [A-Za-z0-9_.-], bundle/limits.py)
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.\-]*)*\Z")


def _name_problem(raw_name: bytes) -> str | None:
    name = raw_name.decode("utf-8", "replace")
    if not raw_name.isascii() or not NAME.match(name):
        return (
            f"member {name!r} is not a plain relative path inside the wheel (ASCII letters, digits, '_', '.', '-' "
            "parts; no '..', '.', empty or absolute part, no directory entry)"
        )
    return None


def layout_problem(raw: bytes, max_members: int) -> str | None:
    """None when `raw` is laid out as a release wheel must be (module doc), else what is not."""
    if len(raw) < END.size or raw[-END.size : -END.size + 4] != b"PK\x05\x06":
        return "does not end with a zip end record (not a zip, or trailing bytes or an archive comment after it)"
    _, disk, cd_disk, n_disk, n_total, cd_size, cd_off, comment = END.unpack_from(raw, len(raw) - END.size)
    if disk or cd_disk or n_disk != n_total:
        return "a multi-disk zip"
    if n_total > max_members:
        return f"{n_total} members, more than {max_members}"
    if comment or cd_off + cd_size != len(raw) - END.size:
        return "the central directory does not end where the end record begins (zip64, a comment or stray bytes)"
    pos, expect, seen = cd_off, 0, set()
    for _ in range(n_total):
        if pos + CENTRAL.size > cd_off + cd_size or raw[pos : pos + 4] != b"PK\x01\x02":
            return f"the central directory is cut short at offset {pos}"
        (_, _, _, flags, method, _, _, crc, csize, usize, nlen, xlen, clen, d0, _, attr, off) = CENTRAL.unpack_from(raw, pos)
        raw_name = raw[pos + CENTRAL.size : pos + CENTRAL.size + nlen]
        pos += CENTRAL.size + nlen + xlen + clen
        problem = _name_problem(raw_name)
        if problem:
            return problem
        name = raw_name.decode("ascii")
        if name in seen:
            return f"member {name!r} appears twice"
        seen.add(name)
        if xlen or clen or d0:
            return f"member {name!r}: extra fields, a comment or another disk (a release wheel has none)"
        if flags & ~UTF8_FLAG:
            return f"member {name!r}: flags 0x{flags:04x} (encrypted, a data descriptor or an option a release never uses)"
        if method not in METHODS:
            return f"member {name!r}: compression method {method} (a release is stored or deflated)"
        if stat.S_IFMT(attr >> 16) not in (0, stat.S_IFREG):
            return f"member {name!r} is not a regular file (mode 0o{attr >> 16:o}: a symlink, directory or device)"
        if off != expect:
            return (
                f"member {name!r}: its local header is at offset {off}, expected {expect} "
                "(bytes no central directory entry covers: a hidden or prepended entry)"
            )
        if off + LOCAL.size > cd_off or raw[off : off + 4] != b"PK\x03\x04":
            return f"member {name!r}: no local header at offset {off}"
        _, _, lflags, lmethod, _, _, lcrc, lcsize, lusize, lnlen, lxlen = LOCAL.unpack_from(raw, off)
        lname = raw[off + LOCAL.size : off + LOCAL.size + lnlen]
        if (lflags, lmethod, lcrc, lcsize, lusize, lname, lxlen) != (flags, method, crc, csize, usize, raw_name, 0):
            return f"member {name!r}: its local header differs from its central directory entry"
        expect = off + LOCAL.size + nlen + csize
    if expect != cd_off:
        return f"{cd_off - expect} bytes between the last member and the central directory (a hidden entry)"
    if pos != cd_off + cd_size:
        return "the central directory's size differs from its entries'"
    return None
