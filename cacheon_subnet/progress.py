"""Progress bars (tqdm) for the long steps: verify trials, CPU timing, arena windows, bench cases.

Always on stderr, so stdout stays for results and JSON. Shown only when stderr is a terminal,
never with `cacheon --quiet` (or CACHEON_PROGRESS=0); CACHEON_PROGRESS=1 forces them (tests, logs).
`note` lines (one per phase of a long command) follow the quiet switch alone: a pipe or a log
file shows them too, where a bar would only be noise.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any, TypeVar

from cacheon_subnet.env import PROGRESS

T = TypeVar("T")
ENV = PROGRESS.name
_quiet = False


def set_quiet(quiet: bool) -> None:
    """`--quiet`: no bars in this process (and, through the environment, in its children)."""
    global _quiet
    _quiet = bool(quiet)
    if quiet:
        os.environ[ENV] = "0"


def quiet() -> bool:
    return _quiet or PROGRESS.get() == "0"


def enabled() -> bool:
    if quiet():
        return False
    if PROGRESS.get() == "1":
        return True
    return sys.stderr.isatty()


def bar(
    iterable: Iterable[T] | None = None, *, desc: str, total: int | None = None, unit: str = "it", leave: bool = False
) -> Any:
    """A tqdm bar on stderr (a no-op object when disabled); use as an iterable or call .update()."""
    from tqdm import tqdm

    return tqdm(
        iterable,
        desc=desc,
        total=total,
        unit=unit,
        leave=leave,
        file=sys.stderr,
        disable=not enabled(),
        dynamic_ncols=True,
        mininterval=0.5,
    )


def note(text: str) -> None:
    """One line on stderr saying what a long step is doing now (nothing when quiet); written
    through tqdm, so a bar being drawn is not torn."""
    if quiet():
        return
    from tqdm import tqdm

    tqdm.write(text, file=sys.stderr)
    sys.stderr.flush()
