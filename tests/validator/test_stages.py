"""The loop's stages are objects built from typed collaborators (validator/stages/): each can be
built and run with fakes that only satisfy its Protocols (stages/ports.py), on a real state DB,
without a Validator. Also: the per-pass record (PassState) and what start_workers decides once."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
from validator_fakes import EXAMPLES, FakeQualifier, fake_screener, make_archive

from cacheon_subnet.chain.backend import Commitment, Metagraph, Neuron
from cacheon_subnet.chain.commitment import encode
from cacheon_subnet.netpolicy import LOCAL
from cacheon_subnet.records import QualifyResult
from cacheon_subnet.validator import ledger
from cacheon_subnet.validator.background import CpuSplit
from cacheon_subnet.validator.dispatch import BackgroundArena
from cacheon_subnet.validator.intake import IntakePolicy
from cacheon_subnet.validator.stages.items import Archives, Items, RetryPolicy
from cacheon_subnet.validator.stages.passstate import PassState
from cacheon_subnet.validator.stages.qualify import Filing, QualifyStage
from cacheon_subnet.validator.stages.sync import SyncStage
from cacheon_subnet.validator.stages.workers import GpuTurn, start_workers
from cacheon_subnet.validator.state import StateDB

T = "norm.rmsnorm"


class Log:
    """ports.Log: keeps (level, event, fields)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict]] = []

    def _add(self, level: str, event: str, **kw: object) -> None:
        self.lines.append((level, event, kw))

    def info(self, event: str, *args: object, **kw: object) -> None:
        self._add("info", event, **kw)

    def warning(self, event: str, *args: object, **kw: object) -> None:
        self._add("warning", event, **kw)

    def error(self, event: str, *args: object, **kw: object) -> None:
        self._add("error", event, **kw)

    def exception(self, event: str, *args: object, **kw: object) -> None:
        self._add("exception", event, **kw)

    def events(self) -> list[str]:
        return [e for _, e, _ in self.lines]


class Chain:
    """ports.ChainReader: a fixed block, one neuron, the commitments given."""

    def __init__(self, block: int, commitments: list[Commitment]) -> None:
        self.block, self.commitments = block, commitments

    def current_block(self) -> int:
        return self.block

    def metagraph(self, netuid: int) -> Metagraph:
        return Metagraph(netuid, self.block, (Neuron(0, "m0", "c0", 0.0, False),))

    def revealed_commitments(self, netuid: int) -> list[Commitment]:
        return list(self.commitments)


class Verdicts:
    """ports.VerdictCounter."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def verdict(self, verdict: str) -> None:
        self.seen.append(verdict)


@pytest.fixture
def db(tmp_path: Path):
    d = StateDB(tmp_path / "state")
    yield d
    d.close()


def test_sync_stage_runs_on_a_fake_chain(db: StateDB) -> None:
    digest = "ab" * 32
    good = Commitment("m0", 2, 5, 6, encode(digest, "m0", "http://127.0.0.1:1/x.tar.gz", LOCAL))
    junk = Commitment("m1", 3, 5, 6, '{"v":1,"d":"zz"}')
    log = Log()
    ps = PassState()
    SyncStage(db, Chain(7, [good, junk]), 1, IntakePolicy(), LOCAL, log).run(ps)
    states = sorted((c.hotkey, c.state) for c in db.contributions())
    assert states == [("m0", "queued"), ("m1", "failed")]
    assert ps.block == 7 and ps.intake == 2 and db.get("last_sync_block") == "7"
    assert {"intake.queued", "intake.malformed"} <= set(log.events())


def _verified(db: StateDB, tmp_path: Path, speed: str = "1.25") -> str:
    """One contribution in `verified` with its archive in the cache; returns its id."""
    archive, digest = make_archive(EXAMPLES / T, tmp_path, "c", {"speed.txt": speed})
    cache = tmp_path / "state" / "bundles"
    cache.mkdir(parents=True, exist_ok=True)
    shutil.copy(archive, cache / f"{digest}.tar.gz")
    with db.tx() as con:
        db.insert(
            con, cid="c1", hotkey="m0", uid=2, commit_block=5, reveal_block=6, url="http://x", digest=digest,
            state="verified", todo=(T,),
        )  # fmt: skip
    return "c1"


def _qualify_stage(db: StateDB, tmp_path: Path, qualifier, log: Log, verdicts: Verdicts) -> QualifyStage:
    chain = Chain(10, [])
    items = Items(db, log, RetryPolicy(max_attempts=3, base_s=0.0, max_s=0.0))
    archives = Archives(db, tmp_path / "state" / "bundles", log)
    return QualifyStage(db, chain, items, archives, Filing(db, chain, log), qualifier, verdicts, log)


def test_a_qualify_stage_built_from_fakes_files_the_verdict(db: StateDB, tmp_path: Path) -> None:
    cid = _verified(db, tmp_path)
    log, verdicts, ps = Log(), Verdicts(), PassState()
    _qualify_stage(db, tmp_path, FakeQualifier(), log, verdicts).run(ps)
    c = db.contribution(cid)
    row = db.con.execute("SELECT target, verdict, speedup FROM evidence WHERE contribution_id=?", (cid,)).fetchone()
    assert c.state == "qualified" and tuple(row) == (T, "PASS", pytest.approx(1.25))
    assert verdicts.seen == ["PASS"] and ps.moved == {"qualified": 1} and ps.tried == {"qualify": 1}
    assert ledger.unsettled_targets(db) == [T]


def test_a_qualifier_answer_that_cannot_be_recorded_is_arena_trouble(db: StateDB, tmp_path: Path) -> None:
    """The broken control of the test above: a NaN speedup is never filed (result_problem), the
    item is retried (attempt counted, still verified), and nothing is counted as a verdict."""

    class NaN(FakeQualifier):
        def qualify(self, bundle, op, incumbent):
            r = super().qualify(bundle, op, incumbent)
            return QualifyResult(**{**r.__dict__, "speedup": float("nan")})

    cid = _verified(db, tmp_path)
    log, verdicts, ps = Log(), Verdicts(), PassState()
    _qualify_stage(db, tmp_path, NaN(), log, verdicts).run(ps)
    c = db.contribution(cid)
    assert c.state == "verified" and c.attempts == 1 and "not a finite number" in c.reason
    assert verdicts.seen == [] and ps.failed == {"qualify": 1} and "qualify.retry" in log.events()
    assert db.con.execute("SELECT COUNT(*) FROM evidence").fetchone()[0] == 0


def test_pass_state_problems() -> None:
    ps = PassState()
    ps.attempted("fetch")
    ps.attempted("fetch", failed=True)  # one of two failed: the stage did its job
    assert ps.problems(None) == ()
    ps.attempted("verify", failed=True)  # every verify item tried failed: the pass failed
    ps.weights, ps.weights_detail = "refused", "no permit"
    ps.exhausted.append("screen: resource exhausted: EMFILE")
    assert ps.problems("rpc down") == (
        "chain: rpc down",
        "weights refused: no permit",
        "screen: resource exhausted: EMFILE",
        "verify: all 1 items tried this pass ended in an error",
    )
    ps.advanced("fetched")
    s = ps.summary(None, active=3, unsettled=0, next_delay_s=1.0, in_flight=0)
    assert s.moved == {"fetched": 1} and s.failed == {"fetch": 1, "verify": 1} and not s.ok and not s.idle


class Pool:
    """ports.ArenaPool without a wake event (as Ray's): the loop must poll it."""

    arena_id, label, head_to_head = "pool-arena", "pool-timing", False

    def submit(self, job) -> None:
        pass

    def poll(self) -> list:
        return []

    def in_flight(self) -> frozenset[str]:
        return frozenset()

    def free_slots(self) -> int:
        return 1


class WakingPool(Pool):
    def __init__(self) -> None:
        self.wake = threading.Event()


def _workers(q, **kw):
    opts = {"overlap": None, "screen_device": "cpu", "screen_workers": 1, "screen_cpu_share": 0.0, **kw}
    return start_workers(q, fake_screener(), **opts)


def test_start_workers_reads_once_what_it_was_handed() -> None:
    polled = _workers(Pool())
    assert isinstance(polled.pool, Pool) and polled.own_pool is None and polled.polled and polled.screens is not None
    waking = WakingPool()
    woken = _workers(waking)
    assert woken.pool is waking and not woken.polled and woken.wake is waking.wake
    own = _workers(FakeQualifier())
    assert isinstance(own.pool, BackgroundArena) and own.pool is own.own_pool and not own.polled
    serial = _workers(FakeQualifier(label="cpu-timing"))
    assert serial.pool is None and serial.screens is None and serial.cpus == CpuSplit() and not serial.polled
    for w in (polled, woken, own):
        assert w.screens is not None
        w.screens.close()
    assert own.own_pool is not None
    own.own_pool.close()


def test_the_gpu_turn() -> None:
    busy, idle = Pool(), Pool()
    busy.in_flight = lambda: frozenset({"k"})  # type: ignore[method-assign]
    assert GpuTurn(True, screens=busy, arena=busy).arena_busy() and GpuTurn(True, screens=busy).screens_busy()
    assert not GpuTurn(False, screens=busy, arena=busy).arena_busy()  # a CPU screen never waits for the GPU
    assert not GpuTurn(True, screens=idle, arena=idle).screens_busy()


def test_screen_workers_auto_is_one_per_screening_core() -> None:
    """Session 21's H100 host: 16 cores, 4 of them the screen's; its five CPU verifies ran one
    after another (366 s). Auto runs four; a GPU screen (it takes turns with the arena) and an
    unsplit host run one; a number given is kept."""
    from cacheon_subnet.validator.stages.workers import screen_worker_count

    split = CpuSplit(arena=frozenset(range(12)), screen=frozenset(range(12, 16)))
    assert screen_worker_count(None, split, cpu_screen=True) == 4
    assert screen_worker_count(None, split, cpu_screen=False) == 1
    assert screen_worker_count(None, CpuSplit(), cpu_screen=True) == 1
    assert screen_worker_count(2, split, cpu_screen=True) == 2
    auto = _workers(FakeQualifier(), screen_workers=None)
    assert auto.screens is not None and auto.screens.workers == 1  # this 2-core box is never split
    auto.screens.close()
    assert auto.own_pool is not None
    auto.own_pool.close()
