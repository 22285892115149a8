"""arena/diskwatch.py: what an engine may add to the host's disk, and the free-space reserve."""

from __future__ import annotations

import os

from arena.diskwatch import DiskLimits, DiskWatch, usage


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


def test_bytes_under_a_path_longer_than_path_max_are_not_hidden(tmp_path):
    """An engine can nest dirs (openat/chdir) past PATH_MAX: the walk's lstat/scandir then fail
    and, swallowed, its bytes went uncounted. Unmeasurable is a breach (fail closed)."""
    w = DiskWatch([tmp_path], DiskLimits(growth_bytes=1 << 20, max_files=100_000, reserve_bytes=0))
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        for _ in range(40):
            os.mkdir("d" * 200, dir_fd=fd)
            nfd = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        big = os.open("big", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
        os.write(big, b"x" * (4 << 20))
        os.close(big)
    finally:
        os.close(fd)
    assert w.check() is not None
