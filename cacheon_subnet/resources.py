"""Which failures mean "this host ran out of something", never "this input is bad".

Why it matters: a validator under a connection flood, a full disk or memory pressure sees
EMFILE, ENOSPC or ENOMEM in whatever it does next. Read as a property of the input (a corrupt
archive, a failed verify), such an error fails a miner's honest bundle for the validator's own
trouble; left to propagate, it crashes every later pass (issue 30: 9 passes in a row under an fd
flood). Code that turns OSError into a verdict asks `is_resource_error` first and re-raises those,
and the validator loop counts them as a per-item transient error with backoff.
"""

from __future__ import annotations

import errno

# EAGAIN: fork/clone under RLIMIT_NPROC; ENFILE: the system-wide table; EDQUOT: a disk quota.
RESOURCE_ERRNOS = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOSPC, errno.EDQUOT, errno.EAGAIN, errno.ENOBUFS}
)


def is_resource_error(exc: BaseException) -> bool:
    """True for MemoryError and an OSError (or one it was raised from) with a resource errno."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, MemoryError):
            return True
        if isinstance(cur, OSError) and cur.errno in RESOURCE_ERRNOS:
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def describe(exc: BaseException) -> str:
    """A short operator-facing name: 'EMFILE (Too many open files)', 'MemoryError'."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"{errno.errorcode.get(exc.errno, str(exc.errno))} ({exc.strerror})"
    return type(exc).__name__
