"""The resident timed engine through whole qualifications (arena/engine/resident_timed.py, `[engine]
resident`; issue 30 item 4) on the CPU fake engine: consecutive verdicts share one engine; a
post-condition failure makes the verdict in flight NO_DECISION and restarts the engine; a crown is
confirmed in a fresh engine; the sequential stop still runs the post-condition; the option enters
the arena id only when on. The contamination test itself: test_resident_contamination.py."""

from __future__ import annotations

import functools
import tempfile
from dataclasses import replace
from pathlib import Path

import arena_harness as h
import contamination as c
import pytest

from arena.config import load_config
from arena.config_sections import SequentialSection
from arena.engine.resident_timed import TimedPool
from arena.run import RunOptions, qualify, stock_control_op
from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.sandbox import remove_tree


@pytest.fixture
def env(monkeypatch):
    """Outside pytest's 0700 temp root (other pytest runs on this box re-close it while engines run)."""
    tmp = Path(tempfile.mkdtemp(prefix="cacheon-resident-timed-", dir="/var/tmp"))
    tmp.chmod(0o755)
    h.runtime_env(tmp, monkeypatch)
    monkeypatch.setenv("CACHEON_ARENA_HOME", str(tmp / "home"))
    yield tmp
    remove_tree(tmp)


@pytest.fixture
def pool():
    p = TimedPool()
    yield p
    p.close_all()


def _cfg(**kw):
    cfg = h.small_config(**kw)
    return replace(cfg, engine=replace(cfg.engine, resident=True))


def _run(env, pool, bundle, name, engine="FakeEngine", cfg=None, **kw):
    opts = RunOptions(
        workdir=env / name,
        checkpoint_root=env / "ckpt",
        engine_factory=f"tests.arena.fake_engine:{engine}",
        timed_engines=pool,
        **kw,
    )
    op = bundle.manifest.ops[0] if bundle is not None else stock_control_op("norm.rmsnorm")
    return qualify(cfg or _cfg(), bundle, op, opts)


def _reused(r) -> bool:
    return r["resident_engine"]["reused"]


@pytest.mark.slow
def test_consecutive_qualifications_share_one_timed_engine(env, pool):
    first = _run(env, pool, h.torch_bundle("a"), "a")
    second = _run(env, pool, h.torch_bundle("b"), "b")
    wrong = _run(env, pool, load_bundle(h.REPO / "examples" / "controls" / "wrong_math"), "w", grade_always=True)
    assert [r["resident_engine"]["job"] for r in (first, second, wrong)] == [1, 2, 3]
    assert not _reused(first) and _reused(second) and _reused(wrong)
    assert all(r["resident_engine"]["ok"] for r in (first, second, wrong)), [r["resident_engine"] for r in (first, second)]
    assert second["evidence"]["ok"] and second["verdict"] in ("FAIL", "NO_DECISION"), second["reason"]
    assert wrong["verdict"] == "FAIL" and wrong["reason"].startswith("quality:"), wrong["reason"]
    assert "reference_s" in first["stages"]["resident"]["host_timing"]  # the start is the first verdict's
    assert "reference_s" not in second["stages"]["resident"]["host_timing"]
    assert (env / "b" / "receipts-resident" / "answers-0.jsonl").is_file()  # each verdict keeps its own answers


@pytest.mark.slow
def test_a_post_condition_failure_is_no_decision_and_the_next_verdict_gets_a_fresh_engine(env, pool, monkeypatch):
    """A writes into the norm gain only after its turn (a thread: beyond the allowlist, sealed
    unscanned here): its windows are clean, the post-condition is not. Its verdict is NO_DECISION
    naming why, never a FAIL; B runs in a fresh engine."""
    import arena.run
    from cacheon_subnet.bundle.engine_tree import build_tree

    with monkeypatch.context() as mp:
        mp.setattr(arena.run, "build_tree", functools.partial(build_tree, scan_policy=False))
        a = _run(env, pool, c.bundle("late_writer"), "a")
    assert a["verdict"] == "NO_DECISION", a["reason"]
    assert "post-condition failed" in a["reason"] and "frames of a contribution" in a["reason"], a["reason"]
    assert not a["resident_engine"]["ok"]
    b = _run(env, pool, h.torch_bundle("b"), "b")
    assert not _reused(b) and b["resident_engine"]["ok"] and b["evidence"]["ok"]


@pytest.mark.slow
def test_a_fail_on_the_contributions_own_evidence_stands_when_the_post_condition_also_fails(env, pool):
    """Policy-clean A writes into the norm gain on every call: its own answers charge it (FAIL,
    execution evidence); the post-condition fails too (digest, canary) and restarts the engine."""
    a = _run(env, pool, c.bundle("counter_in_weight"), "a")
    assert a["verdict"] == "FAIL" and "execution evidence" in a["reason"] and "static input" in a["reason"], a["reason"]
    assert not a["resident_engine"]["ok"]
    b = _run(env, pool, h.torch_bundle("b"), "b")
    assert not _reused(b) and b["evidence"]["ok"]


@pytest.mark.slow
def test_a_crown_is_confirmed_in_a_fresh_engine_and_the_resident_one_is_released_first(env, pool):
    cfg = _cfg(prompts=6, output=6, cycles=3, max_noise=0.5)
    r = _run(env, pool, h.torch_bundle("fast"), "fast", engine="SlowStockEngine", cfg=cfg, grade_always=True)
    assert r["verdict"] == "PASS" and "confirmed in a fresh engine" in r["reason"], r["reason"]
    assert "launch_s" in r["stages"]["confirm"]["host_timing"]  # a one-shot engine, started for it
    assert not pool._engines  # released before the confirmation (they would share the GPU)
    nxt = _run(env, pool, h.torch_bundle("next"), "next")
    assert not _reused(nxt) and nxt["resident_engine"]["ok"]


@pytest.mark.slow
def test_the_sequential_stop_still_runs_the_post_condition(env, pool):
    cfg = replace(
        _cfg(cycles=4, max_noise=0.5), sequential=SequentialSection(enabled=True, alt_gain=0.3, sigma=0.05, min_cycles=2)
    )
    r = _run(env, pool, h.torch_bundle("loser"), "loser", engine="SlowCandidateEngine", cfg=cfg)
    assert r["verdict"] == "FAIL" and "sequential stop after 2 of 4 cycles" in r["reason"], r["reason"]
    assert len(r["windows"]) == 1 + 4 * 2 and r["resident_engine"]["ok"], r["resident_engine"]
    again = _run(env, pool, h.torch_bundle("next"), "next", engine="SlowCandidateEngine", cfg=cfg)
    assert _reused(again)


@pytest.mark.slow
def test_a_head_to_head_and_the_role_bias_control_install_and_remove_cleanly(env, pool):
    ch, inc = h.torch_bundle("challenger"), h.torch_bundle("incumbent")
    opts = RunOptions(
        workdir=env / "h2h",
        checkpoint_root=env / "ckpt",
        engine_factory="tests.arena.fake_engine:FakeEngine",
        timed_engines=pool,
    )
    r = qualify(_cfg(), ch, ch.manifest.ops[0], opts, incumbent=(inc, inc.manifest.ops[0]))
    assert r["evidence"]["ok"] and r["resident_engine"]["ok"], (r["evidence"], r["resident_engine"])
    assert r["evidence"]["per_rank"]["0"]["norm.rmsnorm@incumbent"]["fired"] > 0
    bias = _run(env, pool, None, "bias", control="stock-as-candidate")
    assert "role bias" in bias["reason"] and bias["resident_engine"]["ok"] and _reused(bias), bias["reason"]


@pytest.mark.slow
def test_a_kernel_that_raises_fails_and_costs_only_its_engine(env, pool):
    r = _run(env, pool, load_bundle(h.REPO / "examples" / "controls" / "raises_in_call"), "raises")
    assert r["verdict"] == "FAIL" and "strict mode" in r["reason"], r["reason"]
    nxt = _run(env, pool, h.torch_bundle("next"), "next")
    assert not _reused(nxt) and nxt["resident_engine"]["ok"]


def test_an_engine_that_never_starts_is_no_decision(env, pool):
    r = _run(env, pool, h.torch_bundle("x"), "x", engine="BrokenEngine")
    assert r["verdict"] == "NO_DECISION" and "infrastructure" in r["reason"], r["reason"]
    assert not pool._engines


@pytest.mark.slow
def test_a_spent_engine_is_replaced(env, pool):
    cfg = _cfg()
    cfg = replace(cfg, engine=replace(cfg.engine, resident_max_jobs=1))
    _run(env, pool, h.torch_bundle("a"), "a", cfg=cfg)
    b = _run(env, pool, h.torch_bundle("b"), "b", cfg=cfg)
    assert not _reused(b)


def test_the_option_enters_the_arena_id_only_when_on(tmp_path):
    cfg = load_config(h.DENSE)
    assert cfg.engine.resident is False
    text = h.DENSE.read_text()
    off = tmp_path / "off.toml"
    off.write_text(text.replace("[engine]\n", "[engine]\nresident = false\nresident_max_jobs = 7\n", 1))
    assert load_config(off).arena_id == cfg.arena_id
    on = tmp_path / "on.toml"
    on.write_text(text.replace("[engine]\n", "[engine]\nresident = true\n", 1))
    assert load_config(on).engine.resident and load_config(on).arena_id != cfg.arena_id
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("[engine]\n", "[engine]\nresident_max_jobs = 0\n", 1))
    from arena.config import ArenaConfigError

    with pytest.raises(ArenaConfigError, match="resident_max_jobs"):
        load_config(bad)


@pytest.mark.slow
def test_a_kernel_that_never_fires_at_install_fails_before_any_window(env, pool):
    """The install's capture is an engine start's: a candidate that did not fire then never will."""
    import shutil

    src = env / "fp32_only"
    shutil.copytree(h.REPO / "examples" / "norm.rmsnorm", src)
    m = src / "manifest.toml"
    m.write_text(m.read_text().replace('dtypes = ["bfloat16", "float16", "float32"]', 'dtypes = ["float32"]'))
    r = _run(env, pool, load_bundle(src), "never")
    assert r["verdict"] == "FAIL" and "never runs in this engine" in r["reason"], r["reason"]
    assert r["windows"] == []


@pytest.mark.slow
def test_a_contribution_that_fills_the_host_disk_is_stopped_and_its_ballast_goes_with_the_engine(env, pool, monkeypatch):
    """The corpus's fill_host_disk (beyond the allowlist: sealed unscanned) writes 4 x 24 MiB at
    import into the engine's first answers dir and its Triton cache: the resident engine's disk
    watch (its whole life) stops it, FAIL, and nothing of the ballast stays on the host."""
    import arena.run
    from cacheon_subnet.bundle.engine_tree import build_tree

    monkeypatch.setenv("CACHEON_ENGINE_DISK_GIB", str(32 / 1024))
    with monkeypatch.context() as mp:
        mp.setattr(arena.run, "build_tree", functools.partial(build_tree, scan_policy=False))
        r = _run(env, pool, load_bundle(h.REPO / "tests" / "adversarial" / "arena" / "fill_host_disk"), "fill")
    assert r["verdict"] == "FAIL" and "stopped" in r["reason"] and "GiB" in r["reason"], r["reason"]
    assert not pool._engines and not list(env.rglob("ballast-*")), list(env.rglob("ballast-*"))[:3]


@pytest.mark.slow
def test_the_h200_measurement_script_runs_on_the_fake_engine(tmp_path):
    """scripts/resident_timed_bench.py (docs/benchmarks.md "Next lease") must not break on the lease:
    a contribution and the role-bias control, resident, one row each, the second reusing the engine."""
    import json
    import subprocess
    import sys

    out = tmp_path / "rows.json"
    r = subprocess.run(
        [
            sys.executable,
            "scripts/resident_timed_bench.py",
            "--fake",
            "--modes",
            "resident",
            "--sequence",
            "examples/demo/cpu_rmsnorm,role-bias",
            "--out",
            str(out),
        ],
        cwd=h.REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(out.read_text())["resident"]["rows"]
    assert [x["reused"] for x in rows] == [False, True] and all(x["post_ok"] for x in rows), rows
    assert rows[1]["role_bias"] is not None


@pytest.mark.slow
def test_a_contribution_for_another_local_slot_reuses_the_timed_engine(env, pool):
    """The resident engine arms every local adapter (arena/timed_stages.py `_resident_bindings`): its key
    no longer changes with the slot, so a mixed queue (norm, then activation) keeps one engine. On
    the H200 a queue alternating slots paid a ~112 s start for every verdict (docs/benchmarks.md)."""
    norm = _run(env, pool, h.torch_bundle("a"), "a")
    silu = _run(env, pool, load_bundle(h.REPO / "examples" / "activation.silu_and_mul"), "silu")
    assert not _reused(norm) and _reused(silu), silu["resident_engine"]
    assert {"norm", "activation", "attention"} <= set(silu["armed"]), silu["armed"]
    assert silu["bindings"] == ["activation"]  # what a fresh (confirmation) engine arms
    assert silu["verdict"] != "PASS", silu["reason"]  # the fake engine never calls the activation
