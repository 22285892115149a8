"""Issue 30 item 3: the queue never waits on one contribution. CPU screens overlap the arena; a GPU
screen never runs beside an arena job; a finished background job wakes the next pass; a resource
error (EMFILE, ENOMEM, ENOSPC) or a bug in one item is that item's transient error, never a
crashed pass. Each test names the guard it watches; mutating that guard turns it red."""

from __future__ import annotations

import errno
import threading
import time
from dataclasses import dataclass, field

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
from cacheon_subnet.validator.background import CpuSplit, split_cpus
from cacheon_subnet.validator.loop import Validator, ValidatorConfig
from cacheon_subnet.validator.screen import ScreenResult
from cacheon_subnet.validator.stages import fetch as fetch_stage
from cacheon_subnet.validator.stages import items as items_mod

T = "norm.rmsnorm"


@pytest.fixture(scope="module")
def srv():
    with FileServer() as s:
        yield s


DIGESTS: dict[str, list[str]] = {}


def _world(tmp_path, srv, n: int):
    """A chain with n commitments of norm.rmsnorm bundles salted 0..n-1 (digests in DIGESTS)."""
    chain = make_chain(tmp_path / "chain.db", miners=n)
    digests = DIGESTS.setdefault(str(tmp_path), [])
    for i in range(n):
        a, d = make_archive(EXAMPLES / T, tmp_path, f"b{i}", {"speed.txt": f"1.0{i}", "salt.txt": str(i)})
        commit(chain, f"m{i}", d, srv.add(f"{tmp_path.name}-b{i}.tar.gz", a))
        digests.append(d)
    chain.advance(2)
    return chain


def _make(tmp_path, chain, qualifier, screener, **cfg) -> Validator:
    opts = {
        "interval_s": 0,
        "targets": (T,),
        "retry_base_s": 0.0,
        "retry_max_s": 0.0,
        "url_policy": LOCAL,
        "chain_backoff_base_s": 0.01,
        **cfg,
    }
    return Validator(
        ValidatorConfig(netuid=NETUID, hotkey=VALIDATOR, state_dir=tmp_path / "state", **opts),
        chain,
        qualifier,
        screener=screener,
    )


@dataclass
class Clock:
    """Intervals [start, end) of what ran, by kind: ('screen', salt) and ('arena', salt)."""

    spans: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, kind: str, salt: str, seconds: float) -> None:
        t0 = time.monotonic()
        time.sleep(seconds)
        with self.lock:
            self.spans[(kind, salt)] = (t0, time.monotonic())

    def overlapping(self) -> list[tuple[str, str]]:
        """(screen, arena) salts whose spans overlap."""
        s = [(k[1], v) for k, v in self.spans.items() if k[0] == "screen"]
        a = [(k[1], v) for k, v in self.spans.items() if k[0] == "arena"]
        return [(x, y) for x, (s0, s1) in s for y, (a0, a1) in a if x != y and s0 < a1 and a0 < s1]


def _salt(bundle) -> str:
    return bundle.files["salt.txt"].decode()


@dataclass(frozen=True)
class TimedArena(FakeQualifier):
    clock: Clock | None = None
    seconds: float = 0.6

    def qualify(self, bundle, op, incumbent):
        self.clock.run("arena", _salt(bundle), self.seconds)
        return super().qualify(bundle, op, incumbent)


def _timed_screener(clock: Clock, seconds: float = 0.6, step: float = 0.0):
    """Screens that take `seconds`, plus `step` per salt (so they end at different times)."""

    def screen(bundle):
        clock.run("screen", _salt(bundle), seconds + step * int(_salt(bundle)))
        return ScreenResult(True, (), {"fake": True})

    return screen


@pytest.mark.slow
def test_cpu_screens_run_while_the_arena_judges(tmp_path, srv):
    """Guard: stages/workers.start_workers (overlap on for a non-CPU-timing qualifier). With
    overlap=False (the broken control) every screen ends before any arena starts."""
    clock = Clock()
    chain = _world(tmp_path, srv, 3)
    v = _make(tmp_path, chain, TimedArena(clock=clock), _timed_screener(clock))
    s = v.run_once()
    counts = v.db.counts()
    v.close()
    assert counts["qualified"] == 3 and s.in_flight == 0, (counts, s)
    assert clock.overlapping(), clock.spans  # a later contribution screened while an earlier one was judged

    clock2 = Clock()
    (tmp_path / "b").mkdir()
    chain2 = _world(tmp_path / "b", srv, 3)
    v2 = _make(tmp_path / "b", chain2, TimedArena(clock=clock2), _timed_screener(clock2), overlap=False)
    v2.run_once()
    counts2 = v2.db.counts()
    v2.close()
    assert counts2["qualified"] == 3 and clock2.overlapping() == [], clock2.spans


@pytest.mark.slow
def test_a_gpu_screen_never_runs_beside_an_arena_job(tmp_path, srv):
    """Guard: VerifyStages._gpu_turn_taken_by_arena and QualifyStages' _gpu_screens_running check.
    Remove either and a CUDA screen overlaps an arena's timed windows."""
    clock = Clock()
    chain = _world(tmp_path, srv, 4)
    v = _make(
        tmp_path,
        chain,
        TimedArena(clock=clock, seconds=0.4),
        _timed_screener(clock, 0.2, 0.3),
        screen_device="cuda",
        screen_workers=2,
    )
    v.run_once()
    counts = v.db.counts()
    v.close()
    assert counts["qualified"] == 4, counts
    assert clock.overlapping() == [], clock.spans


@pytest.mark.slow
def test_a_gpu_screen_waits_for_the_arena_job_in_flight(tmp_path, srv):
    """Guard: VerifyStages._gpu_turn_taken_by_arena. Contributions that arrive while an arena job
    runs are screened on the GPU only after it; without the guard they are screened beside it."""
    clock = Clock()
    chain = make_chain(tmp_path / "chain.db", miners=3)
    archives = [make_archive(EXAMPLES / T, tmp_path, f"b{i}", {"salt.txt": str(i)}) for i in range(3)]
    commit(chain, "m0", archives[0][1], srv.add(f"{tmp_path.name}-b0.tar.gz", archives[0][0]))
    chain.advance(2)
    v = _make(
        tmp_path,
        chain,
        TimedArena(clock=clock, seconds=1.5),
        _timed_screener(clock, 0.1),
        screen_device="cuda",
        screen_workers=2,
    )
    deadline = time.monotonic() + 20
    while not v.workers.pool.in_flight() and time.monotonic() < deadline:
        v.run_once(drain=False)
        time.sleep(0.02)
    assert v.workers.pool.in_flight(), "the first contribution never reached the arena"
    for i in (1, 2):
        commit(chain, f"m{i}", archives[i][1], srv.add(f"{tmp_path.name}-b{i}.tar.gz", archives[i][0]))
    chain.advance(2)
    v.run_once()
    counts = v.db.counts()
    v.close()
    assert counts["qualified"] == 3, counts
    assert clock.overlapping() == [], clock.spans


def test_a_finished_arena_job_wakes_the_next_pass(tmp_path, srv):
    """Guard: the wake event the background pools set. Without it the verdict waits the whole
    interval (60 s here) before the loop collects it."""
    chain = _world(tmp_path, srv, 1)
    v = _make(tmp_path, chain, FakeQualifier(delay_s=0.5), fake_screener(), interval_s=60.0, busy_poll_s=60.0)
    stop = threading.Event()
    t = threading.Thread(target=v.run_forever, args=(stop,), daemon=True)
    t0 = time.monotonic()
    t.start()
    try:
        while time.monotonic() - t0 < 20 and v.db.counts()["qualified"] < 1:
            time.sleep(0.05)
        took = time.monotonic() - t0
    finally:
        stop.set()
        t.join(70)
        v.close()
    assert took < 20, f"the verdict was collected only after {took:.1f} s"


def test_split_cpus_gives_screens_a_slice_and_leaves_small_hosts_alone():
    assert split_cpus(0.25, frozenset(range(16))) == CpuSplit(frozenset(range(12)), frozenset(range(12, 16)))
    assert split_cpus(0.25, frozenset({0, 1})) == CpuSplit()  # 2 cores: nothing to split
    assert split_cpus(0.0, frozenset(range(16))) == CpuSplit()
    four = split_cpus(0.9, frozenset(range(4)))
    assert len(four.arena) == 2 and len(four.screen) == 2  # the arena keeps at least two


def _emfile(*_a, **_k):
    raise OSError(errno.EMFILE, "Too many open files")


@pytest.mark.parametrize("overlap", [True, False])
def test_a_resource_error_in_one_item_is_its_transient_error_not_a_crashed_pass(tmp_path, srv, monkeypatch, overlap):
    """Guard: stages/items.Items.guard. The first contribution's cached archive cannot be opened (EMFILE):
    its attempt is counted and backed off, the other contribution is judged in the same pass, and
    after max_attempts it ends no_decision (never failed: not the miner's fault)."""
    chain = _world(tmp_path, srv, 2)
    v = _make(tmp_path, chain, FakeQualifier(), fake_screener(), overlap=overlap, max_attempts=3)
    first = DIGESTS[str(tmp_path)][0]
    real = items_mod.load_cached
    bad: set[str] = set()

    def flaky(cache_dir, digest):
        if digest in bad:
            _emfile()
        return real(cache_dir, digest)

    monkeypatch.setattr(items_mod, "load_cached", flaky)
    bad.add(first)
    summaries = [v.run_once() for _ in range(3)]
    rows = {c.digest: c for c in v.db.contributions()}
    v.close()
    broken = rows[first]
    assert broken.state == "no_decision" and "EMFILE" in broken.reason, broken
    assert [c.state for d, c in rows.items() if d != first] == ["qualified"]
    assert summaries[0].failed.get("screen") == 1 and summaries[1].failed.get("screen") == 1


def test_a_bug_in_one_item_never_stops_the_others(tmp_path, srv):
    """Guard: Items.guard catches any error of one item (here a screener that raises a
    KeyError for one bundle): the other contribution is verified and judged in the same pass."""
    chain = _world(tmp_path, srv, 2)

    def screener(bundle):
        if _salt(bundle) == "0":
            raise KeyError("a bug in the screener")
        return ScreenResult(True, (), {})

    v = _make(tmp_path, chain, FakeQualifier(), screener, max_attempts=2)
    v.run_once()
    v.run_once()
    salts = {d: str(i) for i, d in enumerate(DIGESTS[str(tmp_path)])}  # a settled one's archive is pruned
    rows = {salts[c.digest]: c for c in v.db.contributions()}
    v.close()
    assert rows["1"].state == "qualified"
    assert rows["0"].state == "no_decision" and "KeyError" in rows["0"].reason, rows["0"]


def test_a_resource_error_outside_any_item_ends_only_its_stage(tmp_path, srv, monkeypatch):
    """Guard: run_once's stage-level catch of resource errors. The fetch stage cannot even open
    its session (EMFILE): the pass does not crash, says why, and publishing still runs."""
    chain = _world(tmp_path, srv, 1)
    v = _make(tmp_path, chain, FakeQualifier(), fake_screener())
    monkeypatch.setattr(fetch_stage, "guarded_session", _emfile)
    s = v.run_once()
    v.close()
    assert not s.ok and any("fetch: resource exhausted: EMFILE" in p for p in s.problems), s.problems
    assert s.weights is not None  # the publish stage ran after it


def test_passes_survive_a_process_out_of_file_descriptors(tmp_path, srv):
    """The issue's attack, reduced to its effect: every fd of the validator's process is taken.
    Guards: Items.guard, run_once's stage-level catch, resources.is_resource_error in
    netfetch/archive. Before them every such pass crashed and the contribution never moved; now
    each pass returns (failed, saying why), nothing is charged to the miner, and once fds are
    free again the same contribution is judged."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    _world(tmp_path, srv, 1)
    worker = Path(__file__).resolve().parent / "fd_exhaustion_worker.py"
    proc = subprocess.run(
        [sys.executable, str(worker), str(tmp_path / "state"), str(tmp_path / "chain.db"), "3"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(rows) == 5, (proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])
    primed, starved, freed = rows[0], rows[1:4], rows[4]
    assert primed["primed"]["fetched"] == 1, primed
    assert all("crashed" not in r for r in starved), starved
    assert all(not r["ok"] and r["failed"].get("screen") == 1 for r in starved), starved  # says why, per item
    assert freed["attempts_seen"] == 3, freed  # each starved pass counted one attempt: it moved
    assert freed["ok"] and freed["counts"]["qualified"] == 1, freed
    assert freed["transitions"] == ["queued", "fetched", "screened", "verified", "qualified"], freed


def test_a_cached_archive_unreadable_for_want_of_fds_is_kept_not_called_corrupt(tmp_path, monkeypatch):
    """Guard: archive._read_archive re-raises resource errors. Read as 'archive-corrupt', EMFILE
    made load_cached delete a good cache entry (and a fetch fail the miner as bundle_invalid)."""
    import tarfile

    from cacheon_subnet.validator.fetch import cache_path, load_cached

    archive, digest = make_archive(EXAMPLES / T, tmp_path, "x")
    cache = tmp_path / "bundles"
    cache.mkdir()
    cache_path(cache, digest).write_bytes(archive.read_bytes())
    monkeypatch.setattr(tarfile, "open", _emfile)
    with pytest.raises(OSError) as got:
        load_cached(cache, digest)
    assert got.value.errno == errno.EMFILE
    assert cache_path(cache, digest).is_file()
    monkeypatch.undo()
    assert load_cached(cache, digest).digest == digest


def test_a_fetch_that_cannot_open_a_socket_is_not_charged_to_the_miner(tmp_path):
    """Guard: netfetch re-raises resource errors. As FetchError('connect', transient) an EMFILE
    at connect ended, after its retries, in `failed` (the miner's unreachable server)."""
    import asyncio

    import aiohttp

    from cacheon_subnet.netfetch import FetchError, FetchPolicy, download
    from cacheon_subnet.netpolicy import LOCAL as urls

    class NoFds:
        def get(self, *_a, **_k):
            raise aiohttp.ClientOSError(errno.EMFILE, "Too many open files")

        async def close(self) -> None:
            return None

    with pytest.raises(OSError) as got:
        asyncio.run(download("http://127.0.0.1:9/x.tar.gz", tmp_path / "x", FetchPolicy(urls=urls), NoFds()))
    assert not isinstance(got.value, FetchError) and got.value.errno == errno.EMFILE


def test_only_a_cpu_screen_is_pinned_away_from_the_arena(tmp_path, monkeypatch):
    """A CPU screen beside the arena gets its slice of cores; a GPU screen (never beside an arena
    job) keeps every core for its input draws."""
    import cacheon_subnet.validator.background as bg

    monkeypatch.setattr(bg.os, "sched_getaffinity", lambda _pid: set(range(16)))
    chain = make_chain(tmp_path / "chain.db")
    cpu = _make(tmp_path, chain, FakeQualifier(), fake_screener())
    assert cpu.cpus == CpuSplit(frozenset(range(12)), frozenset(range(12, 16)))
    cpu.close()
    gpu = _make(tmp_path, chain, FakeQualifier(), fake_screener(), screen_device="cuda")
    assert gpu.cpus == CpuSplit()
    gpu.close()


@pytest.mark.slow
def test_a_long_arena_job_does_not_make_the_loop_poll_the_chain(tmp_path, srv):
    """Guard: run_forever shortens its wait only for a pool that never wakes it (Ray). The
    validator's own arena wakes the loop when its job ends; polling meanwhile would run a full
    pass (three chain calls) every busy_poll_s for the minutes a verdict takes."""
    chain = _world(tmp_path, srv, 1)
    v = _make(tmp_path, chain, FakeQualifier(delay_s=3.0), fake_screener(), interval_s=60.0, busy_poll_s=0.1)
    passes = []
    real = v.run_once

    def counted(drain: bool = True):
        passes.append(time.monotonic())
        return real(drain=drain)

    v.run_once = counted  # type: ignore[method-assign]
    stop = threading.Event()
    t = threading.Thread(target=v.run_forever, args=(stop,), daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and v.db.counts()["qualified"] < 1:
            time.sleep(0.05)
    finally:
        stop.set()
        t.join(70)
        v.close()
    assert v_qualified(tmp_path) == 1
    assert len(passes) <= 6, f"{len(passes)} passes while one 3 s verdict ran"


def v_qualified(tmp_path) -> int:
    from cacheon_subnet.validator.state import StateDB

    db = StateDB(tmp_path / "state", readonly=True)
    try:
        return db.counts()["qualified"]
    finally:
        db.close()
