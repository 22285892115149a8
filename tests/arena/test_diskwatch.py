"""arena/engine/diskwatch.py: what an engine may add to the host's disk, and the free-space reserve."""

from __future__ import annotations

import os

import pytest

from arena.engine.diskwatch import DiskLimits, DiskWatch, usage
from cacheon_subnet.sandbox.fsview import TreeTooDeep, remove_tree


def _fill(path, mib: int) -> None:
    with open(path, "wb") as f:
        f.write(os.urandom(mib << 20))


def test_usage_counts_allocated_bytes_and_entries_and_not_links(tmp_path):
    (tmp_path / "d").mkdir()
    _fill(tmp_path / "d" / "a", 2)
    with open(tmp_path / "sparse", "wb") as f:  # 1 GiB apparent, nothing allocated
        f.truncate(1 << 30)
    (tmp_path / "link").symlink_to("/usr")
    size, entries = usage([tmp_path])
    assert 2 << 20 <= size < 3 << 20, size
    assert entries == 4  # d, d/a, sparse, link (not what the link points at)


def test_growth_past_the_limit_is_a_breach_and_what_was_there_before_is_not(tmp_path):
    _fill(tmp_path / "seed", 4)  # the host's copy-in: not the engine's writes
    w = DiskWatch([tmp_path], DiskLimits(growth_bytes=3 << 20, max_files=100, reserve_bytes=0))
    assert w.check() is None
    _fill(tmp_path / "ballast", 4)
    kind, why = w.check()
    assert kind == "growth" and "GiB" in why


def test_too_many_files_is_a_breach(tmp_path):
    w = DiskWatch([tmp_path], DiskLimits(growth_bytes=1 << 30, max_files=50, reserve_bytes=0))
    for i in range(60):
        (tmp_path / f"f{i}").touch()
    assert w.check()[0] == "growth"


def test_a_host_disk_under_the_reserve_is_the_hosts_trouble_not_the_engines(tmp_path):
    w = DiskWatch([tmp_path], DiskLimits(growth_bytes=1 << 30, max_files=50, reserve_bytes=1 << 62))
    kind, why = w.check()
    assert kind == "reserve" and "CACHEON_DISK_RESERVE_MIB" in why


def test_the_thread_stops_at_the_first_breach_and_stop_looks_once_more(tmp_path):
    w = DiskWatch([tmp_path], DiskLimits(growth_bytes=1 << 20, max_files=100, reserve_bytes=0), interval_s=0.05)
    w.start()
    _fill(tmp_path / "ballast", 2)
    w.join(timeout=10)
    assert not w.is_alive() and w.breach and w.breach[0] == "growth"
    quiet = DiskWatch([tmp_path], DiskLimits(growth_bytes=1 << 20, max_files=100, reserve_bytes=0), interval_s=60)
    quiet.start()
    _fill(tmp_path / "burst", 2)  # between two samples
    assert quiet.stop()[0] == "growth"


def test_operators_set_the_limits_in_the_environment(monkeypatch):
    monkeypatch.setenv("CACHEON_ENGINE_DISK_GIB", "2")
    monkeypatch.setenv("CACHEON_DISK_RESERVE_MIB", "512")
    lim = DiskLimits.from_env()
    assert lim.growth_bytes == 2 << 30 and lim.reserve_bytes == 512 << 20


def _chain(root, levels: int, name: str) -> int:
    """A chain of `levels` dirs named `name` under root (by dir fd: any path length); its bottom fd."""
    fd = os.open(root, os.O_RDONLY)
    for _ in range(levels):
        os.mkdir(name, dir_fd=fd)
        n = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = n
    return fd


def test_a_file_below_path_max_is_counted(tmp_path):
    """os.walk got ENAMETOOLONG there and skipped the subtree without a word (red team 2026-12-03)."""
    fd = _chain(tmp_path, 17, "x" * 250)
    f = os.open("ballast", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
    os.write(f, os.urandom(2 << 20))
    os.close(f)
    os.close(fd)
    size, entries = usage([tmp_path])
    assert size >= 2 << 20 and entries == 18, (size, entries)


def test_a_tree_deeper_than_the_limit_is_a_breach_not_a_recursion_error(tmp_path):
    """os.walk recursed once per level: a 1,200-level chain killed the watch thread."""
    w = DiskWatch([tmp_path], DiskLimits(reserve_bytes=0))
    os.close(_chain(tmp_path, 1200, "d"))
    try:
        with pytest.raises(TreeTooDeep):
            usage([tmp_path])
        kind, why = w.check()
        assert kind == "growth" and "deeper than 64 levels" in why, why
    finally:  # pytest's own cleanup of old tmp dirs (shutil.rmtree) dies on such a chain
        assert remove_tree(tmp_path / "d") == []


@pytest.mark.slow
def test_directories_own_blocks_count(tmp_path):
    """Entries made and removed leave an ext4 directory its blocks: ~2 MiB in one entry here."""
    d = tmp_path / "d"
    d.mkdir()
    w = DiskWatch([tmp_path], DiskLimits(growth_bytes=1 << 20, max_files=100, reserve_bytes=0))
    names = [f"{i:06d}" + "y" * 240 for i in range(8000)]
    for n in names:
        (d / n).touch()
    for n in names:
        (d / n).unlink()
    if os.lstat(d).st_blocks * 512 < 1 << 20:
        pytest.skip("this filesystem shrinks or does not size directories (tmpfs)")
    assert w.check()[0] == "growth"


def test_a_hard_linked_file_counts_once(tmp_path):
    _fill(tmp_path / "a", 2)
    for i in range(4):
        os.link(tmp_path / "a", tmp_path / f"l{i}")
    size, entries = usage([tmp_path])
    assert size < 3 << 20 and entries == 5, (size, entries)


def test_a_file_unlinked_but_held_open_counts_as_the_holders(tmp_path):
    """No walk sees it; its blocks are the host's disk until the holder closes it."""
    w = DiskWatch([tmp_path], DiskLimits(growth_bytes=1 << 20, max_files=100, reserve_bytes=0))
    w.members = lambda: [os.getpid()]
    with open(tmp_path / "held", "wb") as f:
        f.write(os.urandom(2 << 20))
        f.flush()
        os.fsync(f.fileno())
        os.unlink(tmp_path / "held")
        assert usage([tmp_path])[0] < 1 << 20
        kind, why = w.check()
        assert kind == "growth" and "unlinked and holds open" in why, why
    assert w.check() is None  # closed: freed


def test_the_kept_dir_has_its_own_budget(tmp_path):
    kept, cache = tmp_path / "receipts", tmp_path / "cache"
    kept.mkdir()
    cache.mkdir()
    lim = DiskLimits(growth_bytes=1 << 30, max_files=1000, reserve_bytes=0, kept_bytes=1 << 20, kept_files=10)
    w = DiskWatch([kept, cache], lim, kept=[str(kept)])
    _fill(cache / "build", 2)  # a JIT build: removed with the engine's scratch
    assert w.check() is None
    _fill(kept / "left", 2)
    kind, why = w.check()
    assert kind == "growth" and "outlives the run" in why, why


def test_a_file_unlinked_and_only_mapped_counts_too(tmp_path):
    """Closed and unlinked but mapped: the blocks stay allocated while the mapping lives (libc's
    mmap: Python's mmap object keeps a dup of the fd, which the fd scan alone would see)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    w = DiskWatch([tmp_path], DiskLimits(growth_bytes=1 << 20, max_files=100, reserve_bytes=0))
    w.members = lambda: [os.getpid()]
    fd = os.open(tmp_path / "mapped", os.O_RDWR | os.O_CREAT, 0o600)
    os.posix_fallocate(fd, 0, 4 << 20)
    addr = libc.mmap(None, 4 << 20, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
    assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
    os.close(fd)
    os.unlink(tmp_path / "mapped")
    try:
        kind, why = w.check()
        assert kind == "growth" and "unlinked and holds open" in why, why
    finally:
        libc.munmap(addr, 4 << 20)
    assert w.check() is None


def test_a_ballast_held_for_a_second_of_a_young_engine_is_seen(tmp_path):
    """CI (2026-12-05): a fake engine that unlinked 48 MiB at import lived ~1 s; sampled every
    second, the watch looked before and after and the verdict read its speed instead. An engine's
    first YOUNG_S are sampled every YOUNG_INTERVAL_S (red at the plain interval)."""
    import time

    w = DiskWatch([tmp_path], DiskLimits(growth_bytes=1 << 20, max_files=100, reserve_bytes=0), interval_s=60)
    w.members = lambda: [os.getpid()]
    w.start()
    try:
        time.sleep(0.1)
        with open(tmp_path / "held", "wb") as f:
            f.write(os.urandom(2 << 20))
            f.flush()
            os.unlink(tmp_path / "held")
            time.sleep(1.0)
        assert w.breach and "unlinked and holds open" in w.breach[1], w.breach
    finally:
        w.stop()
