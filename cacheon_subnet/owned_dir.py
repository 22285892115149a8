"""Directories this package may wipe: only those it created and marked.

A tool that "recreates its state dir" must never `rm -rf` a path a user typed by mistake
(`--state-dir ~`): it marks what it creates with a marker file and refuses to wipe anything
non-empty that lacks it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from cacheon_subnet.errors import CacheonError

MARKER = ".cacheon-owned"


class NotOwnedError(CacheonError):
    """Refused to wipe a directory cacheon did not create."""


def mark_owned(path: str | os.PathLike[str]) -> Path:
    """Create path (and parents) if needed and mark it as created by cacheon."""
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    (p / MARKER).write_text("created by cacheon; `cacheon` may wipe and recreate this directory\n")
    return p


def is_owned(path: str | os.PathLike[str]) -> bool:
    p = Path(path)
    return p.is_dir() and not p.is_symlink() and (p / MARKER).is_file()


def wipe_owned(path: str | os.PathLike[str]) -> None:
    """Remove path if cacheon owns it; a missing or empty dir is fine, anything else is refused."""
    p = Path(path)
    if not os.path.lexists(p):
        return
    if p.is_symlink() or not p.is_dir():
        raise NotOwnedError(f"{p}: not a directory cacheon created; refusing to delete it")
    if is_owned(p):
        shutil.rmtree(p)
    elif any(p.iterdir()):
        raise NotOwnedError(
            f"{p}: not empty and not created by cacheon (no {MARKER} marker); refusing to "
            "delete it. Pick another --state-dir or empty it yourself"
        )
    else:
        p.rmdir()
