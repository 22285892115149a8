"""Archives on which the bounded pre-scan (bundle/tarscan.py) and `tarfile` disagree.

The pre-scan bounds memory only if it walks the same headers tarfile will read. Where the two
parsers disagree on how much data follows a header, a giant PAX header can sit where the scan
sees member data (skipped) and tarfile sees a header (read whole into memory): the red team's
204 KB archives below drove `load_bundle` to a 410 MiB peak (linear in the archive: 64 MiB of
gzip is ~64 GiB), in the validator's own process, before any member check.

* two PAX extended headers before one member: tarfile applies the *first* one's `size` last
  (it wins), the scan kept the last one's;
* a V7 directory (type NUL, name ending in `/`): tarfile turns it into a directory with no
  data blocks, the scan skipped `size` bytes of data;
* a gzip FEXTRA field: CPython 3.11's tarfile "skips" it with `self.read(xlen)`, i.e. inflates
  the extra field itself as the archive, while zlib (the scan) skips it: two whole tar streams
  in one file. A 65 KB archive whose extra field holds a 60 MiB PAX header peaked at 129 MiB
  (tarfile reads its first header inside `tarfile.open`, before any cross-check).

Each must be refused by the scan (named rule), and peak memory stays a few MiB.
"""

from __future__ import annotations

import struct
import sys
import tarfile
import tracemalloc
import zlib
from pathlib import Path

import pytest

from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.errors import BundleError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bundle"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validator"))
from test_archive_bounds import MANIFEST, MiB, _gz, _header, _member  # noqa: E402

HIDDEN = 48 * MiB  # the hidden PAX header's payload, really present in the gzip stream


def _pax(records: dict[str, str]) -> bytes:
    body = b""
    for k, v in records.items():
        rec = f" {k}={v}\n".encode()
        n = len(rec) + 1
        while len(str(n)) + len(rec) != n:
            n = len(str(n)) + len(rec)
        body += str(n).encode() + rec
    return _header("././@PaxHeader", len(body), tarfile.XHDTYPE) + body + bytes(-len(body) % 512)


def _hidden_region(lead: bytes, scan_size: int) -> bytes:
    """`lead`, then the giant PAX header, padded to what the scan believes is member data."""
    return (lead + _header("././@PaxHeader", HIDDEN, tarfile.XHDTYPE)).ljust(scan_size, b"\n")


def _pax_chain(tmp: Path) -> Path:
    small, scan = 512, 4096  # tarfile: 512 bytes of data; the scan (before the fix): 4096
    region = _hidden_region(b"x = 1\n".ljust(small, b"#"), scan)
    return _gz(
        tmp / "chain.tar.gz",
        _member("manifest.toml", MANIFEST),
        _pax({"size": str(small)}),
        _pax({"comment": "second"}),
        _header("k/f.py", scan, tarfile.REGTYPE),
        region,
        bytes(1024),
        (HIDDEN, 0x20),
    )


def _pax_chain_two_sizes(tmp: Path) -> Path:
    small, scan = 512, 4096
    region = _hidden_region(b"x = 1\n".ljust(small, b"#"), scan)
    return _gz(
        tmp / "chain2.tar.gz",
        _member("manifest.toml", MANIFEST),
        _pax({"size": str(small)}),
        _pax({"size": str(scan)}),
        _header("k/f.py", 0, tarfile.REGTYPE),
        region,
        bytes(1024),
        (HIDDEN, 0x20),
    )


def _v7_dir(tmp: Path) -> Path:
    scan = 4096
    return _gz(
        tmp / "v7.tar.gz",
        _member("manifest.toml", MANIFEST),
        _header("d/", scan, tarfile.AREGTYPE),
        _hidden_region(b"", scan),
        bytes(1024),
        (HIDDEN, 0x20),
    )


def _gzip_extra(tmp: Path) -> Path:
    def deflate(data: bytes) -> bytes:
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        return c.compress(data) + c.flush()

    xlen = 65000  # tarfile discards this many inflated bytes, then reads the tar behind them
    seen_by_tarfile = _header("././@PaxHeader", HIDDEN, tarfile.XHDTYPE) + bytes(HIDDEN) + bytes(1024)
    extra = deflate(bytes(xlen) + seen_by_tarfile)
    extra += b"\xff" * (xlen - len(extra))
    seen_by_scan = _member("manifest.toml", MANIFEST) + bytes(1024)
    gz = (
        b"\x1f\x8b\x08\x04"
        + bytes(6)
        + struct.pack("<H", xlen)
        + extra
        + deflate(seen_by_scan)
        + struct.pack("<II", zlib.crc32(seen_by_scan), len(seen_by_scan))
    )
    (tmp / "extra.tar.gz").write_bytes(gz)
    return tmp / "extra.tar.gz"


CASES = {
    "gzip_extra_field": (_gzip_extra, "archive-gzip-header"),
    "pax_chain": (_pax_chain, "archive-header-chain"),
    "pax_chain_two_sizes": (_pax_chain_two_sizes, "archive-header-chain"),
    "v7_directory_with_size": (_v7_dir, "archive-corrupt"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hidden_header_is_refused_in_bounded_memory(tmp_path, case):
    build, rule = CASES[case]
    arc = build(tmp_path)
    assert arc.stat().st_size < 200_000
    tracemalloc.start()
    try:
        with pytest.raises(BundleError) as e:
            load_bundle(arc)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * MiB, f"load_bundle peaked at {peak / MiB:.0f} MiB ({e.value})"
    assert e.value.rule == rule, e.value


def test_scan_and_tarfile_agree_on_every_member_of_a_packed_bundle(tmp_path):
    """The cross-check (tarfile's offsets against the scan's) passes real archives."""
    from cacheon_subnet.bundle import pack

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validator"))
    from validator_fakes import EXAMPLES

    b = pack(EXAMPLES / "norm.rmsnorm", tmp_path / "ok.tar.gz")
    assert load_bundle(tmp_path / "ok.tar.gz").digest == b.digest


def test_layout_mismatch_is_refused_before_the_next_header(tmp_path, monkeypatch):
    """Defence in depth: any other disagreement between the two parsers (simulated here by a
    scan that reports a different layout) stops the read at that member, naming it."""
    from cacheon_subnet.bundle import archive, pack, tarscan

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validator"))
    from validator_fakes import EXAMPLES

    pack(EXAMPLES / "norm.rmsnorm", tmp_path / "ok.tar.gz")
    real = tarscan.prescan

    def skewed(path, limits):
        layout = real(path, limits)
        first = layout[0]
        return [tarscan.Entry(first.offset, first.size + 1, first.next_offset + 512), *layout[1:]]

    monkeypatch.setattr(archive, "prescan", skewed)
    with pytest.raises(BundleError) as e:
        load_bundle(tmp_path / "ok.tar.gz")
    assert e.value.rule == "archive-parse-mismatch", e.value
