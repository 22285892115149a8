"""The pristine teacher T kept across verdicts (issue 19 item 1; docs/arena.md "Resident teacher").

Why T may outlive a verdict when no timed engine may: T never loads contribution code (no sealed
tree, every seam gate off); a contribution reaches it only with token ids, the sequences T grades,
and with the radix cache off no request leaves state for the next one. What still guards it:
- every job is sealed with fresh nonces and its records are validated like a one-shot engine's
  (arena/engine/channel.py); a record while no job runs is forging and ends T;
- every job begins and ends with the canary: the same sequences each time (the first job's first
  ones), whose logprobs must equal T's first reading within `[teacher] canary_atol`; a T whose
  answers moved since it started grades nothing more (`canary_drift`);
- an error, forging, a timeout or canary drift stops T, and the verdict that met it is retried
  once in a fresh T (a sequence that crashes T costs only its own verdict: TeacherPool.run);
- T is recycled after `max_jobs` jobs; it holds its own leased uid, scratch and caches.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

from arena.engine import protocol as P
from arena.engine.channel import MAX_RECORD_BYTES, RecordStream, nonce, seal
from arena.engine.diskwatch import DiskLimits, DiskWatch
from arena.engine.home import CACHE_KEYS
from arena.engine.host import REPO, EngineRun, EngineSpec, engine_policy, plugin_site
from arena.engine.jit_copies import JIT_INSIDE, private_caches
from arena.engine.record_reader import check_copy, gate_says_go, persist, sample_request
from cacheon_subnet import lifecycle, sandbox
from cacheon_subnet.log import get_logger
from cacheon_subnet.sandbox.logsink import LogSink

log = get_logger("arena.engine.resident")
CANARY_SEQUENCES = 2
CANARY_TAGS = ("T-canary-before", "T-canary-after")


@dataclass
class _Job:
    stream: RecordStream
    log: BinaryIO
    written: bytearray
    done: threading.Event
    # a timed job (arena/engine/resident_timed.py): the host's quality sample and sequential go/stop,
    # answered on the job pipe as arena/engine/record_reader.py does for a one-shot engine
    choose: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    gate: Callable[[tuple[dict[str, Any], ...]], bool] | None = None


class ResidentEngine:
    """One engine driver in serve mode (arena/engine/child.py `serve`): jobs one after another."""

    def __init__(self, spec: EngineSpec, home: Path, watch_disk: bool = False) -> None:
        self.spec, self.home = spec, home
        home.mkdir(parents=True, exist_ok=True)
        self.jobs = 0
        self.poisoned: str | None = None  # why this engine may run no further job
        self._cur: _Job | None = None
        self._lock = threading.Lock()
        self._buf = bytearray()
        self._serve: str = ""  # the serve nonce of the first job, echoed by every later one
        scratch = home / "scratch"
        caches = private_caches(scratch, {**{k: v for k, v in spec.env.items() if k in CACHE_KEYS}, **spec.seed_caches})
        inside = {k: f"{JIT_INSIDE}/{Path(v).name}" for k, v in caches.items()}
        env = {k: v for k, v in spec.env.items() if k not in CACHE_KEYS}
        pythonpath = os.pathsep.join(p for p in (str(REPO), plugin_site(home), os.environ.get("PYTHONPATH", "")) if p)
        policy = engine_policy(spec, caches, inside, {"PYTHONPATH": pythonpath, **env})
        job_r, self._job_w = os.pipe()
        self._rec_r, rec_w = os.pipe()
        self._logf = LogSink(home / "engine.log")
        try:
            self.proc = sandbox.launch(
                [sys.executable, "-m", "arena.engine.child", "--job-fd", str(job_r), "--record-fd", str(rec_w)],
                scratch=scratch,
                policy=policy,
                pass_fds=(job_r, rec_w),
                stdout=self._logf.fileno(),
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )
        except BaseException:
            for fd in (self._rec_r, self._job_w):
                os.close(fd)
            self._logf.close()
            raise
        finally:
            os.close(job_r)
            os.close(rec_w)
            self._logf.writer_passed()
        self.caches = caches
        self.watch: DiskWatch | None = None
        if watch_disk:  # contribution code runs here: what it may add to the host's disk is bounded
            self.watch = DiskWatch(
                [Path(p) for p in (*policy.rw_paths, *caches.values())], DiskLimits.from_env(), kept=policy.rw_paths
            )
            self.watch.members = functools.partial(sandbox.members, self.proc)
            self.watch.start()
        self._reader = threading.Thread(target=self._read, daemon=True, name="arena-resident-records")
        self._reader.start()
        log.info("arena.engine.resident.start", pid=self.proc.pid, home=str(home))

    @property
    def alive(self) -> bool:
        return self.poisoned is None and self.proc.poll() is None

    def _read(self) -> None:
        try:
            while chunk := os.read(self._rec_r, 1 << 16):
                self._buf += chunk
                while (nl := self._buf.find(b"\n")) >= 0:
                    line = bytes(self._buf[:nl])
                    del self._buf[: nl + 1]
                    self._line(line)
                if len(self._buf) > MAX_RECORD_BYTES:
                    self.poisoned = f"a record line over {MAX_RECORD_BYTES >> 20} MiB"
                    break
        finally:
            with self._lock:
                if self._cur is not None:
                    self._cur.stream.finish(bytes(self._buf))
                    self._cur.done.set()
            os.close(self._rec_r)

    def _line(self, line: bytes) -> None:
        with self._lock:
            cur = self._cur
            if cur is None:  # only the driver writes here, and only while a job runs
                self.poisoned = "a record arrived while no job was running"
                return
            rec = cur.stream.feed(line)
            if cur.stream.forgery:
                cur.done.set()
                return
            if rec is None:
                return
            persist(cur.log, cur.written, line)
            if rec.get("op") in ("done", "error"):
                cur.done.set()
            self._answer(cur, rec)

    def _answer(self, cur: _Job, rec: dict[str, Any]) -> None:
        """The host's go/stop after a gate step, its sample request after outputs_ready."""
        msg: P.GateAnswer | P.SampleRequest | None = None
        step = next((s for s in cur.stream.job["steps"] if s.get("gate_nonce") and s.get("tag") == rec.get("step")), None)
        if step is not None:
            go = gate_says_go(cur.gate, tuple(cur.stream.records))
            if not go:
                cur.stream.stop()
            msg = P.GateAnswer(step["gate_nonce"], go)
        elif rec.get("op") == P.OutputsReady.TAG:
            msg = sample_request(cur.choose, rec, cur.stream.job["sample_nonce"])
        if msg is not None:
            with contextlib.suppress(OSError):
                _write(self._job_w, P.line(msg))

    def run(
        self,
        name: str,
        job: dict[str, Any],
        workdir: Path,
        timeout_s: float,
        *,
        ranks: tuple[int, ...] = (),
        choose: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        gate: Callable[[tuple[dict[str, Any], ...]], bool] | None = None,
    ) -> EngineRun:
        """One job in this engine: its records validated under its own nonces (and, with `ranks`,
        its RPC answers: job["answers"] names the job's own answers dir), persisted to
        <workdir>/<name>.jsonl like a one-shot engine's."""
        t0 = time.monotonic()
        first = self.jobs == 0
        if not self.alive:  # died or poisoned since its last job: no record, so an error run
            return EngineRun((), self.proc.poll(), False, 0.0, f"resident engine unusable: {self.poisoned}", None)
        sealed = seal({**job, "serve": nonce()}, answers=bool(ranks))
        if ranks:
            sealed["answers"] = {**job["answers"], "ranks": list(ranks)}
        path = workdir / f"{name}.jsonl"
        path.unlink(missing_ok=True)
        cur = _Job(RecordStream(sealed, tuple(ranks)), open(path, "xb"), bytearray(), threading.Event(), choose, gate)
        try:
            with self._lock:
                self._cur = cur
            line = _job_line(sealed) if first else P.line(P.ServeLine(self._serve, job=sealed))
            try:
                _write(self._job_w, line)
            except OSError as e:  # the driver is gone: its exit says why
                self.poisoned = f"the job pipe is closed ({e})"
                cur.done.set()
            self._serve = sealed["serve"]
            finished, deadline = False, t0 + timeout_s
            while not (finished := cur.done.wait(0.2)) and time.monotonic() < deadline:
                if lifecycle.SHUTDOWN.is_set():  # the validator is stopping: no verdict from a cut job
                    self.poisoned = "stopped by a shutdown request"
                    raise lifecycle.Interrupted(f"resident engine {name}: job stopped by a shutdown request")
                if self.watch is not None and self.watch.breach:
                    break
        finally:
            with self._lock:
                self._cur = None
            cur.log.close()
        self.jobs += 1
        wall = time.monotonic() - t0
        stream = cur.stream
        check_copy(stream, path, cur.written)
        if self.watch is not None and self.watch.breach is None:  # one last look: a burst since the last sample
            with contextlib.suppress(OSError):
                self.watch.breach = self.watch.check()
        disk = self.watch.breach if self.watch is not None else None
        run = EngineRun(
            tuple(stream.records),
            self.proc.poll(),
            not finished and not disk,
            wall,
            self._logf.tail(4000),
            None,
            stream.forgery,
            stream.truncated,
            {"resident_job": float(self.jobs), "reused": float(not first)},
            disk,
        )
        if run.error:
            self.poisoned = self.poisoned or run.error
        return run

    def close(self) -> None:
        with contextlib.suppress(OSError):
            _write(self._job_w, P.line(P.ServeLine(self._serve, stop=True)))
        with contextlib.suppress(OSError):
            os.close(self._job_w)
        sandbox.stop(self.proc, grace_s=0.0 if self.watch is not None and self.watch.breach else 10.0)
        if self.watch is not None:
            self.watch.stop()
        self._reader.join(timeout=10)
        self._logf.close()
        shutil.rmtree(self.home / "scratch", ignore_errors=True)  # its HOME/TMPDIR and caches; the log stays
        log.info("arena.engine.resident.stop", pid=self.proc.pid, jobs=self.jobs, poisoned=self.poisoned)


def _job_line(job: dict[str, Any]) -> bytes:
    """The first job, as its own line (arena/engine/child.py reads it before any engine exists)."""
    return (json.dumps(job) + "\n").encode()


def _write(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def canary_step(tag: str, sequences: list[dict[str, Any]], top_k: int) -> dict[str, Any]:
    return {"op": "teacher", "tag": tag, "top_k": top_k, "sequences": sequences}


def canary_drift(ref: list[dict[str, Any]], got: list[dict[str, Any]], atol: float) -> str | None:
    """Why T's canary reading `got` differs from its first reading `ref` (None: the same)."""
    if len(ref) != len(got):
        return f"{len(got)} canary sequences graded, {len(ref)} expected"
    worst = 0.0
    for a, b in zip(ref, got):
        if [t for t, _ in a["tokens"]] != [t for t, _ in b["tokens"]] or len(a["top"]) != len(b["top"]):
            return f"canary sequence {a['key']}: graded tokens differ"
        pairs = list(zip(a["tokens"], b["tokens"]))
        for ta, tb in zip(a["top"], b["top"]):
            if [t for t, _ in ta] != [t for t, _ in tb]:
                return f"canary sequence {a['key']}: top-k tokens differ"
            pairs += zip(ta, tb)
        for (_, x), (_, y) in pairs:
            # every comparison with a NaN is false: `worst > atol` let a NaN reading pass (red team)
            d = 0.0 if x == y else abs(x - y)
            if not math.isfinite(d):
                return f"canary sequence {a['key']}: a logprob read {y!r} where this teacher first read {x!r} (no finite difference)"
            worst = max(worst, d)
    if worst > atol:
        return f"canary logprobs moved by {worst:.3g} (> canary_atol {atol:g}) since this teacher started"
    return None


class ResidentTeacher:
    """A ResidentEngine whose every job is framed by the canary."""

    def __init__(self, spec: EngineSpec, home: Path, atol: float) -> None:
        self.engine = ResidentEngine(spec, home)
        self.atol = atol
        self.canary: list[dict[str, Any]] | None = None  # the sequences, fixed at the first job
        self.reference: list[dict[str, Any]] | None = None  # T's first reading of them

    def grade(self, name: str, job: dict[str, Any], workdir: Path, timeout_s: float) -> EngineRun:
        steps = list(job["steps"])
        teach = [s for s in steps if s.get("op") == "teacher" and s.get("sequences")]
        if self.canary is None and teach:
            # the arena's prompts only, split in two: the first step grades the candidate's own
            # continuations (role C first), so a canary made of them was chosen by whichever
            # contribution a fresh T graded first, for every later verdict of that T (red team:
            # e.g. a repeated token T predicts at logprob ~0, which no drift moves past canary_atol)
            seqs = [s for s in teach[0]["sequences"] if len(s["prompt"]) >= 2][:CANARY_SEQUENCES]
            self.canary = [
                {
                    "key": f"canary-{i}",
                    "prompt": list(s["prompt"])[: len(s["prompt"]) // 2],
                    "cont": list(s["prompt"])[len(s["prompt"]) // 2 :],
                }
                for i, s in enumerate(seqs)
            ]
            if not self.canary:  # no prompt to split (never in an arena): the sequences as they are
                self.canary = [
                    {"key": f"canary-{i}", "prompt": list(s["prompt"]), "cont": list(s["cont"])}
                    for i, s in enumerate(teach[0]["sequences"][:CANARY_SEQUENCES])
                ]
            self.top_k = int(teach[0]["top_k"])
        if self.canary:
            steps = [
                canary_step(CANARY_TAGS[0], self.canary, self.top_k),
                *steps,
                canary_step(CANARY_TAGS[1], self.canary, self.top_k),
            ]
        run = self.engine.run(name, {**job, "steps": steps}, workdir, timeout_s)
        if run.error or not self.canary:
            return run
        for tag in CANARY_TAGS:
            try:
                got = run.step(tag)["graded"]
            except KeyError:
                got = []
            if self.reference is None:
                self.reference = got
                continue
            why = canary_drift(self.reference, got, self.atol)
            if why:
                self.engine.poisoned = f"{tag}: {why}"
                return replace(
                    run, records=run.records + ({"op": "error", "kind": "canary", "error": self.engine.poisoned},)
                )
        return run

    def close(self) -> None:
        self.engine.close()


def teacher_key(spec: EngineSpec) -> str:
    """What makes two teachers the same engine: its job base (engine kwargs, checkpoint, factory),
    its environment and its devices."""
    doc = {
        "job": {k: v for k, v in spec.job.items() if k != "steps"},
        "env": dict(spec.env),
        "isolate_network": spec.isolate_network,
        "ro": list(spec.ro_paths),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]


class TeacherPool:
    """Resident teachers of this process, one per key (arena and devices)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._teachers: dict[str, ResidentTeacher] = {}
        self._started = 0

    def run(
        self, spec: EngineSpec, workdir: Path, home: Path, *, atol: float, max_jobs: int, start_timeout_s: float | None
    ) -> list[EngineRun]:
        """Grade spec.job in the resident teacher of its key; on any failure stop it and retry
        once in a fresh one. Returns every attempt (the last one decides)."""
        key = teacher_key(spec)
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        attempts: list[EngineRun] = []
        with lock:
            for _ in range(2):
                t = self._teachers.get(key)
                if t is not None and (not t.engine.alive or t.engine.jobs >= max_jobs):
                    self._drop(key)
                    t = None
                fresh = t is None
                if t is None:
                    self._started += 1  # its own dir: another process's T of the same key is not this one
                    t = self._teachers[key] = ResidentTeacher(spec, home / key / f"{os.getpid()}-{self._started}", atol)
                left = spec.timeout_s if not fresh or not start_timeout_s else spec.timeout_s + start_timeout_s
                try:
                    run = t.grade(spec.name if not attempts else f"{spec.name}-retry", dict(spec.job), workdir, left)
                except BaseException:  # a shutdown (or a host bug): this T runs nothing more
                    self._drop(key)
                    raise
                attempts.append(run)
                if not run.error:
                    return attempts
                log.warning("arena.engine.resident.failed", key=key, error=str(run.error)[:300], fresh=fresh)
                self._drop(key)
                if run.forgery:  # forging is decided, never retried away
                    break
        return attempts

    def _drop(self, key: str) -> None:
        t = self._teachers.pop(key, None)
        if t is not None:
            t.close()

    def __enter__(self) -> TeacherPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_all()

    def close_all(self) -> None:
        with self._lock:
            keys = list(self._teachers)
        for k in keys:
            self._drop(k)


POOL = TeacherPool()
atexit.register(POOL.close_all)
