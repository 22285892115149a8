"""Red team of the dispatch path (validator/dispatch.py, ray_pool.py, loop._collect): exactly-once
and liveness of a qualification whose results come back from a pool of arenas."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path

from validator_fakes import EXAMPLES, NETUID, VALIDATOR, FakeQualifier, FileServer, commit, fake_screener, make_chain

from cacheon_subnet.bundle import pack
from cacheon_subnet.validator.dispatch import LocalPool
from cacheon_subnet.validator.loop import Validator, ValidatorConfig

TWO = ("norm.rmsnorm", "norm.fused_add_rmsnorm")


def two_op_bundle(tmp: Path) -> tuple[Path, str]:
    work = tmp / "src-two"
    shutil.copytree(EXAMPLES / "norm.rmsnorm", work)
    shutil.copy(EXAMPLES / "norm.fused_add_rmsnorm" / "fused_add_rmsnorm.py", work)
    with open(work / "manifest.toml", "a") as f:
        f.write(
            '\n[[ops]]\nslot = "norm.fused_add_rmsnorm"\nentry = "fused_add_rmsnorm:fused_add_rmsnorm"\n'
            'dtypes = ["bfloat16", "float16", "float32"]\n'
        )
    archive = tmp / "two.tar.gz"
    return archive, pack(work, archive).digest


@dataclass(frozen=True)
class FlakyFirstOp(FakeQualifier):
    """The fused op's first arena run breaks at once (arena trouble); the other op takes a while."""

    marker: str = ""
    devices: str | None = None

    def on_devices(self, d: str) -> FlakyFirstOp:
        return replace(self, devices=d)

    def qualify(self, bundle, op, incumbent):
        m = Path(self.marker)
        if op.slot == TWO[1] and not m.exists():
            m.write_text("")
            raise RuntimeError("engine did not start (injected)")
        if op.slot == TWO[0]:
            time.sleep(1.0)  # finishes while the fused op is backing off
        return super().qualify(bundle, op, incumbent)


def test_a_transient_error_on_one_op_does_not_strand_the_others(tmp_path):
    """Red team: op A's arena broke once (attempt 0 recorded as `error` under key a0); op B then
    PASSed and _record reset `attempts` to 0, so op A's next key was a0 again, found recorded,
    and A was never dispatched again: the contribution sat in `verified` forever and B's PASS
    never reached settlement (a lost verdict). Keys must never repeat for one (contribution, op)."""
    chain = make_chain(tmp_path / "chain.db", miners=1)
    with FileServer() as srv:
        a, d = two_op_bundle(tmp_path)
        commit(chain, "m0", d, srv.add(f"{tmp_path.name}-two.tar.gz", a))
        chain.advance(2)
        pool = LocalPool(FlakyFirstOp(marker=str(tmp_path / "broke")), ("0", "1"))
        cfg = ValidatorConfig(
            netuid=NETUID,
            hotkey=VALIDATOR,
            state_dir=tmp_path / "state",
            interval_s=0,
            targets=TWO,
            retry_base_s=2.0,
            retry_max_s=2.0,
        )
        v = Validator(cfg, chain, pool, screener=fake_screener())
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            s = v.run_once()
            if s.active == 0:
                break
            time.sleep(0.1)
        states = v.db.counts()
        rows = v.db.con.execute("SELECT target, verdict FROM evidence").fetchall()
        c = v.db.contributions(tuple(states))[0]
        v.close()
        pool.close()
    assert states["qualified"] == 1, (states, c.state, c.todo, c.attempts, c.reason)
    assert sorted((r["target"], r["verdict"]) for r in rows) == sorted((t, "PASS") for t in TWO)


class _Ref:
    def __init__(self, n: int) -> None:
        self.n = n

    def hex(self) -> str:
        return f"{self.n:08x}"


class _FakeRay:
    """What RayPool.poll asks of Ray, answering with whatever a (broken or hostile) worker sent."""

    class exceptions:  # noqa: N801 - mirrors ray.exceptions
        RayError = type("RayError", (Exception,), {})

    def __init__(self, answer) -> None:
        self.answer = answer

    def wait(self, refs, num_returns, timeout):
        return list(refs), []

    def get(self, ref):
        return self.answer(ref)


def _ray_pool(answer):
    import pytest

    pytest.importorskip("ray")
    from cacheon_subnet.validator.ray_pool import RayPool

    pool = RayPool(FakeQualifier(), "local", slots=4, init=False)
    n = iter(range(1000))
    pool._fn = type("F", (), {"remote": staticmethod(lambda q, job: _Ref(next(n)))})()
    pool._ray = _FakeRay(answer)
    return pool


def test_a_ray_worker_cannot_answer_for_another_job_or_target():
    """Red team: RayPool.poll returned the worker's JobResult as it came, and the loop filed it
    under the answer's own key, contribution and target (ledger.record_evidence uses
    result.target): a worker that answered for another job (a bug, other code on that host, or a
    compromised worker) put a PASS on a contribution or an op that was never measured there.
    Whose result it is now comes from the job the validator submitted; a mismatch is a job error."""
    from cacheon_subnet.records import JobResult, QualifyJob, QualifyResult

    job = QualifyJob("c1|norm.rmsnorm|a0|r0|n0", "c1", "norm.rmsnorm", {}, None, start_block=7)  # type: ignore[arg-type]

    def qr(target: str) -> QualifyResult:
        return QualifyResult(target, "PASS", True, 9.0, 9.0, 0.0, "fake-arena", "fake", "forged")

    honest = JobResult(job.key, "c1", "norm.rmsnorm", 7, qr("norm.rmsnorm"), None, "w")
    forged = {
        "another contribution": replace(honest, key="c2|norm.rmsnorm|a0|r0|n0", contribution_id="c2"),
        "another key": replace(honest, key="c1|norm.rmsnorm|a3|r0|n0"),
        "another target": replace(honest, target="norm.fused_add_rmsnorm"),
        "a result for another target": replace(honest, result=qr("norm.fused_add_rmsnorm")),
        "another start block": replace(honest, start_block=10**9),
        "another incumbent": replace(honest, incumbent_id="c0"),
        "not a JobResult": {"key": job.key, "result": "PASS"},
        "a result that is no QualifyResult": replace(honest, result={"verdict": "PASS"}),
    }
    for name, answer in forged.items():
        pool = _ray_pool(lambda ref, a=answer: a)
        pool.submit(job)
        (got,) = pool.poll()
        assert (got.key, got.contribution_id, got.target) == (job.key, "c1", "norm.rmsnorm"), name
        assert got.result is None and "refused" in (got.error or ""), (name, got)
    pool = _ray_pool(lambda ref: honest)
    pool.submit(job)
    (got,) = pool.poll()
    assert got.result is not None and got.result.verdict == "PASS" and got.error is None


def test_no_gpu_serves_two_arenas():
    """Red team: LocalPool checked the device *strings* only, so `--arena-gpus 0+1,1+2` (GPU 1 in
    two TP groups), `0,00` or `0+0` ran two arenas (or one TP group twice) on one GPU at once:
    each engine's memory check and timing met the other's load (NO_DECISION or a noisy FAIL)."""
    import pytest

    @dataclass(frozen=True)
    class Bound(FakeQualifier):
        devices: str | None = None

        def on_devices(self, d: str) -> Bound:
            return replace(self, devices=d)

    for bad in (("0,1", "1,2"), ("0", "00"), ("0,0",), ("1", "2,01")):
        with pytest.raises(ValueError, match="one arena only"):
            LocalPool(Bound(), bad)
    LocalPool(Bound(), ("0,1", "2,3")).close()


class _ManualPool:
    """A pool whose worker answers only for the contributions in `release` (a slow job, or one
    Ray retried after a lost worker); `reads` overrides the vs-stock speed a bundle measures."""

    arena_id, label, head_to_head = "fake-arena", "fake-timing", False

    def __init__(self) -> None:
        self.jobs: dict = {}
        self.release: set[str] = set()
        self.reads: dict[bytes, float] = {}

    def submit(self, job) -> None:
        self.jobs.setdefault(job.key, job)

    def in_flight(self) -> frozenset[str]:
        return frozenset(self.jobs)

    def free_slots(self) -> int:
        return 8

    def poll(self) -> list:
        from cacheon_subnet.validator.dispatch import run_job

        @dataclass(frozen=True)
        class Reads(FakeQualifier):
            def qualify(q, bundle, op, incumbent):
                r = FakeQualifier.qualify(q, bundle, op, incumbent)
                vs = self.reads.get(bundle.files.get("speed.txt", b""))
                if vs is None:
                    return r
                return replace(r, speedup=vs / incumbent.speedup_vs_stock if incumbent else vs, speedup_vs_stock=vs)

        done = [k for k in self.jobs if k.split("|")[0] in self.release]
        return [run_job(Reads(), self.jobs.pop(k), "w") for k in done]

    def close(self) -> None:
        pass


def test_a_job_measured_against_a_crown_settled_again_meanwhile_is_stale(tmp_path):
    """Red team: C was dispatched against crown X (derived ratio: C's 1.20 vs stock / X's 1.10).
    X was then retired and measured again (1.30 vs stock), re-crowned under the same id, and only
    then did C's job come back. Filed at the block it came back, its evidence was `after` X's new
    crowned_block and named X, the holder: settled as 1.0909 over X, it dethroned the faster X and
    was crowned at 1.30 x 1.0909 = 1.4182 vs stock. A pool job is evaluated at its start block."""
    from validator_fakes import make_archive

    from cacheon_subnet.validator import ledger

    t = "norm.rmsnorm"
    chain = make_chain(tmp_path / "chain.db", miners=2)
    with FileServer() as srv:
        ax, dx = make_archive(EXAMPLES / t, tmp_path, "x", {"speed.txt": "1.10"})
        ac, dc = make_archive(EXAMPLES / t, tmp_path, "c", {"speed.txt": "1.20"})
        commit(chain, "m0", dx, srv.add("x.tar.gz", ax))
        chain.advance(2)
        pool = _ManualPool()
        cfg = ValidatorConfig(netuid=NETUID, hotkey=VALIDATOR, state_dir=tmp_path / "state", interval_s=0, targets=(t,))
        v = Validator(cfg, chain, pool, screener=fake_screener())

        def passes() -> None:
            for _ in range(3):
                v.run_once()

        passes()
        x = v.db.contributions(("verified",))[0].id
        pool.release = {x}
        chain.advance(1)
        passes()
        assert ledger.crown_of(v.db, t).speedup_vs_stock == 1.10
        pool.release = set()
        commit(chain, "m1", dc, srv.add("c.tar.gz", ac))
        chain.advance(2)
        passes()
        (key,) = [k for k in pool.in_flight() if not k.startswith(x)]  # C, measured against X at 1.10
        c = key.split("|")[0]
        with v.db.tx() as con:  # what settlement does when a challenger's evidence blames the crown
            ledger._retire(v.db, con, con.execute("SELECT * FROM crowns WHERE target=?", (t,)).fetchone(), "test")
        chain.advance(1)
        passes()
        pool.release, pool.reads = {x}, {b"1.10": 1.30}  # measured again, X reads 1.30 vs stock
        chain.advance(1)
        passes()
        assert (ledger.crown_of(v.db, t).contribution_id, ledger.crown_of(v.db, t).speedup_vs_stock) == (x, 1.30)
        pool.release, pool.reads = {c}, {}  # C's job, dispatched against X at 1.10, comes back now
        chain.advance(1)
        passes()
        crown = ledger.crown_of(v.db, t)
        rows = [(r["outcome"], round(r["speedup"], 4)) for r in ledger.evidence_rows(v.db, c)]
        v.close()
    assert crown.contribution_id == x and crown.speedup_vs_stock == 1.30, (crown, rows)
    assert rows[0] == ("no_decision", 1.0909), rows  # stale: measured against X's old numbers
