"""What the stages need of their collaborators, as Protocols (the concrete ones are the guarded
chain, the screen and arena pools, the metrics, structlog's logger).

Why Protocols: a stage names the few calls it makes, so a test hands it a fake that has just
those, and mypy checks the real ones fit. The runtime-checkable ones are read once, where the
Validator is composed (wiring.py): what was handed in (a qualifier or a pool of arenas, with or
without a wake event, head-to-head or not) is decided there and never probed again."""

from __future__ import annotations

import threading
from typing import Protocol, runtime_checkable

from cacheon_subnet.bundle import Bundle, OpEntry
from cacheon_subnet.chain.backend import Commitment, Metagraph
from cacheon_subnet.records import QualifyResult
from cacheon_subnet.scoring.settle import Crown
from cacheon_subnet.validator.background import ScreenJob, ScreenOutcome
from cacheon_subnet.validator.dispatch import JobResult, QualifyJob
from cacheon_subnet.validator.stages.passstate import PassState


class Log(Protocol):
    """structlog's bound logger, as far as the stages use it (event name, then fields)."""

    def info(self, event: str, *args: object, **kw: object) -> object: ...
    def warning(self, event: str, *args: object, **kw: object) -> object: ...
    def error(self, event: str, *args: object, **kw: object) -> object: ...
    def exception(self, event: str, *args: object, **kw: object) -> object: ...


class BlockClock(Protocol):
    """The chain's block height: qualify and settle stamp evidence with it."""

    def current_block(self) -> int: ...


class ChainReader(BlockClock, Protocol):
    """What the sync stage reads each pass (validator/chainguard.GuardedChain: a failing call
    raises ChainDown)."""

    def metagraph(self, netuid: int) -> Metagraph: ...
    def revealed_commitments(self, netuid: int) -> list[Commitment]: ...


class VerdictCounter(Protocol):
    """validator/metrics.Metrics: one count per recorded verdict."""

    def verdict(self, verdict: str) -> None: ...


class InFlight(Protocol):
    def in_flight(self) -> frozenset[str]: ...


class ScreenJobs(InFlight, Protocol):
    """background.ScreenPool: screens beside the arena, collected by the loop thread."""

    def submit(self, job: ScreenJob) -> None: ...
    def poll(self) -> list[ScreenOutcome]: ...
    def free_slots(self) -> int: ...


@runtime_checkable
class ArenaPool(InFlight, Protocol):
    """A pool of arenas (dispatch.BackgroundArena, LocalPool, ray_pool.RayPool): jobs in, typed
    results out, never blocking. Runtime-checkable: wiring tells a pool from a plain qualifier."""

    @property
    def arena_id(self) -> str: ...
    @property
    def label(self) -> str: ...
    def submit(self, job: QualifyJob) -> None: ...
    def poll(self) -> list[JobResult]: ...
    def free_slots(self) -> int: ...


@runtime_checkable
class HeadToHead(Protocol):
    """A qualifier or pool that can run the incumbent's own bundle in the B windows (when
    `head_to_head` is true); the others derive the ratio from the crown's numbers."""

    head_to_head: bool


@runtime_checkable
class PairedQualifier(Protocol):
    """A head-to-head qualifier's call: the incumbent's bundle rides along."""

    head_to_head: bool

    def qualify(
        self, bundle: Bundle, op: OpEntry, incumbent: Crown | None, incumbent_bundle: Bundle | None = None
    ) -> QualifyResult: ...


@runtime_checkable
class Wakes(Protocol):
    """A pool that sets `wake` when a job ends (the loop's own pools, LocalPool); one without
    (Ray) is polled every busy_poll_s while it has work."""

    wake: threading.Event


class Stage(Protocol):
    """One step of a pass: `name` for the log and the pass's problems; `run` does this pass's
    share of the work and notes it in `ps`. ChainDown, Interrupted and resource errors outside
    any item are the Validator's to handle (loop.run_once)."""

    name: str

    def run(self, ps: PassState) -> None: ...
