"""Red-team corpus for the arena's wall (issue 14, items 5 and 7): bundles that forge what the
verdict reads, or behave differently while timed, run through the whole CPU arena (host, driver
process, a separate fake scheduler process that imports the bundle, teacher T). Each must end
FAIL with its reason, except one documented limit (forged 'abi:' declines: at most NO_DECISION). The bundles use Python the static allowlist would refuse (open, os,
monkeypatching): here they test the arena's own wall, as if that first wall had been breached."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "arena"))

import arena_harness as h  # noqa: E402

from cacheon_subnet.bundle import load_bundle  # noqa: E402

CORPUS = Path(__file__).resolve().parent / "arena"


@pytest.fixture
def env(tmp_path, monkeypatch):
    h.runtime_env(tmp_path, monkeypatch)
    # The first wall (the static allowlist, enforced where the engine tree is sealed) refuses
    # every bundle here: test_first_wall_refuses_the_whole_corpus. To test the arena's own wall,
    # these tests alone seal them unscanned, as if the first wall had been breached.
    import functools

    import arena.run
    from cacheon_subnet.bundle.engine_tree import build_tree

    monkeypatch.setattr(arena.run, "build_tree", functools.partial(build_tree, scan_policy=False))
    return tmp_path


def test_first_wall_refuses_the_whole_corpus(tmp_path, monkeypatch):
    """Through the product path (no bypass) each corpus bundle is refused before any engine starts."""
    h.runtime_env(tmp_path, monkeypatch)
    names = sorted(p.name for p in CORPUS.iterdir() if (p / "manifest.toml").exists())
    assert len(names) >= 10
    for name in names:
        r = run(name, tmp_path / name)
        assert r["verdict"] == "FAIL" and "policy" in r["reason"], (name, r["reason"])
        assert not r.get("windows"), name  # nothing was timed


def run(name: str, env: Path, **kw):
    return h.run(load_bundle(CORPUS / name), env, **kw)


@pytest.mark.slow
def test_prewritten_step_log_is_never_read_and_is_caught(env):
    """The H200 attack: one record per timed window pre-written into <workdir>/<engine>.jsonl.
    Behind the OS wall that file is outside the engine's view (the write fails); without the wall
    (weak mode) the host's copy check calls it forging. Either way no forged number is read."""
    r = run("prewrite_step_log", env)
    assert r["verdict"] != "PASS", r["reason"]
    copy = env / "work" / "resident.jsonl"
    assert b"1030000.0" not in copy.read_bytes()  # the host's copy holds only what it accepted
    if "forging" in r["reason"]:  # the write landed (weak mode): the copy check named it
        assert "forging attempt" in r["reason"] and "record copy resident.jsonl" in r["reason"], r["reason"]
    else:  # only the OS wall may stop it silently; what is left is the honest kernel's own verdict
        assert os.environ.get("CACHEON_SANDBOX", "").lower() != "weak", r["reason"]
        assert r["reason"].startswith(("speed:", "quality:")), r["reason"]
    assert all(w.get("output_tokens_per_s", 0) < 1e5 for w in r.get("windows", []))  # no forged number read


@pytest.mark.slow
def test_records_injected_into_the_record_pipe_are_forging(env):
    """Behind the OS wall the engine runs as a dedicated uid and the driver is non-dumpable, so
    /proc/<driver>/fd cannot be opened and nothing is injected; where a process could (root in
    weak mode: CAP_SYS_PTRACE), the injected records carry no nonce the host issued."""
    r = run("forge_record_stream", env)
    assert r["verdict"] != "PASS", r["reason"]
    if r["verdict"] == "FAIL" and "forging" in r["reason"]:
        assert "forging attempt in the resident engine" in r["reason"] and "unknown nonce" in r["reason"], r["reason"]
    assert all(w.get("output_tokens_per_s", 0) < 1e5 for w in r.get("windows", []))


@pytest.mark.slow
def test_a_pickle_the_scheduler_sends_the_driver_runs_no_code_there(env):
    """The driver unpickles what the scheduler sends it (SGLang's TokenizerManager: ZMQ
    recv_pyobj; the fake engine: a multiprocessing Pipe). The scheduler's first reply carries a
    pickle whose load rewrites the driver's records: every C window 1.5x, no noise. Without the
    driver's unpickle guard this honest but slower kernel was crowned, C/B 1.5000, confirmed in a
    fresh engine (red team 2026-12-04); with it the refusal is forging."""
    r = run("driver_pickle", env)
    assert r["verdict"] == "FAIL", r["reason"]
    assert "forging attempt" in r["reason"] and "refused to unpickle builtins.eval" in r["reason"], r["reason"]
    assert not any(w.get("output_tokens_per_s") == 1500.0 for w in r.get("windows", []))  # no forged number read


@pytest.mark.slow
def test_an_engine_class_the_driver_may_not_unpickle_is_a_named_arena_gap(env):
    """The control beside it: a refused name of the engine's own packages (SGLang's ScheduleBatch)
    is the allowlist's gap, NO_DECISION naming it, never a FAIL charged to the candidate."""
    r = run("driver_pickle_gap", env)
    assert r["verdict"] == "NO_DECISION", r["reason"]
    assert "arena defect" in r["reason"] and "sglang.srt.managers.schedule_batch.ScheduleBatch" in r["reason"], r["reason"]


@pytest.mark.slow
def test_prewritten_clock_answers_are_forging(env):
    r = run("forge_clock_answers", env)
    assert r["verdict"] == "FAIL", r["reason"]
    assert "forging attempt" in r["reason"] and "complete new answer line(s)" in r["reason"], r["reason"]


@pytest.mark.slow
def test_prewritten_route_acknowledgements_are_forging(env):
    r = run("forge_route_acks", env)
    assert r["verdict"] == "FAIL" and "forging attempt" in r["reason"], r["reason"]
    assert "answer" in r["reason"]


@pytest.mark.slow
def test_a_forged_receipt_file_does_not_make_a_silent_kernel_run(env):
    """The kernel never fires (float32 only); its receipt file claims 500 calls and every swap."""
    r = run("forge_receipt_file", env)
    assert r["verdict"] == "FAIL", r["reason"]
    assert "execution evidence" in r["reason"] and "never runs in this engine" in r["reason"], r["reason"]


@pytest.mark.slow
def test_an_answer_log_replaced_by_a_symlink_is_forging(env):
    r = run("answer_log_symlink", env)
    assert r["verdict"] == "FAIL" and "forging attempt" in r["reason"], r["reason"]
    assert "not a plain file" in r["reason"] or "not a regular file" in r["reason"], r["reason"]


@pytest.mark.slow
def test_answers_from_a_rank_that_does_not_exist_are_forging(env):
    r = run("extra_rank_answers", env)
    assert r["verdict"] == "FAIL" and "forging attempt" in r["reason"], r["reason"]
    assert "answers-1.jsonl" in r["reason"], r["reason"]


@pytest.mark.slow
def test_wrong_only_while_timed_fails_quality_on_the_timed_outputs(env):
    """Class 6: cheap and wrong exactly while a window is timed, faithful in every untimed
    window. The graded outputs are now a sample of the timed windows themselves."""
    r = run("wrong_when_timed", env)
    assert r["verdict"] == "FAIL" and r["reason"].startswith("quality:"), r["reason"]
    sample = r["quality"]["sample"]
    assert sample and all(c.endswith("-C") and b.endswith(("-B", "-B'")) for c, b, _ in sample)
    timed_c = {f"w{w['index']:03d}-C" for w in r["windows"] if w["role"] == "C"}
    assert {c for c, _, _ in sample} <= timed_c


@pytest.mark.slow
def test_baseline_sabotage_through_a_route_escape_is_a_leak(env):
    """Its kernel keeps running (and sleeping) in B and B′ while every swap ack reads clean:
    C/B looks like a large win. The per-interval counts in the answers show the leak."""
    r = run("baseline_leak", env, cfg=h.small_config(prompts=6, output=6, cycles=3, max_noise=0.5))
    assert r["verdict"] == "FAIL", r["reason"]
    assert r["reason"].startswith("baseline leak:") and "challenger calls while the baseline ran" in r["reason"]
    assert r["leaks"] and r["evidence"]["problems"] == []  # the acks alone would not have seen it


@pytest.mark.slow
def test_an_answer_log_emptied_behind_the_driver_is_forging(env):
    r = run("answer_log_truncate", env)
    assert r["verdict"] == "FAIL" and "forging attempt" in r["reason"], r["reason"]
    # which check trips depends on when the thread wins the race: after the driver read (history
    # rewritten) or before (the answer it just wrote is gone)
    assert any(k in r["reason"] for k in ("rewritten", "removed", "0 complete new answer line")), r["reason"]


@pytest.mark.slow
def test_wrong_until_the_old_quality_epoch_fails_quality(env):
    """Class 6, by the schedule: right only where the old schedule put its untimed quality
    window. There is no such window now: every graded output is a timed one."""
    r = run("wrong_until_quality_epoch", env)
    assert r["verdict"] == "FAIL" and r["reason"].startswith("quality:"), r["reason"]


@pytest.mark.slow
def test_a_flooded_engine_log_stays_capped_on_disk_and_in_memory(env, monkeypatch):
    """The engine's output is contribution-controlled and its files may reach 64 GiB: the host
    drains it through a pipe, keeps LOG_CAP bytes on disk plus a bounded tail, and quotes the tail
    from memory. Here the cap is 1 MiB and the bundle writes 24 MiB."""
    import functools

    import arena.engine.host
    from cacheon_subnet.sandbox.logsink import LogSink

    monkeypatch.setattr(arena.engine.host, "LogSink", functools.partial(LogSink, cap=1 << 20, keep=16 << 10))
    r = run("flood_log", env)
    assert r["verdict"] in ("PASS", "FAIL", "NO_DECISION"), r  # a verdict, whatever the honest kernel earns
    log = env / "work" / "resident.log"
    size = log.stat().st_size
    assert size <= (1 << 20) + (16 << 10) + 200, size
    text = log.read_bytes()[-(16 << 10) - 200 :]
    assert b"past the 1048576-byte log cap dropped" in text and b"FLOOD-END" in text, text[-300:]


@pytest.mark.slow
def test_forged_abi_declines_buy_at_most_a_no_decision(env):
    """Known limit (docs/security.md, "Decline counts are the rank's word"): past wall 1 a kernel
    in the scheduler rank can count 'abi:' declines for itself. What that buys is bounded: the
    verdict is NO_DECISION (retried a bounded number of times, never charged), never a PASS, and
    no teacher or confirmation engine is spent on it. Through the product path wall 1 refuses the
    bundle (tests/adversarial/static/forge_abi_decline: P009 importing seams)."""
    r = run("forge_abi_decline", env)
    assert r["verdict"] == "NO_DECISION" and "outside its ABI" in r["reason"], r["reason"]
    assert "teacher" not in r["stages"] and "confirm" not in r["stages"], sorted(r["stages"])


@pytest.mark.slow
def test_a_candidate_that_fills_the_host_disk_is_stopped_and_leaves_nothing(env, monkeypatch):
    """Past wall 1, a kernel writes its engine's host-visible dirs (the receipts dir outlives the
    run, in the verdict's workdir; the JIT cache copies are on disk too). The host's disk watch
    (arena/engine/diskwatch.py, limit lowered here to 32 MiB) stops the engine: FAIL, and the ballast is gone."""
    monkeypatch.setenv("CACHEON_ENGINE_DISK_GIB", str(32 / 1024))
    r = run("fill_host_disk", env)
    assert r["verdict"] == "FAIL" and "host-visible dirs" in r["reason"], r["reason"]
    left = [p for p in (env / "work").rglob("ballast-*")]
    assert not left, left


@pytest.mark.slow
def test_broken_control_without_the_disk_watch_the_ballast_stays(env, monkeypatch):
    import arena.engine.diskwatch

    monkeypatch.setenv("CACHEON_ENGINE_DISK_GIB", str(32 / 1024))
    monkeypatch.setattr(arena.engine.diskwatch.DiskWatch, "check", lambda self: None)
    r = run("fill_host_disk", env)
    assert "host-visible dirs" not in r["reason"]
    left = sum(p.stat().st_size for p in (env / "work").rglob("ballast-*"))
    assert left >= 48 << 20, left  # the receipts dir kept it after the run: what the watch is there to stop
