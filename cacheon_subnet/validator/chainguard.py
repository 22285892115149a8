"""Every backend call the loop makes goes through here: an exception becomes a logged ChainDown.

Why: the chain is the one dependency we cannot fix from here (RPC drops, node lag, SDK bugs).
Whatever the backend raises is written to the state DB's chain error log, classified
(chain.backend.classify) and turned into one type the loop handles; it never escapes as a crash.

* transient (unreachable, timeouts, unknown): a read is retried in place (cacheon_subnet.retry),
  then the pass backs off as a whole.
* definitive (no validator permit, not registered, version key...): never retried; ChainDown
  says so (`definitive`), and the publisher stops sending until the hold expires.
* writes (set_weights, commit) are never retried in place: a call that raised may still have
  landed, so the caller reads the chain back before it sends again (publish.py `_resolve`).
* RateLimited from set_weights passes through: it is the chain's normal "not yet".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cacheon_subnet.chain.backend import ChainBackend, RateLimited, classify
from cacheon_subnet.errors import CacheonError
from cacheon_subnet.retry import call_with_retries
from cacheon_subnet.validator.state import StateDB

WRITES = frozenset({"set_weights", "commit"})


class ChainDown(CacheonError):
    """A backend call failed; `op` names the call, `cause` is what the backend raised, `kind`
    is "transient" or "definitive"."""

    def __init__(self, op: str, cause: BaseException) -> None:
        self.op = op
        self.cause = cause
        self.kind = classify(cause)
        super().__init__(f"chain call {op} failed ({self.kind}): {type(cause).__name__}: {cause}")

    @property
    def definitive(self) -> bool:
        return self.kind == "definitive"


class GuardedChain:
    """Wraps a ChainBackend; same methods. A failing call is logged to `db` (and `on_error`),
    transient reads are retried in place (`retries` more times from `retry_s`), then ChainDown."""

    def __init__(
        self,
        backend: ChainBackend,
        db: StateDB,
        retries: int = 2,
        retry_s: float = 0.5,
        on_error: Callable[[str, BaseException, str], None] | None = None,
    ) -> None:
        self.backend = backend
        self.db = db
        self.retries = retries
        self.retry_s = retry_s
        self.on_error = on_error

    def __getattr__(self, name: str) -> Callable[..., Any]:
        fn = getattr(self.backend, name)
        if not callable(fn):
            return fn
        attempts = 1 if name in WRITES else self.retries + 1

        def logged(exc: BaseException, attempt: int) -> None:
            if isinstance(exc, RateLimited):
                return
            self.db.log_chain_error(name, exc)
            if self.on_error is not None:
                self.on_error(name, exc, classify(exc))

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return call_with_retries(
                    lambda: fn(*args, **kwargs),
                    attempts=attempts,
                    base_s=self.retry_s,
                    retry_if=lambda exc: classify(exc) == "transient",
                    on_error=logged,
                )
            except RateLimited:
                raise
            except Exception as exc:  # noqa: BLE001 - any backend failure is a chain failure
                raise ChainDown(name, exc) from exc

        return call
