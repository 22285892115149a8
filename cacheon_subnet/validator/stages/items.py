"""What every stage does with one contribution: run it under `Items.guard` (any error is that
item's transient error, never the pass's end), back off and retry it a bounded number of times
(`Items.transient`), and read its cached archive (`Archives`).

Why one place: the retry rule is the same for fetch, screen, verify and qualify, and a resource
error (EMFILE, ENOMEM, ENOSPC: cacheon_subnet/resources.py) must end as this validator's
`no_decision`, never as the miner's `failed`, whichever stage met it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cacheon_subnet import lifecycle
from cacheon_subnet.bundle import Bundle
from cacheon_subnet.resources import describe, is_resource_error
from cacheon_subnet.retry import backoff_s
from cacheon_subnet.scoring.settle import Crown
from cacheon_subnet.validator.chainguard import ChainDown
from cacheon_subnet.validator.fetch import load_cached
from cacheon_subnet.validator.stages.passstate import PassState
from cacheon_subnet.validator.stages.ports import Log
from cacheon_subnet.validator.state import Contribution, StateDB
from cacheon_subnet.validator.storable import storable


@dataclass(frozen=True)
class RetryPolicy:
    """Transient failures per item before it gives up, and the backoff between them."""

    max_attempts: int = 4
    base_s: float = 30.0
    max_s: float = 1800.0

    def delay(self, attempts: int) -> float:
        return backoff_s(attempts, self.base_s, self.max_s)


class Items:
    """The retry bookkeeping of one state DB (the loop thread's; no stage writes elsewhere)."""

    def __init__(self, db: StateDB, log: Log, retry: RetryPolicy) -> None:
        self.db, self.log, self.retry = db, log, retry

    @contextmanager
    def guard(self, ps: PassState, c: Contribution, stage: str) -> Iterator[None]:
        """One item of a stage: whatever goes wrong in it (a resource error, a bug) is this
        item's transient error: counted, backed off, retried up to max_attempts, then
        no_decision. Never the miner's fault, never the pass's end."""
        try:
            yield
        except (ChainDown, lifecycle.Interrupted):
            raise
        except Exception as exc:
            if lifecycle.SHUTDOWN.is_set():
                raise lifecycle.Interrupted(f"{stage} of {c.id} stopped by shutdown") from None
            ps.attempted(stage, failed=True)
            if is_resource_error(exc):
                why = f"resource exhausted on this validator: {describe(exc)}"
                self.log.warning(f"{stage}.resource_exhausted", contribution=c.id, error=describe(exc))
            else:
                why = f"{type(exc).__name__}: {exc}"
                self.log.exception(f"{stage}.item_error", contribution=c.id, error=why[:300])
            self.transient(c, stage, why, "no_decision")

    def transient(self, c: Contribution, stage: str, why: str, give_up: str) -> None:
        """Count a transient failure; after max_attempts end in `give_up` (failed/no_decision)."""
        why = storable(why)
        if c.attempts + 1 >= self.retry.max_attempts:
            self.db.transition(c.id, give_up, f"{stage}: {why} (gave up after {c.attempts + 1} attempts)")
            self.log.warning(f"{stage}.gave_up", contribution=c.id, state=give_up, reason=why[:300])
        else:
            delay = self.retry.delay(c.attempts)
            self.db.retry_later(c.id, f"{stage}: {why} (attempt {c.attempts + 1}, retry in {delay:.0f} s)", delay)
            self.log.info(f"{stage}.retry", contribution=c.id, reason=why[:300], retry_in_s=round(delay, 1))


class Archives:
    """The bundle cache (bundles/<digest>.tar.gz, filled by the fetch stage), read by the
    screen, verify and qualify stages."""

    def __init__(self, db: StateDB, cache_dir: Path, log: Log) -> None:
        self.db, self.cache_dir, self.log = db, cache_dir, log

    def bundle(self, c: Contribution) -> Bundle | None:
        """c's archive; None (and c queued to be fetched again) when the cache lost it."""
        bundle = load_cached(self.cache_dir, c.digest or "")
        if bundle is None:
            self.db.transition(c.id, "queued", "cached archive missing; fetching again")
            self.log.warning("cache.missing", contribution=c.id)
        return bundle

    def incumbent(self, crown: Crown) -> Bundle | None:
        """The crowned contribution's archive from the cache (the arena runs it in the B windows);
        None when it is gone, and the qualifier then falls back to a derived ratio."""
        digest = self.db.contribution(crown.contribution_id).digest
        return load_cached(self.cache_dir, digest or "")
