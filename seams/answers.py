"""Nonce-bound answers of a scheduler rank to the host's RPCs (forward clock, route swap).

Why: the scheduler rank is the process that imports the bundle, so every file it writes could
also be written by contribution code. SGLang 0.5.13.post1's `Engine.collective_rpc` returns
nothing (`RpcReqOutput(success, message)`, engine.py:1224), so answers cannot travel back as RPC
results. Instead each RPC carries a fresh random nonce the host drew (through the driver) and the
rank appends exactly one line to `answers-<rank>.jsonl` echoing it. Nothing can be pre-written
(the nonce does not exist before the RPC); the driver (arena/engine/child.py) accepts, after each
RPC, exactly one new line per expected rank with that nonce, an unchanged history and no other
file: an extra, unknown, duplicated or rewritten line is a forging attempt, and so is a line that
does not decode as its kind's typed answer (seams/answer_protocol.py).

Each answer also carries the rank's receipt counts at that moment, so the host sees what the
candidate did between any two RPCs (a candidate call while the baseline route is in force is a
leak: arena/verdict/evidence.py).
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from pathlib import Path
from typing import Any

from seams.answer_protocol import Answer, AnswerError, read_answer

NONCE = re.compile(r"^[0-9a-f]{32}$")
PREFIX = "answers-"
MAX_BYTES = 64 << 20  # an answer log larger than this is not ours


class ForgeryError(RuntimeError):
    """A record the verdict would read was not produced by the code that owns it."""


def check_nonce(nonce: Any) -> str:
    if not isinstance(nonce, str) or not NONCE.fullmatch(nonce):
        raise ValueError(f"RPC nonce {nonce!r}: expected 32 lowercase hex digits from the host")
    return nonce


def snapshot(receipts: Any) -> dict[str, Any]:
    """The rank's receipt counts and errors now (empty when the rank keeps no receipts), and the
    static-input watch (seams/integrity.py): which engine-state inputs a kernel changed."""
    from seams.integrity import WATCH

    static = WATCH.report()
    if receipts is None:
        return {"counts": {}, "errors": [], "static": static}
    with receipts._lock:
        return {
            "counts": {k: dict(v) for k, v in receipts.counts.items()},
            "errors": list(receipts.errors),
            "static": static,
            "declines": {k: dict(v) for k, v in getattr(receipts, "declines", {}).items()},
        }


class AnswerLog:
    """Append-only, one fsync'd line per RPC on this rank."""

    def __init__(self, directory: str | None, rank: int) -> None:
        self.path = Path(directory) / f"{PREFIX}{rank}.jsonl" if directory else None
        self.rank = rank
        self.seq = 0

    def redirect(self, directory: str) -> None:
        """A resident timed engine's next contribution answers in its own dir, from line 0."""
        self.path = Path(directory) / f"{PREFIX}{self.rank}.jsonl"
        self.seq = 0

    def answer(self, nonce: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        rec = {
            "nonce": check_nonce(nonce),
            "kind": kind,
            "rank": self.rank,
            "pid": os.getpid(),
            "seq": self.seq,
            "t": time.time(),
            **payload,
        }
        self.seq += 1
        if self.path is not None:  # never through a symlink someone put in its place
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "a") as f:
                f.write(json.dumps(rec, sort_keys=True) + "\n")
                f.flush()
                os.fsync(f.fileno())
        return rec


def read_regular(path: Path, limit: int = MAX_BYTES) -> bytes:
    """A regular file's bytes, never following a symlink nor blocking on a FIFO (the directory is
    writable by the engine's processes)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ForgeryError(f"{path.name}: not a regular file")
        if st.st_size > limit:
            raise ForgeryError(f"{path.name}: {st.st_size} bytes, more than any answer log ({limit})")
        chunks: list[bytes] = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                return b"".join(chunks)
            chunks.append(b)
    finally:
        os.close(fd)


class AnswerReader:
    """The driver's side: after each RPC, exactly one new line per expected rank with its nonce."""

    def __init__(self, directory: str | os.PathLike[str], ranks: list[int]) -> None:
        self.dir, self.ranks = Path(directory), sorted(ranks)
        self.seen: dict[int, bytes] = {r: b"" for r in self.ranks}
        self.pids: dict[int, int] = {}
        self.issued: set[str] = set()

    def _read(self, r: int) -> bytes:
        try:
            data = read_regular(self.dir / f"{PREFIX}{r}.jsonl")
        except FileNotFoundError:
            if self.seen[r]:
                raise ForgeryError(f"rank {r}: its answer log was removed") from None
            raise
        except OSError as e:  # ELOOP: a symlink put in its place
            raise ForgeryError(f"rank {r}: answer log is not a plain file ({e.strerror})") from None
        if not data.startswith(self.seen[r]):
            raise ForgeryError(
                f"rank {r}: earlier answers were rewritten (answer log no longer starts "
                f"with the {len(self.seen[r])} bytes already read)"
            )
        return data

    def audit(self) -> None:
        """After a failed RPC: was the failure provoked by tampering with the logs? (A forger
        that breaks the answer channel must not turn its run into a retry.)"""
        self._extra()
        for r in self.ranks:
            try:
                self._read(r)
            except FileNotFoundError:
                pass

    def _extra(self) -> None:
        names = sorted(p.name for p in self.dir.glob(f"{PREFIX}*"))
        extra = [n for n in names if n not in {f"{PREFIX}{r}.jsonl" for r in self.ranks}]
        if extra:
            raise ForgeryError(f"answer logs no expected rank writes: {extra}")

    def collect(self, nonce: str, kind: str) -> dict[int, dict[str, Any]]:
        self.issued.add(nonce)
        self._extra()
        out = {}
        for r in self.ranks:
            try:
                data = self._read(r)
            except FileNotFoundError:
                raise ForgeryError(f"rank {r}: no answer log after the {kind} RPC {nonce[:8]}… succeeded") from None
            old = self.seen[r]
            new = data[len(old) :]
            lines = new.split(b"\n")
            if lines[-1] != b"" or len(lines) != 2:
                raise ForgeryError(
                    f"rank {r}: {len(lines) - 1} complete new answer line(s) after the {kind} "
                    f"RPC {nonce[:8]}…, expected exactly one"
                )
            rec = self._parse(r, lines[0], nonce, kind)
            if self.pids.setdefault(r, rec.pid) != rec.pid:
                raise ForgeryError(f"rank {r}: answer from pid {rec.pid}, earlier ones from {self.pids[r]}")
            self.seen[r] = data
            out[r] = json.loads(lines[0])  # exactly what decoded (a null the rank wrote stays a null)
        return out

    def _parse(self, r: int, line: bytes, nonce: str, kind: str) -> Answer:
        """Rank r's one new line as its typed answer: the nonce first (a replay or a stranger's
        line is refused before its form is looked at), then the strict decoder, then rank and kind."""
        try:
            doc = json.loads(line)
        except (ValueError, RecursionError):  # nesting deeper than json's recursion limit: RecursionError
            raise ForgeryError(f"rank {r}: answer to {nonce[:8]}… is not JSON") from None
        got = doc.get("nonce") if isinstance(doc, dict) else None
        if got != nonce:
            what = "a nonce issued earlier (a replay)" if got in self.issued else "an unknown nonce"
            raise ForgeryError(f"rank {r}: the answer to the {kind} RPC {nonce[:8]}… carries {what}: {str(got)[:40]!r}")
        try:
            rec = read_answer(doc)
        except AnswerError as e:
            raise ForgeryError(f"rank {r}: answer {nonce[:8]}… is not a {kind} answer of the rank's own: {e}") from None
        if rec.rank != r or rec.TAG != kind:
            raise ForgeryError(
                f"rank {r}: answer {nonce[:8]}… claims rank {rec.rank!r}, kind {rec.TAG!r} (expected {r}, {kind})"
            )
        return rec
