"""A sandboxed child's stdout/stderr: a pipe the host drains into a size-capped log file.

Why: a child's output is contribution-controlled. Handed a file fd, the child writes up to its
RLIMIT_FSIZE (64 GiB for an arena engine, which needs that for checkpoints) onto the
validator's disk, and a host that reads the log back to quote its tail reads all of it into
memory. Through a pipe the host keeps the first `cap` bytes on disk, then only a rolling tail in
memory (appended to the file, after a marker, when the child is done); the child never blocks
for long (the drain keeps reading), and `tail()` costs at most `keep` bytes.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

LOG_CAP = 32 << 20  # bytes of a child's output kept on disk from its start
TAIL_KEEP = 64 << 10  # bytes of its end kept in memory past the cap


class LogSink:
    def __init__(self, path: Path, cap: int = LOG_CAP, keep: int = TAIL_KEEP) -> None:
        self.path, self.cap, self.keep = Path(path), cap, keep
        self._file = open(self.path, "wb")  # noqa: SIM115 - closed by close()
        self._r, self._w = os.pipe()
        os.set_inheritable(self._r, False)
        self.kept = 0  # bytes written to the file from the head of the stream
        self.dropped = 0  # bytes past the cap (only their last `keep` stay, in memory)
        self._tail = bytearray()
        self._thread = threading.Thread(target=self._drain, daemon=True, name=f"log-{self.path.name}")
        self._thread.start()

    def fileno(self) -> int:
        """The write end, for the child's stdout/stderr; call writer_passed() once it is started."""
        return self._w

    def writer_passed(self) -> None:
        """The child holds its copy now: the host's goes, so EOF comes when the child's last does."""
        if self._w >= 0:
            os.close(self._w)
            self._w = -1

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self._r, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            room = max(0, self.cap - self.kept)
            if room and not self._file.closed:
                self._file.write(chunk[:room])
                self._file.flush()
                self.kept += min(room, len(chunk))
            self.dropped += max(0, len(chunk) - room)
            self._tail += chunk
            if len(self._tail) > 2 * self.keep:
                del self._tail[: -self.keep]

    def close(self, timeout_s: float = 10.0) -> None:
        """After the child (and every process of its sandbox) is gone: the file gets the tail."""
        self.writer_passed()
        self._thread.join(timeout_s)  # a writer outside the stopped sandbox cannot exist; bounded anyway
        if self._file.closed:
            return
        if self.dropped:
            tail = bytes(self._tail[-min(self.keep, self.dropped) :])
            self._file.write(
                b"\n[cacheon: %d bytes of output past the %d-byte log cap dropped; its last %d follow]\n"
                % (self.dropped - len(tail), self.cap, len(tail))
                + tail
            )
        self._file.close()
        if not self._thread.is_alive():
            os.close(self._r)

    def tail(self, limit: int) -> str:
        """The last `limit` bytes of the child's output (never more than `keep` are held)."""
        return bytes(self._tail[-limit:]).decode("utf-8", "replace")


def tail_of(path: Path, limit: int) -> str:
    """The last `limit` bytes of a log file, read from its end (never the whole file)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""
