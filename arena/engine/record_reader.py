"""The host's end of an engine's record pipe: read, validate, persist, answer.

A thread drains what the driver writes (arena/engine/channel.py RecordStream validates each line),
appends every accepted record to the host's copy fsync'd (a kill -9 of the host keeps it), and
answers on the job pipe what the host is asked mid-run: the quality sample after outputs_ready
and the sequential go/stop after each gate step. Apart from host.py, which launches and stops the
engine, because the resident engines (arena/engine/resident.py) persist and answer the same way.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from arena.engine import protocol as P
from arena.engine.channel import MAX_RECORD_BYTES, RecordStream
from cacheon_subnet import progress
from cacheon_subnet.log import get_logger

log = get_logger("arena.engine.record_reader")


def gate_says_go(gate: Callable[[tuple[dict[str, Any], ...]], bool] | None, records: tuple[dict[str, Any], ...]) -> bool:
    """The host's test after a gate step (go on, or stop the run early); none, or a bug in it,
    says go: a broken test must never end a run early."""
    if gate is None:
        return True
    try:
        return bool(gate(records))
    except Exception as e:  # noqa: BLE001 - whatever the test raised, the run goes on
        log.warning("arena.gate.error", error=f"{type(e).__name__}: {e}"[:300])
        return True


def persist(log: Any, written: bytearray, line: bytes) -> None:
    """Append one accepted record to the host's copy, fsync'd (a kill -9 of the host keeps it),
    and to what the host knows it wrote (the copy check at the end compares the two)."""
    data = line + b"\n"
    log.write(data)
    log.flush()
    os.fsync(log.fileno())
    written += data


def check_copy(stream: RecordStream, path: Path, written: bytearray) -> None:
    """The host's record copy must hold exactly what the host wrote there: anything else is forging."""
    try:
        same = path.read_bytes() == bytes(written)
    except OSError:
        same = False
    if not same and stream.forgery is None:
        stream.forgery = f"the host's record copy {path.name} was modified or removed by another process"


class RecordReader(threading.Thread):
    """Drains the record pipe: validate, persist (fsync), answer the sample request."""

    def __init__(
        self,
        fd: int,
        stream: RecordStream,
        log_path: Path,
        job_w: int | None,
        choose: Callable[[dict[str, Any]], dict[str, Any]] | None,
        gate: Callable[[tuple[dict[str, Any], ...]], bool] | None = None,
    ) -> None:
        super().__init__(daemon=True, name="arena-records")
        self.fd, self.stream, self.job_w, self.choose, self.gate = fd, stream, job_w, choose, gate
        self.gates = {s["tag"]: s["gate_nonce"] for s in stream.job["steps"] if s.get("gate_nonce")}
        self.log = open(log_path, "xb")  # created here, before the engine runs
        self.written = bytearray()
        self.started = threading.Event()
        self.started_at: float | None = None  # time.monotonic() when the "started" record arrived
        # one tick per timed step record (windows, route swaps): a cold engine runs for minutes
        self.bar = progress.bar(desc="arena steps", total=len(stream.job.get("steps") or ()), unit="step")

    def run(self) -> None:
        buf = bytearray()
        try:
            while True:
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    break
                scan, start = len(buf), 0
                buf += chunk
                while (nl := buf.find(b"\n", scan)) >= 0:
                    self._line(bytes(buf[start:nl]))
                    start = scan = nl + 1
                del buf[:start]
                if len(buf) > MAX_RECORD_BYTES:  # only the driver writes here; bound it anyway
                    self.stream.oversized(len(buf))
                    break
        finally:
            self.bar.close()
            self.stream.finish(bytes(buf))
            self.log.close()
            os.close(self.fd)
            self._close_job()

    def _line(self, line: bytes) -> None:
        rec = self.stream.feed(line)
        if rec is None:
            return
        persist(self.log, self.written, line)
        if "step" in rec:
            self.bar.update(1)
        if rec.get("op") == P.Started.TAG:
            self.started_at = time.monotonic()
            self.started.set()
        if rec.get("step") in self.gates and self.job_w is not None:
            go = gate_says_go(self.gate, tuple(self.stream.records))
            if not go:
                self.stream.stop()
            try:
                os.write(self.job_w, P.line(P.GateAnswer(self.gates[rec["step"]], go)))
            except OSError:
                pass
        if rec.get("op") == P.OutputsReady.TAG and self.job_w is not None:
            try:
                os.write(self.job_w, P.line(sample_request(self.choose, rec, self.stream.job["sample_nonce"])))
            except OSError:
                pass
            self._close_job()

    def _close_job(self) -> None:
        if self.job_w is not None:
            try:
                os.close(self.job_w)
            except OSError:
                pass
            self.job_w = None


def sample_request(
    choose: Callable[[dict[str, Any]], dict[str, Any]] | None, ready: dict[str, Any], nonce: str
) -> P.SampleRequest:
    """The quality sample `choose` names after the outputs_ready record ({"sample": {tag: [keys]}};
    none without it), with the job's sample nonce: the driver takes no other."""
    return P.SampleRequest((choose(ready) if choose else {"sample": {}})["sample"], nonce)


def send_job(fd: int, job: dict[str, Any]) -> None:
    """Write the sealed job down the job pipe, all of it (a pipe takes a large job in parts)."""
    data = (json.dumps(job) + "\n").encode()
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        pass  # the driver died before reading: its exit says why
