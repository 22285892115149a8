"""The resident teacher (arena/engine/resident.py; issue 19 item 1): one pristine T across verdicts.

Contribution A reaches T only with the sequences T grades. Each attack below is a sequence of
A's that leaves state in T (StatefulTeacherEngine) or kills it (CrashingTeacherEngine); verdict
B, graded next, must read exactly what a fresh T reads. The broken control switches the canary
off and shows A's state then does reach B, so the test can fail."""

from __future__ import annotations

import random
from dataclasses import replace

import arena_harness as h
import pytest

from arena.config import load_config
from arena.config_sections import TeacherSection
from arena.engine import resident
from arena.engine.host import EngineSpec
from arena.jobs import engine_kwargs
from seams.table import seam_environment
from tests.arena.fake_engine import POISON


@pytest.fixture
def env(tmp_path, monkeypatch):
    h.runtime_env(tmp_path, monkeypatch)
    monkeypatch.setenv("CACHEON_ARENA_HOME", str(tmp_path / "home"))
    return tmp_path


@pytest.fixture
def pool():
    p = resident.TeacherPool()
    yield p
    p.close_all()


def _sequences(seed: int, n: int = 3, poison: bool = False) -> list[dict]:
    r = random.Random(seed)
    out = [
        {"key": i, "prompt": [r.randrange(100, 500) for _ in range(6)], "cont": [r.randrange(100, 500) for _ in range(4)]}
        for i in range(n)
    ]
    if poison:
        out[-1]["cont"][1] = POISON
    return out


def _spec(engine: str, seqs: list[dict], name: str = "teacher") -> EngineSpec:
    job = {
        "engine_kwargs": engine_kwargs(h.small_config()),
        "engine_factory": f"tests.arena.fake_engine:{engine}",
        "checkpoint": None,
        "steps": [{"op": "teacher", "tag": "T-x", "top_k": 4, "sequences": seqs}],
    }
    return EngineSpec(name, job, seam_environment(()), timeout_s=120, start_timeout_s=120)


def _grade(pool, engine, seqs, tmp, name="teacher"):
    work = tmp / f"work-{name}"
    work.mkdir(exist_ok=True)
    runs = pool.run(_spec(engine, seqs, name), work, tmp / "home", atol=1e-3, max_jobs=50, start_timeout_s=120)
    return runs


def _graded(run):
    return run.step("T-x")["graded"]


@pytest.mark.slow
def test_later_verdicts_read_exactly_what_a_fresh_teacher_reads(env, pool):
    a, b = _sequences(1), _sequences(2)
    first = _grade(pool, "FakeEngine", a, env, "a")
    second = _grade(pool, "FakeEngine", b, env, "b")
    assert len(first) == len(second) == 1 and not first[0].error and not second[0].error
    assert second[0].timing["reused"] == 1.0 and second[0].timing["resident_job"] == 2.0  # one start, two verdicts
    with resident.TeacherPool() as fresh:
        alone = _grade(fresh, "FakeEngine", b, env, "b-fresh")
    assert _graded(second[0]) == _graded(alone[-1])
    assert (env / "work-b" / "b.jsonl").is_file()  # each verdict's records beside its own result


@pytest.mark.slow
def test_state_a_contribution_leaves_is_caught_by_the_canary_and_never_reaches_the_next_verdict(env, pool):
    with resident.TeacherPool() as fresh:
        expected = _graded(_grade(fresh, "StatefulTeacherEngine", _sequences(2), env, "b-fresh")[-1])
    _grade(pool, "StatefulTeacherEngine", _sequences(0), env, "warm")  # T resident, canary read
    hostile = _grade(pool, "StatefulTeacherEngine", _sequences(1, poison=True), env, "a")
    assert len(hostile) == 2 and all("canary" in str(r.error) for r in hostile), [r.error for r in hostile]
    b = _grade(pool, "StatefulTeacherEngine", _sequences(2), env, "b")
    assert not b[-1].error and b[-1].timing["reused"] == 0.0  # a fresh T: the hostile one was stopped
    assert _graded(b[-1]) == expected


@pytest.mark.slow
def test_broken_control_without_the_canary_the_state_reaches_the_next_verdict(env, pool, monkeypatch):
    with resident.TeacherPool() as fresh:
        expected = _graded(_grade(fresh, "StatefulTeacherEngine", _sequences(2), env, "b-fresh")[-1])
    monkeypatch.setattr(resident, "canary_drift", lambda *a: None)
    _grade(pool, "StatefulTeacherEngine", _sequences(0), env, "warm")
    assert not _grade(pool, "StatefulTeacherEngine", _sequences(1, poison=True), env, "a")[-1].error
    b = _grade(pool, "StatefulTeacherEngine", _sequences(2), env, "b")
    assert b[-1].timing["reused"] == 1.0 and _graded(b[-1]) != expected  # what the canary is there to stop


@pytest.mark.slow
def test_a_teacher_whose_logprobs_turned_nan_fails_its_canary(env, pool):
    """Red team 2026-12-03: canary_drift took max(worst, abs(a - b)) and compared `worst > atol`,
    and every comparison with a NaN is false, so a T that answered NaN where it first read numbers
    passed its canary and graded the next verdict with NaN: B's quality could not anchor
    (NO_DECISION for an honest challenger) where a fresh T grades it."""
    with resident.TeacherPool() as fresh:
        expected = _graded(_grade(fresh, "NanTeacherEngine", _sequences(2), env, "b-fresh")[-1])
    _grade(pool, "NanTeacherEngine", _sequences(0), env, "warm")
    hostile = _grade(pool, "NanTeacherEngine", _sequences(1, poison=True), env, "a")
    assert len(hostile) == 2 and all("canary" in str(r.error) for r in hostile), [r.error for r in hostile]
    b = _grade(pool, "NanTeacherEngine", _sequences(2), env, "b")
    assert not b[-1].error and b[-1].timing["reused"] == 0.0
    assert _graded(b[-1]) == expected


@pytest.mark.slow
def test_a_sequence_that_kills_the_teacher_costs_only_its_own_verdict(env, pool):
    assert not _grade(pool, "CrashingTeacherEngine", _sequences(0), env, "warm")[-1].error
    hostile = _grade(pool, "CrashingTeacherEngine", _sequences(1, poison=True), env, "a")
    assert len(hostile) == 2 and all(r.error for r in hostile)  # retried once in a fresh T, then given up
    b = _grade(pool, "CrashingTeacherEngine", _sequences(2), env, "b")
    assert len(b) == 1 and not b[0].error


def test_canary_drift_names_what_moved():
    ref = [{"key": "canary-0", "tokens": [[5, -1.0], [6, -2.0]], "top": [[[5, -1.0], [9, -3.0]]]}]
    assert resident.canary_drift(ref, ref, 1e-3) is None
    moved = [{"key": "canary-0", "tokens": [[5, -1.0], [6, -2.01]], "top": [[[5, -1.0], [9, -3.0]]]}]
    assert "moved by 0.01" in resident.canary_drift(ref, moved, 1e-3)
    assert resident.canary_drift(ref, moved, 0.05) is None
    other = [{"key": "canary-0", "tokens": [[5, -1.0], [6, -2.0]], "top": [[[9, -1.0], [5, -3.0]]]}]
    assert "top-k tokens differ" in resident.canary_drift(ref, other, 1e-3)
    assert "expected" in resident.canary_drift(ref, [], 1e-3)
    nan = [{"key": "canary-0", "tokens": [[5, -1.0], [6, float("nan")]], "top": [[[5, -1.0], [9, -3.0]]]}]
    assert "no finite difference" in resident.canary_drift(ref, nan, 1e-3)
    nan_top = [{"key": "canary-0", "tokens": [[5, -1.0], [6, -2.0]], "top": [[[5, float("nan")], [9, -3.0]]]}]
    assert "no finite difference" in resident.canary_drift(ref, nan_top, 1e-3)
    inf = [{"key": "canary-0", "tokens": [[5, -1.0], [6, float("-inf")]], "top": [[[5, -1.0], [9, -3.0]]]}]
    assert "no finite difference" in resident.canary_drift(ref, inf, 1e-3)
    assert resident.canary_drift(inf, inf, 1e-3) is None  # the same reading, -inf included


@pytest.mark.slow
def test_two_qualifications_share_one_teacher_and_keep_their_quality_verdicts(env, pool):
    cfg = replace(h.small_config(), teacher=TeacherSection(resident=True))
    from arena.run import RunOptions, qualify
    from cacheon_subnet.bundle import load_bundle

    def run(bundle, name):
        opts = RunOptions(
            workdir=env / name,
            checkpoint_root=env / "ckpt",
            grade_always=True,
            teachers=pool,
            engine_factory="tests.arena.fake_engine:FakeEngine",
        )
        return qualify(cfg, bundle, bundle.manifest.ops[0], opts)

    good = run(h.torch_bundle(), "good")
    wrong = run(load_bundle(h.REPO / "examples" / "controls" / "wrong_math"), "wrong")
    assert good["quality"]["verdict"] == "PASS", good["quality"]
    assert wrong["verdict"] == "FAIL" and wrong["reason"].startswith("quality:"), wrong["reason"]
    assert good["stages"]["teacher"]["host_timing"]["reused"] == 0.0
    assert wrong["stages"]["teacher"]["host_timing"]["reused"] == 1.0  # no second teacher start


def test_the_teacher_table_is_optional_and_its_defaults_keep_the_arena_id(tmp_path):
    cfg = load_config(h.DENSE)
    assert cfg.teacher == TeacherSection()
    text = h.DENSE.read_text()
    explicit = tmp_path / "dense.toml"
    explicit.write_text(text + "\n[teacher]\nresident = false\n")
    assert load_config(explicit).arena_id == cfg.arena_id
    on = tmp_path / "resident.toml"
    on.write_text(text + "\n[teacher]\nresident = true\n")
    assert load_config(on).arena_id != cfg.arena_id  # a co-tenant T is another measurement setting
    crowded = tmp_path / "crowded.toml"
    crowded.write_text(text + "\n[teacher]\nresident = true\nmem_fraction_static = 0.4\n")
    from arena.config import ArenaConfigError

    with pytest.raises(ArenaConfigError, match=r"\[teacher\] mem_fraction_static.*shares the GPU"):
        load_config(crowded)


def test_a_shutdown_ends_a_teacher_job_at_once_and_stops_the_teacher(env, pool):
    import threading
    import time

    from cacheon_subnet import lifecycle

    timer = threading.Timer(1.0, lifecycle.SHUTDOWN.set)
    timer.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(lifecycle.Interrupted):
            _grade(pool, "HangingEngine", _sequences(1), env, "a")  # would wait out its 120 s limit
    finally:
        timer.cancel()
        lifecycle.SHUTDOWN.clear()
    assert time.monotonic() - t0 < 30
    assert not pool._teachers  # stopped, not left running for the next verdict


def test_the_canary_is_made_of_the_arenas_prompts_not_the_first_candidates_outputs():
    """Red team: the canary was the first job's first two sequences as graded, and a grading job
    lists role C first, so the first contribution a fresh T graded chose T's canary for every
    later verdict (its own continuations: a repeated token T predicts at logprob ~0 moves by less
    than canary_atol whatever state T holds). Now it is the first prompts, split in two."""
    from types import SimpleNamespace

    from arena.jobs import teacher_steps

    class Stub:
        def __init__(self, spec, home):
            self.jobs, self.poisoned = 0, None

        def run(self, name, job, workdir, timeout_s):
            return SimpleNamespace(error=None, step=lambda tag: {"graded": []}, records=())

    cand = [{"key": k, "prompt": [11, 12, 13, 14, 15, 16], "cont": [7, 7, 7, 7]} for k in range(3)]
    base = [{"key": k, "prompt": [11, 12, 13, 14, 15, 16], "cont": [4, 5, 6, 8]} for k in range(3)]
    steps = teacher_steps(
        SimpleNamespace(quality=SimpleNamespace(top_k=4)), {f"resident-{r}": v for r, v in {"C": cand, "B": base}.items()}
    )  # as run._grade orders them
    orig = resident.ResidentEngine
    resident.ResidentEngine = Stub
    try:
        t = resident.ResidentTeacher(None, None, 1e-3)
        t.grade("teacher", {"steps": steps}, None, 1.0)
    finally:
        resident.ResidentEngine = orig
    assert len(t.canary) == resident.CANARY_SEQUENCES
    assert all(7 not in c["cont"] for c in t.canary), t.canary  # none of the candidate's tokens
    assert all(c["prompt"] + c["cont"] == cand[0]["prompt"] for c in t.canary)
