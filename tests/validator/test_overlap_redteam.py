"""Red team of the overlapped loop (issue 30 item 3: background screens and arena): a verdict whose
words the state DB cannot store, an arena answer this validator cannot file, and a chain outage
while a job is in flight. Each must end in one verdict for its contribution (a FAIL stays a FAIL),
never a crashed pass, a lost result run again, or a queue that stops screening."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from validator_fakes import (
    EXAMPLES,
    NETUID,
    VALIDATOR,
    FakeQualifier,
    FileServer,
    commit,
    fake_screener,
    make_archive,
    make_chain,
)

from cacheon_subnet.netpolicy import LOCAL
from cacheon_subnet.records import QualifyResult
from cacheon_subnet.validator.loop import Validator, ValidatorConfig
from cacheon_subnet.validator.screen import ScreenResult, VerifyScreener

T = "norm.rmsnorm"
SURROGATE = "\udcff"  # what json.loads makes of a worker's "\\udcff": SQLite's UTF-8 binding refuses it
RAISES_SURROGATE = '''"""Raises an exception whose text holds a lone surrogate (policy-clean: raise, a literal)."""

import torch


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    raise ValueError("kernel refused \\udcff")
'''


@pytest.fixture(scope="module")
def srv():
    with FileServer() as s:
        yield s


def _world(tmp_path: Path, srv: FileServer, n: int, src: Path = EXAMPLES / T) -> tuple:
    chain = make_chain(tmp_path / "chain.db", miners=n)
    digests = []
    for i in range(n):
        a, d = make_archive(src, tmp_path, f"b{i}", {"salt.txt": str(i)})
        commit(chain, f"m{i}", d, srv.add(f"{tmp_path.name}-b{i}.tar.gz", a))
        digests.append(d)
    chain.advance(2)
    return chain, digests


def _make(tmp_path: Path, chain, qualifier, screener, **cfg) -> Validator:
    opts = {
        "interval_s": 0,
        "targets": (T,),
        "retry_base_s": 0.0,
        "retry_max_s": 0.0,
        "url_policy": LOCAL,
        "chain_backoff_base_s": 0.01,
        "chain_call_retries": 0,
        **cfg,
    }
    return Validator(
        ValidatorConfig(netuid=NETUID, hotkey=VALIDATOR, state_dir=tmp_path / "state", **opts),
        chain,
        qualifier,
        screener=screener,
    )


@dataclass(frozen=True)
class Scripted(FakeQualifier):
    """Answers `verdict` with `reason` (any object: an answer a pool could hand back), counting runs."""

    verdict: str = "FAIL"
    reason: object = "candidate: exception"
    calls: list = field(default_factory=list)
    finished: list = field(default_factory=list)

    def qualify(self, bundle, op, incumbent):
        self.calls.append(bundle.files["salt.txt"].decode())
        if self.delay_s:
            time.sleep(self.delay_s)
        self.finished.append(self.calls[-1])
        return QualifyResult(
            op.slot,
            self.verdict,
            self.verdict == "PASS",
            0.5,
            0.5,
            0.01,
            self.arena_id,
            self.label,
            self.reason,
        )


@pytest.mark.slow
def test_a_verify_fail_worded_with_a_lone_surrogate_stays_a_fail(tmp_path, srv):
    """Attack: a policy-clean kernel raises ValueError("...\\udcff"); the worker sends its text as
    JSON, the host decodes a lone surrogate, and the FAIL's reason could not be stored: the loop
    read that as its own trouble, retried, and ended no_decision (a FAIL escaped, four verifies
    spent). Guard: stages/verify.VerifyStage._verdict stores the reason through storable() (red without it)."""
    src = tmp_path / "src-surrogate"
    src.mkdir()
    (src / "manifest.toml").write_text((EXAMPLES / T / "manifest.toml").read_text())
    (src / "rmsnorm.py").write_text(RAISES_SURROGATE)
    chain, _ = _world(tmp_path, srv, 1, src)
    v = _make(tmp_path, chain, FakeQualifier(), VerifyScreener(device="cpu", max_cases=1), max_attempts=2)
    summary = v.run_once()
    [c] = v.db.contributions()
    v.close()
    assert c.state == "failed" and c.attempts == 0, (c.state, c.reason)
    assert "exception" in c.reason and "\\udcff" in c.reason and SURROGATE not in c.reason, c.reason
    assert summary.ok, summary.problems


def test_an_arena_fail_worded_with_a_lone_surrogate_is_filed_once(tmp_path, srv):
    """Attack: the arena's FAIL reason carries the bundle's own exception text with a lone
    surrogate. Collected from the background arena, recording it raised out of the pass: every
    pass crashed before settle and publish (no weights), the result was lost and the same
    contribution went back to the arena, forever. Guard: stages/qualify.Filing.record's storable()
    (without it the _collect guard below turns it into a job error: retried, never a FAIL)."""
    chain, _ = _world(tmp_path, srv, 1)
    q = Scripted(reason=f"candidate: exception: kernel refused {SURROGATE}")
    v = _make(tmp_path, chain, q, fake_screener())
    summaries = [v.run_once() for _ in range(3)]
    [c] = v.db.contributions()
    v.close()
    assert q.calls == ["0"], q.calls  # judged once
    assert c.state == "failed" and "\\udcff" in c.reason, (c.state, c.reason)
    assert all(s.ok and s.weights is not None for s in summaries), [s.problems for s in summaries]


def test_an_answer_that_cannot_be_recorded_is_a_job_error_not_a_crashed_pass(tmp_path, srv):
    """Attack: any answer whose recording raises (here a label SQLite cannot bind, as a pool worker
    on another host could send; a reason of the wrong type is refused earlier, by result_problem).
    Guard: the try around Filing.record in stages/dispatch.DispatchStage.collect: the job's
    error (its key recorded, retried, then no_decision), every pass completes. Without it every
    pass that collected it crashed and the job ran again with the same key, without end."""
    chain, _ = _world(tmp_path, srv, 1)
    q = Scripted(label=f"fake {SURROGATE}")
    v = _make(tmp_path, chain, q, fake_screener(), max_attempts=2)
    summaries = [v.run_once() for _ in range(3)]
    [c] = v.db.contributions()
    v.close()
    assert c.state == "no_decision" and "could not be recorded" in c.reason, (c.state, c.reason)
    assert len(q.calls) == 2, q.calls  # bounded by max_attempts
    assert all(s.weights is not None for s in summaries)


class GatedScreener:
    """Passes every bundle; the first one screened waits for `release`. Records the order."""

    def __init__(self) -> None:
        self.release, self.done = threading.Event(), threading.Event()
        self.started: list[str] = []

    def __call__(self, bundle):
        self.started.append(bundle.files["salt.txt"].decode())
        if len(self.started) == 1:
            self.release.wait(30)
            self.done.set()
        return ScreenResult(True, (), {"fake": True})


def _until(cond, within_s: float = 20.0) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return False


def test_a_chain_outage_neither_loses_an_arena_result_nor_stops_screening(tmp_path, srv):
    """Attack (or bad luck): the chain stops answering while an arena job runs. Filing its result
    needs the block, so _collect raised ChainDown after the pool had handed the result over: it was
    lost, and the contribution judged again once the chain came back (GPU time twice). And the
    ChainDown from dispatching ended the whole interleaved pipeline, so no queued contribution
    was screened during the outage (verify had been a stage of its own that needs no chain).
    Guards: stages/dispatch.DispatchStage.run holds unfiled results (red: the qualifier runs twice) and
    stages/pipeline.Pipeline goes on verifying under ChainDown (red: the second screen never starts while down)."""
    chain, _ = _world(tmp_path, srv, 2)
    screener = GatedScreener()
    q = Scripted(verdict="PASS", reason="fast", delay_s=0.6)
    v = _make(tmp_path, chain, q, screener, screen_workers=1)
    assert _until(lambda: v.run_once(drain=False) and bool(screener.started))
    v.run_once(drain=False)  # the other one is fetched and screened: it waits for the one screen slot
    assert v.db.counts()["screened"] == 2 and len(screener.started) == 1
    real = chain.current_block

    def down(*_a, **_k):
        raise ConnectionError("rpc down")

    chain.current_block = down  # type: ignore[method-assign]
    try:
        screener.release.set()
        assert screener.done.wait(20)
        assert _until(lambda: all(f.done() for f in v.workers.screens._jobs._futures.values()))
        s = v.run_once(drain=False)  # collects the first (verified); its dispatch needs the chain
        assert s.chain_error is not None
        assert len(screener.started) == 2, "no screen started while the chain was down"
    finally:
        chain.current_block = real  # type: ignore[method-assign]
    assert _until(lambda: v.run_once(drain=False) and bool(v.workers.pool.in_flight()))
    chain.current_block = down  # type: ignore[method-assign]
    try:
        assert _until(lambda: len(q.finished) == 1)
        assert _until(lambda: all(f.done() for f in v.workers.pool._jobs._futures.values()))
        for _ in range(2):
            assert v.run_once(drain=False).chain_error is not None  # the result comes back: not filed yet
    finally:
        chain.current_block = real  # type: ignore[method-assign]
    v.run_once()
    counts = v.db.counts()
    v.close()
    assert counts["qualified"] == 2, counts
    assert sorted(q.calls) == ["0", "1"], q.calls  # each judged once: nothing lost, nothing run twice


def test_the_loops_own_cpu_work_runs_on_the_screening_cores(tmp_path, srv, monkeypatch):
    """Red team: with a CPU split the screens and their workers kept off the arena's cores, but the
    loop thread's own CPU work beside the arena (the static scan's sandboxed child, up to 20 s of CPU
    per bundle at the caps; unpacking and digesting 64 MiB archives) ran on every core, the
    arena's included, while it timed. Guard: background.pinned around stages/fetch.FetchStage and
    stages/screen.ScreenStage (red: the scan and the fetch see every core); the thread's own set comes back."""
    import os

    from cacheon_subnet.validator.background import CpuSplit
    from cacheon_subnet.validator.stages import fetch as fetch_stage
    from cacheon_subnet.validator.stages import screen as screen_stage
    from cacheon_subnet.validator.stages import workers as workers_mod

    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores to split")
    split = CpuSplit(arena=frozenset(cores[:-1]), screen=frozenset(cores[-1:]))
    seen: dict[str, set[int]] = {}
    real_screen, real_fetch = screen_stage.static_screen, fetch_stage.fetch_bundle

    def screen(bundle):
        seen["scan"] = os.sched_getaffinity(0)
        return real_screen(bundle)

    async def fetch(*a, **k):
        seen["fetch"] = os.sched_getaffinity(0)
        return await real_fetch(*a, **k)

    monkeypatch.setattr(workers_mod, "split_cpus", lambda *_a, **_k: split)
    monkeypatch.setattr(screen_stage, "static_screen", screen)
    monkeypatch.setattr(fetch_stage, "fetch_bundle", fetch)
    chain, _ = _world(tmp_path, srv, 1)
    before = os.sched_getaffinity(0)
    v = _make(tmp_path, chain, FakeQualifier(), fake_screener())
    v.run_once()
    counts = v.db.counts()
    v.close()
    assert counts["qualified"] == 1, counts
    assert seen == {"scan": set(split.screen), "fetch": set(split.screen)}, seen
    assert os.sched_getaffinity(0) == before
