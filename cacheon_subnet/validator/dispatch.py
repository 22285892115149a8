"""Qualifications on many arenas at once: one arena per GPU of this host (LocalPool), or GPU
workers on other hosts through Ray (validator/ray_pool.py). The state DB keeps one owner.

Why this shape: a verdict takes minutes of GPU time and a validator with several GPUs or hosts
would otherwise use one. Workers only *compute*: a job carries what the arena needs (the sealed
bundle's files, the op, the incumbent's crown and files) and nothing of the validator's (no DB
handle, no wallet, no chain keys); a worker returns a typed `JobResult`. Only the validator
thread writes results into the state DB (stages/dispatch.py), each under the job's
idempotency key — one key per qualification attempt (contribution, target, attempt, round) —
so a job retried after a lost worker, or delivered twice, is counted once.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import replace
from typing import Any, Protocol

from cacheon_subnet.bundle import bundle_from_files
from cacheon_subnet.records import JobResult, QualifyJob, QualifyResult
from cacheon_subnet.records import job_key as job_key  # re-exported: the stages import it from here
from cacheon_subnet.validator.background import JobThreads


def finished_jobs(db: Any, cid: str, target: str) -> int:
    """Jobs of (cid, target) with a recorded outcome in the state DB (one `job:` row each)."""
    prefix = f"job:{cid}|{target}|"
    row = db.con.execute("SELECT COUNT(*) FROM kv WHERE substr(key, 1, ?)=?", (len(prefix), prefix)).fetchone()
    return int(row[0])


def run_job(qualifier: Any, job: QualifyJob, worker: str = "") -> JobResult:
    """What a worker does with a job: rebuild the bundle, run the qualifier, type the answer.
    Arena trouble becomes `error` (the validator retries or gives up as for a local qualify)."""
    t0 = time.monotonic()
    inc_id = job.incumbent.contribution_id if job.incumbent else None
    try:
        bundle = bundle_from_files(dict(job.files), source=f"<job {job.key}>")
        if job.incumbent is not None and getattr(qualifier, "head_to_head", False):
            inc = bundle_from_files(dict(job.incumbent_files), source="<incumbent>") if job.incumbent_files else None
            result = qualifier.qualify(bundle, job.op, job.incumbent, incumbent_bundle=inc)
        else:
            result = qualifier.qualify(bundle, job.op, job.incumbent)
        if not isinstance(result, QualifyResult):
            raise TypeError(f"qualifier returned {type(result).__name__}, not a QualifyResult")
        if result.target != job.target:
            result = replace(result, target=job.target)
        return JobResult(
            job.key, job.contribution_id, job.target, job.start_block, result, None, worker, time.monotonic() - t0, inc_id
        )
    except Exception as exc:  # noqa: BLE001 - typed back to the validator, which decides
        return JobResult(
            job.key,
            job.contribution_id,
            job.target,
            job.start_block,
            None,
            f"{type(exc).__name__}: {exc}"[:2000],
            worker,
            time.monotonic() - t0,
            inc_id,
        )


def bind_result(job: QualifyJob, res: object, worker: str = "") -> JobResult:
    """A worker's answer, checked against the job this validator submitted (validator side).
    Everything that says *whose* result it is comes from the job, never from the answer: a worker
    (another host, other code) that answers with something that is not a JobResult, for another
    key, contribution, target, start block or incumbent, or with a QualifyResult for another
    target, gets a job error (arena trouble: retried, then NO_DECISION), never a verdict.
    ledger.record_evidence files the row under result.target, so that one decides where it counts."""
    inc_id = job.incumbent.contribution_id if job.incumbent else None

    def refused(why: str) -> JobResult:
        return JobResult(
            job.key,
            job.contribution_id,
            job.target,
            job.start_block,
            None,
            f"worker answer refused: {why}"[:2000],
            worker,
            0.0,
            inc_id,
        )

    if not isinstance(res, JobResult):
        return refused(f"a {type(res).__name__}, not a JobResult")
    mine = (job.key, job.contribution_id, job.target, job.start_block, inc_id)
    theirs = (res.key, res.contribution_id, res.target, res.start_block, res.incumbent_id)
    if theirs != mine:
        return refused(f"it answers for {theirs!r}, the job was {mine!r}")
    if res.result is not None and not isinstance(res.result, QualifyResult):
        return refused(f"result is a {type(res.result).__name__}, not a QualifyResult")
    if res.result is not None and res.result.target != job.target:
        return refused(f"result measured target {res.result.target!r}, the job was {job.target!r}")
    if res.result is None and not isinstance(res.error, str):
        return refused("no result and no error")
    return res


class Dispatcher(Protocol):
    """What the validator loop needs of a pool of arenas."""

    arena_id: str
    label: str

    def submit(self, job: QualifyJob) -> None: ...
    def poll(self) -> list[JobResult]: ...  # finished since the last poll (never blocks)
    def in_flight(self) -> frozenset[str]: ...  # keys submitted and not yet returned by poll
    def free_slots(self) -> int: ...
    def close(self) -> None: ...


class _ThreadedArenas:
    """Arenas run by worker threads of this process (background.JobThreads: the engines are child
    processes, the threads only wait on them; `wake` set whenever one finishes)."""

    arena_id: str
    label: str
    head_to_head: bool

    def __init__(self, workers: int, cpus: frozenset[int] | None, wake: threading.Event | None) -> None:
        self._jobs: JobThreads[QualifyJob, JobResult] = JobThreads(self._run, workers, "arena-gpu", cpus, wake)
        self.wake = self._jobs.wake  # and its engines run on `cpus`

    def _run(self, job: QualifyJob) -> JobResult:
        raise NotImplementedError

    def submit(self, job: QualifyJob) -> None:
        self._jobs.submit(job.key, job)

    def poll(self) -> list[JobResult]:
        return self._jobs.poll()

    def in_flight(self) -> frozenset[str]:
        return self._jobs.in_flight()

    def free_slots(self) -> int:
        return self._jobs.free_slots()

    def close(self) -> None:
        self._jobs.close(wait=True)


class BackgroundArena(_ThreadedArenas):
    """The validator's one arena (no --arena-gpus / --arena-workers) in a background thread, so
    the loop keeps fetching and screening the queue while it judges (issue 30 item 3)."""

    def __init__(self, qualifier: Any, cpus: frozenset[int] | None = None, wake: threading.Event | None = None) -> None:
        super().__init__(1, cpus, wake)
        self.qualifier = qualifier
        self.arena_id, self.label = qualifier.arena_id, qualifier.label
        self.head_to_head = getattr(qualifier, "head_to_head", False)

    def _run(self, job: QualifyJob) -> JobResult:
        return run_job(self.qualifier, job, worker="arena")


class LocalPool(_ThreadedArenas):
    """One arena per GPU of this host: a worker thread per device, each running its qualifier
    bound to that device (`qualifier.on_devices(d)`: every engine of it gets CUDA_VISIBLE_DEVICES=d)."""

    def __init__(self, qualifier: Any, devices: tuple[str, ...], wake: threading.Event | None = None) -> None:
        if not devices or len(set(devices)) != len(devices):
            raise ValueError(f"LocalPool: devices must be distinct and non-empty, got {devices}")
        gpus = [g.strip() for d in devices for g in d.split(",")]
        if not all(g.isdigit() for g in gpus) or len({int(g) for g in gpus}) != len(gpus):
            # "0+1,1+2" or "0,00" passed the string check: two arenas on one GPU at once (red team)
            raise ValueError(
                f"LocalPool: every GPU may serve one arena only, got {devices} "
                f"(GPU indices {sorted(int(g) for g in gpus if g.isdigit())})"
            )
        if not hasattr(qualifier, "on_devices"):
            raise ValueError(f"{type(qualifier).__name__} cannot be bound to a GPU (no on_devices)")
        super().__init__(len(devices), None, wake)
        self.arena_id, self.label = qualifier.arena_id, qualifier.label
        self.head_to_head = getattr(qualifier, "head_to_head", False)
        self._bound = {d: qualifier.on_devices(d) for d in devices}
        self._free: queue.Queue[str] = queue.Queue()
        for d in devices:
            self._free.put(d)

    def _run(self, job: QualifyJob) -> JobResult:
        d = self._free.get()
        try:
            return run_job(self._bound[d], job, worker=f"gpu {d}")
        finally:
            self._free.put(d)
