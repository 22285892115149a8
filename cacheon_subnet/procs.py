"""Process groups as /proc shows them: the one fact both the sandbox (which launches children) and
the lifecycle (which kills them at shutdown) need, kept below both so neither imports the other."""

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
