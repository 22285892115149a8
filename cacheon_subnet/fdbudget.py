"""A long-running process's file-descriptor budget: use the whole hard limit, say when it is low.

Why: systemd and pm2 start services with a soft RLIMIT_NOFILE of 1024 while the hard limit is
usually far higher. A validator whose soft limit is spent cannot open the state DB, a verify
socket pair or a bundle archive, and every pass crashes (`OSError: [Errno 24] Too many open
files`, measured with the old in-process leaderboard). Raising the soft limit to the hard one
costs nothing and keeps a reserve for the work itself.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from typing import Any, Protocol

LOW_NOFILE = 4096  # below this hard limit the operator is told to raise it (LimitNOFILE=, ulimit -Hn)


@dataclass(frozen=True)
class FdBudget:
    before: int  # soft limit found at start
    soft: int  # soft limit now
    hard: int

    @property
    def low(self) -> bool:
        return self.soft < LOW_NOFILE


def _num(v: int) -> int:
    return 1 << 30 if v == resource.RLIM_INFINITY else int(v)


def raise_nofile() -> FdBudget:
    """Set the soft RLIMIT_NOFILE to the hard limit (best effort) and report both."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = soft
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return FdBudget(_num(before), _num(soft), _num(hard))


class EventLog(Protocol):
    """The two structlog methods used here: callers pass their own bound logger (or a test's stub)."""

    def info(self, event: str, **kw: Any) -> Any: ...

    def warning(self, event: str, **kw: Any) -> Any: ...


def log_budget(log: EventLog, event: str = "validator.nofile") -> FdBudget:
    """raise_nofile(), logged: info when the budget is fine, a warning saying how to fix a low one."""
    b = raise_nofile()
    if b.low:
        log.warning(
            event,
            soft_before=b.before,
            soft=b.soft,
            hard=b.hard,
            fix=f"the hard fd limit is below {LOW_NOFILE}: raise it (systemd LimitNOFILE=65536, "
            "`ulimit -Hn 65536` before pm2 starts, or docker --ulimit nofile=65536:65536)",
        )
    else:
        log.info(event, soft_before=b.before, soft=b.soft, hard=b.hard)
    return b
