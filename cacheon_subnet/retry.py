"""The one retry/backoff rule: exponential from `base`, capped at `cap`, jittered to [50 %, 100 %].

Everything that waits before trying again uses this module: the loop's between-pass chain
backoff and per-item retry delays (`backoff_s`, stored in the state DB), and in-place retries of
one call (`call_with_retries`, tenacity underneath) in the chain guard and the miner. One rule,
so the delays an operator reads in the logs follow one formula.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

import tenacity

T = TypeVar("T")


def backoff_s(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Delay before retry number `attempt` (0 = the first retry): min(cap, base * 2**attempt),
    times a uniform jitter in [0.5, 1.0] so many validators do not retry in lock-step."""
    if attempt < 0 or base < 0 or cap < 0:
        raise ValueError(f"backoff_s: attempt, base and cap must be >= 0 (got {attempt}, {base}, {cap})")
    raw = min(cap, base * 2.0 ** min(attempt, 64))
    return raw * (rng or random).uniform(0.5, 1.0)


class _Wait(tenacity.wait.wait_base):
    def __init__(self, base: float, cap: float) -> None:
        self.base, self.cap = base, cap

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        return backoff_s(retry_state.attempt_number - 1, self.base, self.cap)


def call_with_retries(
    fn: Callable[[], T],
    *,
    attempts: int,
    base_s: float,
    cap_s: float = 300.0,
    retry_if: Callable[[BaseException], bool] = lambda exc: True,
    on_error: Callable[[BaseException, int], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call `fn` up to `attempts` times; retry only exceptions `retry_if` accepts (the others, and
    the last failure, are raised as they are). `on_error(exc, attempt)` sees every failure."""
    if attempts < 1:
        raise ValueError(f"call_with_retries: attempts must be >= 1, got {attempts}")
    tries = [0]

    def once() -> T:
        tries[0] += 1
        try:
            return fn()
        except Exception as exc:
            if on_error is not None:
                on_error(exc, tries[0])
            raise

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(attempts),
        wait=_Wait(base_s, cap_s),
        retry=tenacity.retry_if_exception(retry_if),
        reraise=True,
        sleep=sleep,
    )
    return retrying(once)
