"""One pass's record: what each stage moved, tried and failed, and what the pass as a whole did.

Why a dataclass per pass: the stages note into it as they go and the Validator reads it once,
at the end, into the `PassSummary` that `--once` prints and `last_pass_*` stores. A new one is
made for every pass, so nothing of one pass leaks into the next."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

WEIGHTS_PROBLEMS = ("failed", "refused", "blocked")  # publish outcomes that fail the pass


@dataclass(frozen=True)
class PassSummary:
    block: int | None = None
    intake: int = 0
    moved: dict[str, int] = field(default_factory=dict)  # stage -> items advanced
    settled: tuple[str, ...] = ()
    crowns_changed: tuple[str, ...] = ()
    weights: str | None = None
    chain_error: str | None = None
    active: int = 0  # contributions not yet terminal
    unsettled: int = 0  # targets with unsettled evidence
    next_delay_s: float = 0.0
    failed: dict[str, int] = field(default_factory=dict)  # stage -> items that ended in an error this pass
    problems: tuple[str, ...] = ()  # why this pass counts as failed (empty: it did its job)
    duration_s: float = 0.0
    in_flight: int = 0  # screens and arena jobs still running in the background

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def idle(self) -> bool:
        """No work left that the loop could do without new commitments."""
        return self.active == 0 and self.unsettled == 0 and self.chain_error is None


@dataclass
class PassState:
    """Mutable on purpose: the stages of one pass add to it; `drain` says whether this pass
    waits for the background work it started (run_once) or not (run_forever)."""

    drain: bool = True
    started: float = field(default_factory=time.monotonic)
    block: int | None = None
    intake: int = 0
    moved: dict[str, int] = field(default_factory=dict)
    tried: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    settled: list[str] = field(default_factory=list)
    crowns: list[str] = field(default_factory=list)
    weights: str | None = None
    weights_detail: str = ""
    exhausted: list[str] = field(default_factory=list)  # stages a resource error ended, and why

    def advanced(self, stage: str) -> None:
        """One item moved on to `stage` (fetched, screened, verified, qualified)."""
        self.moved[stage] = self.moved.get(stage, 0) + 1

    def attempted(self, stage: str, failed: bool = False) -> None:
        """One item of `stage` was tried; `failed`: it ended in an error (not a FAIL verdict)."""
        self.tried[stage] = self.tried.get(stage, 0) + 1
        if failed:
            self.failed[stage] = self.failed.get(stage, 0) + 1

    def problems(self, chain_error: str | None) -> tuple[str, ...]:
        """A pass failed when the chain failed, weights were refused or failed read-back, or
        every item a stage tried ended in an error (a verify/qualify FAIL verdict is a decision,
        not an error; a fetch that fails is one, whoever's fault it is)."""
        out: list[str] = []
        if chain_error is not None:
            out.append(f"chain: {chain_error}"[:300])
        if self.weights in WEIGHTS_PROBLEMS:
            out.append(f"weights {self.weights}: {self.weights_detail}"[:300])
        out += self.exhausted
        for stage, n in sorted(self.failed.items()):
            if n and n >= self.tried.get(stage, 0):
                out.append(f"{stage}: all {n} items tried this pass ended in an error")
        return tuple(out)

    def summary(
        self, chain_error: str | None, *, active: int, unsettled: int, next_delay_s: float, in_flight: int
    ) -> PassSummary:
        return PassSummary(
            block=self.block,
            intake=self.intake,
            moved=dict(self.moved),
            settled=tuple(self.settled),
            crowns_changed=tuple(self.crowns),
            weights=self.weights,
            chain_error=chain_error,
            active=active,
            unsettled=unsettled,
            next_delay_s=next_delay_s,
            failed=dict(self.failed),
            problems=self.problems(chain_error),
            duration_s=round(time.monotonic() - self.started, 3),
            in_flight=in_flight,
        )
