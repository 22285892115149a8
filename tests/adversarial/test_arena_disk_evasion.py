"""Red team: ways past the disk watch (arena/engine/diskwatch.py) for a kernel past wall 1, each run
through the whole CPU arena (host, sandboxed driver, fake scheduler importing the bundle). The
first watch walked with os.walk and summed files' blocks: writes it never saw stayed on the
validator's disk (in the verdict's kept receipts dir) or held it full for the whole run, and a
deep directory chain killed the watch and raised out of the host's engine run. Each bundle here is
also refused by wall 1 (test_arena_corpus.py::test_first_wall_refuses_the_whole_corpus)."""

from __future__ import annotations

import os

import pytest
from test_arena_corpus import env, run  # noqa: F401 - the fixture that seals the corpus unscanned

pytestmark = pytest.mark.slow


def _left(env) -> list[str]:
    """What the bundle wrote that is still under the verdict's workdir."""
    out = []
    for d, dirs, files in os.walk(env / "work"):
        out += [
            os.path.join(d, n) for n in files + dirs if n.startswith(("ballast", "chain-", "dir-")) or n.endswith("x" * 200)
        ]
    return out


@pytest.mark.parametrize(
    "name, limit_mib, why",
    [
        # 48 MiB written and unlinked, kept open: its blocks are the host's disk, no walk sees them
        ("disk_unlinked_ballast", 32, "unlinked and holds open"),
        # 48 MiB below a path longer than PATH_MAX: os.walk got ENAMETOOLONG there and skipped it
        ("disk_deep_path_ballast", 32, "host-visible dirs"),
        # directories grown by entries made and removed: ~30 MiB of blocks in three entries
        ("disk_dir_blocks", 8, "host-visible dirs"),
    ],
)
def test_writes_the_first_walk_never_saw_stop_the_engine(env, monkeypatch, name, limit_mib, why):
    monkeypatch.setenv("CACHEON_ENGINE_DISK_GIB", str(limit_mib / 1024))
    r = run(name, env)
    assert r["verdict"] == "FAIL" and "host-visible dirs" in r["reason"] and why in r["reason"], r["reason"]
    assert not _left(env), _left(env)[:3]


def test_a_chain_deeper_than_the_recursion_limit_is_a_breach_not_a_crash(env, monkeypatch):
    """1,200 nested dirs: os.walk's RecursionError killed the watch thread (no more samples) and
    escaped run_engine at the last look, so the verdict was a host error (retried, then
    NO_DECISION) and the 48 MiB beside the chain stayed in the receipts dir."""
    monkeypatch.setenv("CACHEON_ENGINE_DISK_GIB", str(32 / 1024))
    try:
        r = run("disk_deep_chain", env)
        assert r["verdict"] == "FAIL" and "deeper than 64 levels" in r["reason"], r["reason"]
        assert not _left(env), _left(env)[:3]
    finally:  # a chain left behind (a red run) would break pytest's own cleanup (shutil.rmtree) later
        from cacheon_subnet.sandbox import remove_tree

        remove_tree(env / "work")


def test_the_receipts_dir_keeps_at_most_the_kept_budget(env, monkeypatch):
    """The receipts dir outlives the run (the verdict's record), so what a candidate leaves there
    adds up over verdicts (at 16 GiB each, ~60 verdicts would fill a 1 TB disk). It has its own, small
    budget (256 MiB by default; 16 MiB here, the bundle leaves 48 MiB there)."""
    monkeypatch.setenv("CACHEON_ENGINE_KEPT_MIB", "16")
    r = run("fill_host_disk", env)
    assert r["verdict"] == "FAIL" and "receipts dir, which outlives the run" in r["reason"], r["reason"]
    assert not _left(env), _left(env)[:3]


def test_what_a_breaching_engine_wrote_is_gone_before_the_host_waits_for_the_gpu(env, monkeypatch):
    """The host waits up to 30 s for the GPU to be free after every engine; the ballast of an
    engine stopped for filling the disk used to stay through that wait (and the 10 s TERM grace),
    holding a disk other arenas on the host share full for that long."""
    import arena.engine.host

    seen = []
    real = arena.engine.host._wait_gpu_free

    def wait(*a, **kw):
        seen.append(_left(env))
        return real(*a, **kw)

    monkeypatch.setattr(arena.engine.host, "_wait_gpu_free", wait)
    monkeypatch.setenv("CACHEON_ENGINE_DISK_GIB", str(32 / 1024))
    r = run("fill_host_disk", env)
    assert r["verdict"] == "FAIL" and "host-visible dirs" in r["reason"], r["reason"]
    assert seen and seen[0] == [], seen[:1]  # the resident engine's wait (the fake engine has no checkpoint step)
