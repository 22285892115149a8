"""Hostile archives: memory is bounded before tarfile reads any header (bundle/tarscan.py).

The faults from issue 16, kept as tests: a small .tar.gz whose PAX (or GNU long-name) header
claims hundreds of MiB made load_bundle grow by 1 GB before any member check. Peak memory is
measured with tracemalloc, for load_bundle alone and for fetch + unpack over loopback.
"""

from __future__ import annotations

import asyncio
import random
import sys
import tarfile
import tracemalloc
import zlib
from pathlib import Path

import pytest

from cacheon_subnet.bundle import Limits, load_bundle
from cacheon_subnet.errors import BundleError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validator"))
from validator_fakes import EXAMPLES, FileServer  # noqa: E402

MiB = 1 << 20


def _header(name: str, size: int, kind: bytes, fmt: int = tarfile.USTAR_FORMAT) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type = size, kind
    return info.tobuf(format=fmt)


def _member(name: str, data: bytes) -> bytes:
    return _header(name, len(data), tarfile.REGTYPE) + data + bytes(-len(data) % 512)


def _gz(path: Path, *pieces: bytes | tuple[int, int]) -> Path:
    """Write a gzip stream of `pieces`; a (n, fill) tuple streams n bytes of `fill` (never held)."""
    z = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    with open(path, "wb") as f:
        for p in pieces:
            if isinstance(p, tuple):
                n, fill = p
                block = bytes([fill]) * MiB
                while n > 0:
                    f.write(z.compress(block[: min(n, MiB)]))
                    n -= MiB
            else:
                f.write(z.compress(p))
        f.write(z.compress(bytes(1024)) + z.flush())
    return path


MANIFEST = (EXAMPLES / "norm.rmsnorm" / "manifest.toml").read_bytes()


def _rule(path: Path, limits: Limits | None = None) -> str:
    with pytest.raises(BundleError) as e:
        load_bundle(path, *([limits] if limits else []))
    return e.value.rule


@pytest.mark.parametrize(
    "kind, fmt",
    [
        (tarfile.XHDTYPE, tarfile.USTAR_FORMAT),
        (tarfile.XGLTYPE, tarfile.USTAR_FORMAT),
        (tarfile.GNUTYPE_LONGNAME, tarfile.GNU_FORMAT),
        (tarfile.GNUTYPE_LONGLINK, tarfile.GNU_FORMAT),
    ],
)
def test_metadata_header_of_512_mib_is_refused_before_it_is_read(tmp_path, kind, fmt):
    # Claims 512 MiB; only 1 MiB is present, so without the pre-scan tarfile would read it and
    # fail as "archive-corrupt" (and with the bytes present, hold all of them).
    arc = _gz(tmp_path / "bomb.tar.gz", _header("././@Meta", 512 * MiB, kind, fmt), (MiB, 0x61))
    assert _rule(arc) == "archive-header-too-large"


@pytest.fixture(scope="module")
def pax_bomb(tmp_path_factory) -> Path:
    """A PAX header whose 48 MiB payload is really there (about 50 KiB compressed)."""
    tmp = tmp_path_factory.mktemp("bomb")
    return _gz(
        tmp / "pax.tar.gz",
        _header("././@PaxHeader", 48 * MiB, tarfile.XHDTYPE),
        (48 * MiB, 0x61),
        _member("manifest.toml", MANIFEST),
    )


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def test_peak_memory_of_a_pax_bomb_is_bounded(pax_bomb):
    assert pax_bomb.stat().st_size < 200_000

    def go():
        with pytest.raises(BundleError) as e:
            load_bundle(pax_bomb)
        assert e.value.rule == "archive-header-too-large"

    peak = _peak(go)
    assert peak < 4 * MiB, f"load_bundle peaked at {peak / MiB:.1f} MiB on a 48 MiB PAX header"


def test_peak_memory_of_fetch_plus_unpack_of_a_pax_bomb_is_bounded(pax_bomb, tmp_path):
    from cacheon_subnet.netpolicy import LOCAL
    from cacheon_subnet.validator.fetch import FetchError, FetchPolicy, fetch_bundle

    with FileServer() as srv:
        url = srv.add("pax.tar.gz", pax_bomb)

        def go():
            with pytest.raises(FetchError) as e:
                asyncio.run(fetch_bundle(url, "0" * 64, tmp_path, FetchPolicy(urls=LOCAL)))
            assert e.value.reason == "bundle_invalid" and "archive-header-too-large" in e.value.detail

        peak = _peak(go)
    assert peak < 8 * MiB, f"fetch + unpack peaked at {peak / MiB:.1f} MiB"


def test_worst_case_memory_of_an_allowed_archive_is_the_unpacked_limit(tmp_path):
    """Everything a bundle may hold is held (files are kept in memory): the peak is the
    unpacked limit plus one member being read plus the scan windows, whatever the archive."""
    lim = Limits(unpacked_bytes=6 * MiB, file_bytes=2 * MiB, members=64)
    text = random.Random(0).randbytes(MiB).hex().encode()[: 2 * MiB - 1]  # text that does not compress away
    parts = [_member("manifest.toml", MANIFEST)] + [_member(f"k{i}.txt", text) for i in range(2)]
    parts += [
        _member(n, (EXAMPLES / "norm.rmsnorm" / n).read_bytes())
        for n in ("kernel.py",)
        if (EXAMPLES / "norm.rmsnorm" / n).is_file()
    ]
    arc = _gz(tmp_path / "big.tar.gz", *parts)
    try:
        load_bundle(arc, lim)
    except BundleError as exc:  # a manifest detail is fine here: the memory is what is measured
        assert exc.rule.startswith("manifest"), exc
    peak = _peak(lambda: _safe_load(arc, lim))
    bound = lim.unpacked_bytes + lim.file_bytes + 3 * MiB
    assert peak < bound, f"peak {peak / MiB:.1f} MiB > bound {bound / MiB:.1f} MiB"


def _safe_load(arc: Path, lim: Limits) -> None:
    try:
        load_bundle(arc, lim)
    except BundleError as exc:
        assert exc.rule.startswith("manifest"), exc


def test_compression_ratio_bomb_is_refused(tmp_path):
    arc = _gz(
        tmp_path / "ratio.tar.gz",
        _member("manifest.toml", MANIFEST),
        _header("big.txt", 15 * MiB, tarfile.REGTYPE),
        (15 * MiB, 0x61),
    )
    assert _rule(arc) == "archive-ratio"


def test_entry_count_counts_dirs_and_metadata(tmp_path):
    lim = Limits(entries=100)
    dirs = b"".join(_header(f"d{i}/", 0, tarfile.DIRTYPE) for i in range(101))
    arc = _gz(tmp_path / "dirs.tar.gz", _member("manifest.toml", MANIFEST), dirs)
    assert _rule(arc, lim) == "too-many-members"


def test_sparse_members_are_refused(tmp_path):
    arc = _gz(
        tmp_path / "sparse.tar.gz",
        _member("manifest.toml", MANIFEST),
        _header("s.txt", 0, tarfile.GNUTYPE_SPARSE, tarfile.GNU_FORMAT),
    )
    assert _rule(arc) == "special-file"


def test_pax_size_record_overrides_the_header_for_the_scan(tmp_path):
    """A PAX `size` says how much data follows; the scan must honour it like tarfile does."""
    body = b" size=%d\n" % (20 * MiB)
    n = len(body)
    while len(str(n)) + len(body) != n:
        n = len(str(n)) + len(body)
    payload = str(n).encode() + body
    arc = _gz(
        tmp_path / "paxsize.tar.gz",
        _header("././@PaxHeader", len(payload), tarfile.XHDTYPE),
        payload + bytes(-len(payload) % 512),
        _header("big.txt", 0, tarfile.REGTYPE),
    )
    assert _rule(arc) == "file-too-large"


def test_a_packed_bundle_still_loads(tmp_path):
    from cacheon_subnet.bundle import pack

    b = pack(EXAMPLES / "norm.rmsnorm", tmp_path / "ok.tar.gz")
    assert load_bundle(tmp_path / "ok.tar.gz").digest == b.digest


def _pax_record(key: bytes, value: bytes) -> bytes:
    body = b" " + key + b"=" + value + b"\n"
    n = len(body)
    while len(str(n)) + len(body) != n:
        n = len(str(n)) + len(body)
    return str(n).encode() + body


def _pax(payload: bytes) -> bytes:
    return _header("././@PaxHeader", len(payload), tarfile.XHDTYPE) + payload + bytes(-len(payload) % 512)


def test_one_metadata_header_over_its_own_limit_is_refused(tmp_path):
    """One 1 MiB PAX header: under the 4 MiB total, over the 64 KiB each header may hold."""
    lim = Limits()
    big = _pax_record(b"comment", b"a" * MiB)
    assert lim.header_bytes < len(big) < lim.meta_bytes
    arc = _gz(tmp_path / "one.tar.gz", _pax(big), _member("manifest.toml", MANIFEST))
    with pytest.raises(BundleError) as e:
        load_bundle(arc)
    assert e.value.rule == "archive-header-too-large" and "metadata header of" in str(e.value), e.value


def test_metadata_headers_together_over_the_total_are_refused(tmp_path):
    """Each PAX header within its own limit, all of them together over the total."""
    lim = Limits()
    rng = random.Random(1)  # text that does not compress away (else the ratio rule answers first)
    n = lim.meta_bytes // lim.header_bytes + 2
    recs = [
        _pax_record(b"comment", rng.randbytes(lim.header_bytes // 2).hex().encode()[: lim.header_bytes - 100])
        for _ in range(n)
    ]
    parts = [_member("manifest.toml", MANIFEST)]
    parts += [_pax(rec) + _member(f"f{i}.txt", b"x") for i, rec in enumerate(recs)]
    arc = _gz(tmp_path / "many.tar.gz", *parts)
    with pytest.raises(BundleError) as e:
        load_bundle(arc)
    assert e.value.rule == "archive-header-too-large" and "total" in str(e.value), e.value
