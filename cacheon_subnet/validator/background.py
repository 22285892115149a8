"""Work the validator loop hands to background threads, so that no stage waits on another
(issue 30 item 3): the sandboxed CPU screen of queued contributions runs while a GPU arena
judges another one, and the loop thread stays free to collect and dispatch.

Why threads and not processes: every job here already is a child process (the verify worker
behind the sandbox wall, the arena's engines); a thread only waits on it. The loop thread alone
writes the state DB: workers hand back typed outcomes and never touch it.

Why CPU sets: on the GPU host an arena's timed windows depend on its scheduler process getting a
core when it needs one; a CPU screen (interpreted Triton, torch threads) would take every core it
sees. `split_cpus` gives the screens a slice of the host's cores and the arena the rest; each
worker thread pins itself (sched_setaffinity on a thread binds that thread), and the children it
starts inherit the set. A screen on the CPU never reaches the GPU: its sandbox view has no
/dev/nvidia* (sandbox/fsview.py), so it cannot put work beside a timed window.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

from cacheon_subnet.bundle import Bundle
from cacheon_subnet.resources import describe, is_resource_error
from cacheon_subnet.validator.screen import ScreenResult


@dataclass(frozen=True)
class CpuSplit:
    """Which cores the arena's thread and the screening threads (and their children) may use;
    None: leave the affinity alone (too few cores to split, or no overlap)."""

    arena: frozenset[int] | None = None
    screen: frozenset[int] | None = None


def split_cpus(share: float, available: frozenset[int] | None = None) -> CpuSplit:
    """The highest `share` of the available cores to screening (at least one), the rest to the
    arena. Fewer than 4 cores: no split (one core for an arena's scheduler is not enough)."""
    cpus = sorted(available if available is not None else os.sched_getaffinity(0))
    if share <= 0 or len(cpus) < 4:
        return CpuSplit()
    n = min(len(cpus) - 2, max(1, int(len(cpus) * share)))
    return CpuSplit(arena=frozenset(cpus[:-n]), screen=frozenset(cpus[-n:]))


def pin_this_thread(cpus: frozenset[int] | None) -> None:
    """Bind the calling thread (pid 0 = this thread on Linux) and what it will start. A set the
    host no longer allows (a cpuset changed under us) leaves the affinity as it was: pinning
    protects timing quality, and a thread pool whose initializer raised would take no work."""
    if cpus:
        try:
            os.sched_setaffinity(0, cpus)
        except OSError:
            pass


@contextmanager
def pinned(cpus: frozenset[int] | None) -> Iterator[None]:
    """Run the block, and the children it starts, on `cpus`; then give the calling thread its own
    set back. For the loop thread's CPU work beside a timed window (the static scan's child,
    unpacking and digesting archives): unpinned, it ran on the arena's cores (red team 2026-12-04)."""
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)
    pin_this_thread(cpus)
    try:
        yield
    finally:
        try:
            os.sched_setaffinity(0, before)
        except OSError:
            pass


@dataclass(frozen=True)
class ScreenJob:
    """One screening attempt: `key` is contribution|attempt, so a late outcome of an attempt the
    loop already gave up on is told apart from the current one."""

    key: str
    contribution_id: str
    bundle: Bundle


@dataclass(frozen=True)
class ScreenOutcome:
    """What came back: a verdict (`result`) or why there is none (`error`, never the miner's
    fault: infrastructure, the validator's resources); `resource` marks EMFILE/ENOMEM/ENOSPC."""

    key: str
    contribution_id: str
    result: ScreenResult | None
    error: str | None = None
    resource: bool = False
    wall_s: float = 0.0


Screener = Callable[[Bundle], ScreenResult]
J = TypeVar("J")
R = TypeVar("R")


class JobThreads(Generic[J, R]):
    """Keyed jobs run by `workers` threads of this process pinned to `cpus`: one job per key at a
    time, `wake` set whenever one finishes (so the loop collects it at once, not at its next
    interval), `poll` never blocks. The screens and the validator's own arenas both use it."""

    def __init__(
        self,
        run: Callable[[J], R],
        workers: int,
        name: str,
        cpus: frozenset[int] | None = None,
        wake: threading.Event | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"{name}: workers must be >= 1, got {workers}")
        self.workers, self.wake, self._run = workers, wake or threading.Event(), run
        self._pool = ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix=name, initializer=pin_this_thread, initargs=(cpus,)
        )
        self._futures: dict[str, Future[R]] = {}
        self._lock = threading.Lock()

    def _run_and_wake(self, job: J) -> R:
        try:
            return self._run(job)
        finally:
            self.wake.set()

    def submit(self, key: str, job: J) -> None:
        with self._lock:
            if key not in self._futures:  # already running: one attempt, one job
                self._futures[key] = self._pool.submit(self._run_and_wake, job)

    def poll(self) -> list[R]:
        with self._lock:
            done = [k for k, f in self._futures.items() if f.done()]
            return [self._futures.pop(k).result() for k in done]

    def in_flight(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._futures)

    def free_slots(self) -> int:
        with self._lock:
            return max(0, self.workers - len(self._futures))

    def close(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=True)


class ScreenPool:
    """`workers` screens at once (validator/stages/verify.py), one per contribution at a time."""

    def __init__(
        self, screener: Screener, workers: int = 1, cpus: frozenset[int] | None = None, wake: threading.Event | None = None
    ) -> None:
        self.screener = screener
        self.workers = workers
        self._jobs: JobThreads[ScreenJob, ScreenOutcome] = JobThreads(self._run, workers, "screen", cpus, wake)
        self.wake = self._jobs.wake

    def _run(self, job: ScreenJob) -> ScreenOutcome:
        t0 = time.monotonic()
        try:
            result = self.screener(job.bundle)
            if not isinstance(result, ScreenResult):
                raise TypeError(f"screener returned {type(result).__name__}, not a ScreenResult")
            return ScreenOutcome(job.key, job.contribution_id, result, wall_s=time.monotonic() - t0)
        except Exception as exc:  # noqa: BLE001 - typed back to the loop, which decides
            resource = is_resource_error(exc)
            why = f"resource exhausted: {describe(exc)}" if resource else f"{type(exc).__name__}: {exc}"
            return ScreenOutcome(job.key, job.contribution_id, None, why[:2000], resource, time.monotonic() - t0)

    def submit(self, job: ScreenJob) -> None:
        self._jobs.submit(job.contribution_id, job)

    def poll(self) -> list[ScreenOutcome]:
        return self._jobs.poll()

    def in_flight(self) -> frozenset[str]:
        return self._jobs.in_flight()

    def free_slots(self) -> int:
        return self._jobs.free_slots()

    def close(self, wait: bool = True) -> None:
        self._jobs.close(wait)
