"""Progress bars (tqdm) for the long steps: verify trials, CPU timing, arena windows, bench cases.

Always on stderr, so stdout stays for results and JSON. Shown only when stderr is a terminal,
never with `cacheon --quiet` (or CACHEON_PROGRESS=0); CACHEON_PROGRESS=1 forces them (tests, logs).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Iterable, TypeVar

T = TypeVar("T")
ENV = "CACHEON_PROGRESS"
_quiet = False


def set_quiet(quiet: bool) -> None:
    """`--quiet`: no bars in this process (and, through the environment, in its children)."""
    global _quiet
    _quiet = bool(quiet)
    if quiet:
        os.environ[ENV] = "0"


def enabled() -> bool:
    forced = os.environ.get(ENV)
    if _quiet or forced == "0":
        return False
    if forced == "1":
        return True
    return sys.stderr.isatty()


def bar(iterable: Iterable[T] | None = None, *, desc: str, total: int | None = None, unit: str = "it",
        leave: bool = False) -> Any:
    """A tqdm bar on stderr (a no-op object when disabled); use as an iterable or call .update()."""
    from tqdm import tqdm

    return tqdm(iterable, desc=desc, total=total, unit=unit, leave=leave, file=sys.stderr,
                disable=not enabled(), dynamic_ncols=True, mininterval=0.5)


def note(msg: str) -> None:
    """One plain line on stderr for a step that may take long: bars show only on a terminal, and a
    redirected run (a GPU box's log) must still say what it is doing. Off with --quiet and
    CACHEON_PROGRESS=0."""
    if _quiet or os.environ.get(ENV) == "0":
        return
    print(f"cacheon: {msg}", file=sys.stderr, flush=True)
