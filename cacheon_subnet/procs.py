"""Processes as /proc shows them: the facts the sandbox (which launches children), the lifecycle
(which kills them at shutdown) and the scratch sweep (which removes what a killed process left)
need, kept below all three so none imports another."""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn


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


def exit_code(code: object) -> int:
    """The status `sys.exit(code)` would give: None is 0, an int itself, anything else is printed
    to stderr and is 1."""
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code & 0xFF
    if isinstance(code, bool):
        return int(code)
    print(code, file=sys.stderr)
    return 1


def exit_now(code: object, *, wind_down: bool = True) -> NoReturn:
    """End the process as `sys.exit(code)` would, less the interpreter's teardown. Why: freeing
    every module after `import torch` costs ~0.3 s of CPU (measured on the 2-core box: 1.28 s
    against 0.96 s for import and exit), paid by every verify worker, scan child, engine child and
    CLI run. `wind_down` first joins non-daemon threads and runs the atexit handlers (logging's
    flush, the resident engine pools' close), as Python's own exit does; a sandboxed child that
    hosts contribution code passes False: nothing it registered runs or delays its exit."""
    status = exit_code(code)
    if wind_down:
        main = threading.main_thread()
        for t in threading.enumerate():
            if t is not main and not t.daemon:
                t.join()
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(status)


def run_main(main: Callable[[], object], *, wind_down: bool = True) -> NoReturn:
    """`sys.exit(main())` through exit_now; a SystemExit raised inside main (argparse's usage
    error) ends the same way. Any other exception is left to Python (traceback, status 1)."""
    try:
        code = main()
    except SystemExit as e:
        code = e.code
    exit_now(code, wind_down=wind_down)
