"""Every backend call the loop makes goes through here: an exception becomes a logged ChainDown.

Why: the chain is the one dependency we cannot fix from here (RPC drops, node lag, SDK bugs).
Whatever the backend raises is written to the state DB's chain error log and turned into one
type the loop handles by backing off; it never escapes as a crash. RateLimited from
set_weights is the exception: it is the chain's normal "not yet", handled by the publisher.
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable

from cacheon_subnet.chain.backend import ChainBackend, RateLimited
from cacheon_subnet.errors import CacheonError
from cacheon_subnet.validator.state import StateDB


class ChainDown(CacheonError):
    """A backend call failed; `op` names the call, `cause` is what the backend raised."""

    def __init__(self, op: str, cause: BaseException) -> None:
        self.op = op
        self.cause = cause
        super().__init__(f"chain call {op} failed: {type(cause).__name__}: {cause}")


class GuardedChain:
    """Wraps a ChainBackend; same methods. A failing call is logged to `db` and retried in place
    (`retries` more times, exponential backoff with jitter from `retry_s`), then raised as
    ChainDown so the loop backs off as a whole."""

    def __init__(self, backend: ChainBackend, db: StateDB, retries: int = 2, retry_s: float = 0.5) -> None:
        self.backend = backend
        self.db = db
        self.retries = retries
        self.retry_s = retry_s

    def __getattr__(self, name: str) -> Callable[..., Any]:
        fn = getattr(self.backend, name)
        if not callable(fn):
            return fn

        def call(*args: Any, **kwargs: Any) -> Any:
            for attempt in range(self.retries + 1):
                try:
                    return fn(*args, **kwargs)
                except RateLimited:
                    raise
                except Exception as exc:  # noqa: BLE001 - any backend failure is a chain failure
                    self.db.log_chain_error(name, exc)
                    if attempt == self.retries:
                        raise ChainDown(name, exc) from exc
                    time.sleep(self.retry_s * 2 ** attempt * random.uniform(0.5, 1.0))
            raise AssertionError("unreachable")

        return call
