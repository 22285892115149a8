"""Process lifecycle of the validator: shutdown requests and the sandboxed children that hold the GPU.

Why: a pm2 restart sends SIGINT, waits its kill timeout, then SIGKILLs; a pass may be minutes
into an arena verdict whose engines run in their own sessions. So
* `request_shutdown()` (the signal handler) sets SHUTDOWN and kills every live sandboxed child's
  process group (TERM, a grace, KILL) from a helper thread: whatever waits on one returns;
  the loop sees SHUTDOWN and records no verdict from a run it interrupted (it is retried);
* every child `sandbox.launch` starts is recorded in a lease file under the state dir while it
  runs; after a crash (kill -9, OOM) the next start reaps what is left of them (every process
  whose environment names a recorded child's scratch dir: its group and its pid namespace)
  before it uses the GPU.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from cacheon_subnet.env import SANDBOX_SCRATCH
from cacheon_subnet.errors import CacheonError
from cacheon_subnet.procs import live_members, starttime

SHUTDOWN = threading.Event()
SHUTDOWN_GRACE_S = 3.0  # TERM -> KILL for children on shutdown (pm2's kill timeout is 30 s by default)
_live: dict[int, str] = {}  # pid (= pgid) -> scratch dir of each running sandboxed child
_lock = threading.Lock()
_lease_dir: Path | None = None


class Interrupted(CacheonError):
    """Work stopped by a shutdown request: no verdict; the item is retried after restart."""


def set_lease_dir(path: Path | None) -> None:
    """Where running children are recorded (the validator's state dir / "children")."""
    global _lease_dir
    _lease_dir = Path(path) if path is not None else None
    if _lease_dir is not None:
        _lease_dir.mkdir(parents=True, exist_ok=True)


def lease_dir() -> Path | None:
    return _lease_dir


def track(pid: int, scratch: Path) -> None:
    """Called by sandbox.launch for every child (before anything waits on it)."""
    with _lock:
        _live[pid] = str(scratch)
    if _lease_dir is not None:
        rec = {"pid": pid, "scratch": str(scratch), "start": starttime(pid), "at": time.time()}
        tmp = _lease_dir / f".{pid}.tmp"
        try:
            tmp.write_text(json.dumps(rec))
            os.replace(tmp, _lease_dir / f"{pid}.json")
        except OSError as e:  # a lost record costs only crash reaping; never the launch itself
            from cacheon_subnet.log import get_logger

            get_logger("cacheon.lifecycle").warning("lease.write_failed", pid=pid, error=str(e))
    if SHUTDOWN.is_set():  # started during a shutdown: it must not outlive it
        _kill_groups({pid: str(scratch)}, SHUTDOWN_GRACE_S)


def untrack(pid: int) -> None:
    """Called by sandbox.stop once no member of the child's group runs."""
    with _lock:
        _live.pop(pid, None)
    if _lease_dir is not None:
        (_lease_dir / f"{pid}.json").unlink(missing_ok=True)


def live() -> dict[int, str]:
    with _lock:
        return dict(_live)


def request_shutdown(wait: bool = False) -> None:
    """Stop: set SHUTDOWN, kill every live child's group (TERM, SHUTDOWN_GRACE_S, KILL)."""
    SHUTDOWN.set()
    kill_live(wait)


def kill_live(wait: bool = False) -> None:
    """Kill every live child's group (TERM, SHUTDOWN_GRACE_S, KILL) from a helper thread."""
    t = threading.Thread(target=_kill_groups, args=(live(), SHUTDOWN_GRACE_S), daemon=True, name="shutdown-kill")
    t.start()
    if wait:
        t.join()


def _kill_groups(children: dict[int, str], grace_s: float) -> None:
    """TERM, grace, KILL each child's group; a pid no longer naming its scratch (reused) is left."""
    pids = [p for p, scratch in children.items() if _ours(p, scratch)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.killpg(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        if sig == signal.SIGTERM:
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and any(_group_alive(p) for p in pids):
                time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    return bool(live_members(pgid))


def _ours(pid: int, scratch: str) -> bool:
    """A process belongs to a recorded child iff its environment names that child's scratch."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"{SANDBOX_SCRATCH.name}={scratch}".encode() in env


def _holders(scratch: str) -> list[int]:
    """Live processes (not zombies) whose environment names `scratch`."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid() and _ours(int(entry), scratch):
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if stat[stat.rindex(")") + 2 :].split()[0] not in ("Z", "X"):
                out.append(int(entry))
    return out


def reap_leftovers(lease_dir: Path, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """Kill what a crashed run left of its children (their whole process groups, by identity),
    remove their lease records; returns what was found. Unreadable records are removed."""
    found = []
    for rec_path in sorted(Path(lease_dir).glob("*.json")):
        try:
            rec = json.loads(rec_path.read_text())
            pgid, scratch = int(rec["pid"]), str(rec["scratch"])
        except (OSError, ValueError, KeyError, TypeError):
            rec_path.unlink(missing_ok=True)
            continue
        members = _holders(scratch)  # its group, and its pid namespace's members (other sessions)
        for p in members:
            try:
                os.kill(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + timeout_s
        while _holders(scratch) and time.monotonic() < deadline:
            time.sleep(0.05)
        found.append({"pid": pgid, "scratch": scratch, "killed": members})
        rec_path.unlink(missing_ok=True)
    for tmp in Path(lease_dir).glob(".*.tmp"):
        tmp.unlink(missing_ok=True)
    return found
