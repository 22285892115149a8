"""Execution receipts: per scheduler rank and slot, did the candidate load, fire and complete.

A green server proves nothing: stock code keeps an engine answering. The host requires, for the
candidate's slot, `active` + `fired` + `completed` on every expected scheduler rank, zero
`fallback` and no `load_failed` — and exactly the expected ranks (an extra receipt means
candidate code crossed into a process role it must never reach).

Counting happens inside the candidate's custom-op body, which runs eagerly (warm-up, CUDA graph
capture, eager batches) and never while Dynamo traces, so it is graph-safe. Files are written
atomically, debounced, and flushed at checkpoints the seam chooses.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

KINDS = ("active", "load_failed", "fired", "completed", "fallback")
# A routed call the candidate did not take (seams/dispatch.py `run`), by reason: "abi: ..." when
# the engine handed arguments outside the slot's ABI (a seam/arena defect: on the H200 Qwen3's
# strided q kept attention.decode@1 out of every decode graph but bs 1), "slot: ..." for a dtype
# the slot does not cover, "manifest: ..." when the bundle's own dtypes/constraints excluded the
# shape (its choice). Bounded: a few distinct reasons per slot.
MAX_DECLINE_REASONS = 8


class Receipts:
    def __init__(self, directory: str | None, role: str, rank: int, flush_every_s: float = 1.0) -> None:
        self.directory = directory
        self.role = role
        self.rank = rank
        self.counts: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(KINDS, 0))
        self.errors: list[str] = []
        self.routes: list[dict] = []  # route-swap acknowledgements (seams/route.py)
        self.declines: dict[str, dict[str, int]] = defaultdict(dict)  # key -> reason -> calls
        self.flush_every_s = flush_every_s
        self._last_flush = 0.0
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._dirty = threading.Event()
        self._flusher: threading.Thread | None = None

    def note(self, slot: str, kind: str, error: str | None = None) -> None:
        with self._lock:
            self.counts[slot][kind] += 1
            if error and len(self.errors) < 20:
                self.errors.append(f"{slot} {kind}: {error[-500:]}")
        first = self.counts[slot][kind] == 1
        if first or kind in ("load_failed", "fallback") or time.monotonic() - self._last_flush > self.flush_every_s:
            self.flush()
        else:
            self._mark_dirty()

    def decline(self, slot: str, reason: str) -> None:
        """Count a routed call that went to stock because the candidate could not take it."""
        with self._lock:
            reasons = self.declines[slot]
            if reason not in reasons and len(reasons) >= MAX_DECLINE_REASONS:
                reason = "other"
            reasons[reason] = reasons.get(reason, 0) + 1
        self._mark_dirty()

    def _mark_dirty(self) -> None:
        """A burst of calls (graph capture) ends without a final note; a daemon thread writes the
        last counts within flush_every_s, so the file never trails the process by more."""
        if not self._dirty.is_set():  # set() takes the condition's lock: not on every eager call
            self._dirty.set()
        if self._flusher is None and self.directory:
            self._flusher = threading.Thread(target=self._flush_loop, name="cacheon-receipts", daemon=True)
            self._flusher.start()

    def _flush_loop(self) -> None:
        while True:
            self._dirty.wait()
            time.sleep(self.flush_every_s)
            self._dirty.clear()
            self.flush()

    def reset(self, directory: str | None) -> None:
        """A resident timed engine's next contribution (seams/resident.py): counts, errors, acks
        and declines start from zero, and the file goes to that contribution's own answers dir, so
        nothing one contribution's turn counted is ever read as another's."""
        with self._io_lock, self._lock:
            self.counts.clear()
            self.errors.clear()
            self.routes.clear()
            self.declines.clear()
            self.directory = directory

    def error(self, slot: str, message: str) -> None:
        """Record why a selected candidate failed (strict mode raises right after)."""
        with self._lock:
            if len(self.errors) < 20:
                self.errors.append(f"{slot}: {message[-500:]}")
        self.flush()

    def ack_route(self, ack: dict) -> None:
        """Record one acknowledged route swap (epoch, route, candidate calls fired at recapture)."""
        with self._lock:
            self.routes.append(dict(ack))
            del self.routes[:-256]
        self.flush()

    def flush(self) -> None:
        if not self.directory:
            return
        with self._io_lock:  # the flusher thread and the calling thread write the same file
            with self._lock:
                payload = {
                    "role": self.role,
                    "rank": self.rank,
                    "pid": os.getpid(),
                    "time": time.time(),
                    "slots": {k: dict(v) for k, v in self.counts.items()},
                    "errors": list(self.errors),
                    "routes": list(self.routes),
                    "declines": {k: dict(v) for k, v in self.declines.items()},
                }
                self._last_flush = time.monotonic()
            path = Path(self.directory) / f"receipt-{self.role}-{self.rank}-{os.getpid()}.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(payload, sort_keys=True))
            os.replace(tmp, path)


MAX_RECEIPT_BYTES = 4 << 20  # a receipt is a few KiB (counts per slot, route acks)
MAX_RECEIPT_FILES = 256  # one per process that ran the seam (scheduler ranks, a stray role)


def _read_receipt(path: Path) -> dict:
    """One receipt, read by the HOST as root from a dir the engine's sandbox uid writes: never
    through a symlink (it would resolve on the host, outside the engine's view: a wallet), never
    blocking on a FIFO or a device, never more than MAX_RECEIPT_BYTES."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise OSError("a symlink (never followed)" if e.errno == errno.ELOOP else e.strerror) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"not a regular file (mode {stat.filemode(st.st_mode)})")
        if st.st_size > MAX_RECEIPT_BYTES:
            raise OSError(f"{st.st_size} bytes, more than any receipt ({MAX_RECEIPT_BYTES})")
        data = os.read(fd, MAX_RECEIPT_BYTES + 1)
        if len(data) > MAX_RECEIPT_BYTES:
            raise OSError(f"grew past {MAX_RECEIPT_BYTES} bytes while read")
    finally:
        os.close(fd)
    rec = json.loads(data)
    if not isinstance(rec, dict):
        raise ValueError(f"a receipt is a JSON object, not {type(rec).__name__}")
    return rec


def _unreadable(why: str) -> dict:
    return {"role": "unreadable", "rank": -1, "pid": -1, "slots": {}, "errors": [why[:300]]}


def read_receipts(directory: str | os.PathLike[str]) -> list[dict]:
    """Every receipt-*.json of `directory`; anything else there (a link, a FIFO, a huge file, more
    files than processes) is an `unreadable` receipt, which coverage() counts against the run."""
    names: list[str] = []
    with os.scandir(directory) as it:
        for e in it:
            if e.name.startswith("receipt-") and e.name.endswith(".json"):
                names.append(e.name)
                if len(names) > MAX_RECEIPT_FILES:
                    return [_unreadable(f"more than {MAX_RECEIPT_FILES} receipt files: not one per process")]
    out = []
    for name in sorted(names):
        try:
            out.append(_read_receipt(Path(directory) / name))
        except (OSError, ValueError) as e:
            out.append(_unreadable(f"{name}: {e}"))
    return out


@dataclass(frozen=True)
class Coverage:
    ok: bool
    problems: tuple[str, ...]
    per_rank: Mapping[int, Mapping[str, Mapping[str, int]]]


def coverage(receipts: Iterable[dict], slots: Iterable[str], expected_ranks: Iterable[int]) -> Coverage:
    """Fail closed: every expected scheduler rank present exactly once, each slot active, fired,
    completed, with no fallback or load failure; any receipt from another role is a violation."""
    receipts = list(receipts)
    slots = list(slots)  # iterated once per rank
    expected = sorted(set(expected_ranks))
    problems: list[str] = []
    if not expected or not slots:
        problems.append(f"nothing to cover (slots {slots}, expected ranks {expected})")
    per_rank: dict[int, dict] = {}
    errors: dict[int, list] = {}
    for r in receipts:
        if r.get("role") == "unreadable":  # read_receipts: a link, FIFO, huge file... left in the dir
            problems.append("receipt from role 'unreadable' (pid -1): " + "; ".join(map(str, r.get("errors") or []))[:300])
            continue
        if r.get("role") != "scheduler":
            problems.append(
                f"receipt from role {r.get('role')!r} (pid {r.get('pid')}): candidate code outside a scheduler rank"
            )
            continue
        rank = int(r.get("rank", -1))
        if rank in per_rank:
            problems.append(f"rank {rank} reported twice (pids differ): ambiguous coverage")
        per_rank[rank] = r.get("slots", {})
        errors[rank] = list(r.get("errors", []))
    for rank in sorted(set(per_rank) - set(expected)):
        problems.append(f"unexpected rank {rank} reported")
    for rank in expected:
        got = per_rank.get(rank)
        if got is None:
            problems.append(f"rank {rank}: no receipt (scheduler never activated)")
            continue
        problems += [f"rank {rank}: error recorded: {e}" for e in errors[rank]]  # e.g. a strict failure
        for slot in slots:
            c = got.get(slot, {})
            for kind in ("active", "fired", "completed"):
                if not c.get(kind):
                    problems.append(f"rank {rank} {slot}: no '{kind}' receipt")
            for kind in ("load_failed", "fallback"):
                if c.get(kind):
                    problems.append(f"rank {rank} {slot}: {c[kind]} '{kind}'")
    return Coverage(not problems, tuple(problems), per_rank)
