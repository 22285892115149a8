"""Processes as /proc shows them: the facts the sandbox (which launches children), the lifecycle
(which kills them at shutdown) and the scratch sweep (which removes what a killed process left)
need, kept below all three so none imports another."""

from __future__ import annotations

import os
from pathlib import Path


def live_members(pgid: int) -> list[int]:
    """PIDs of process group `pgid` that are not yet zombies (read from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            out.append(int(entry))
    return out


def starttime(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (None: no such process): with the pid it
    names one process for good, where a pid alone is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None
