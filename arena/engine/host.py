"""Host-owned engine lifecycle. The host never imports SGLang or contribution code: it seals a
job with fresh nonces (arena/engine/channel.py), starts `python -m arena.engine.child` in its own
process group with exactly the environment of the role (seam gates, sealed tree, receipts dir),
hands it the job over one pipe and reads its records from another (both created here, passed by
fd: no file any engine process could read or write carries them), validates every record as it
arrives, persists what it accepted (fsync'd, so a kill -9 of the host keeps them), enforces a
hard wall-clock limit, and tears down by killing the whole group and checking the GPU is free.

Confinement of an engine: own process group and session; scrubbed environment (sandbox.child_env:
no ambient CACHEON_SEAM_* gate can arm an adapter the host did not select); HOME/TMPDIR in its own
scratch dir; a fresh network namespace with only loopback up (SGLang's ranks rendezvous on
127.0.0.1) where the platform allows it; the engine tree is sealed read-only and digest-checked
by every scheduler rank; hard wall-clock timeout -> a clear verdict, never a hang.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arena.engine.channel import RecordStream, seal
from arena.engine.diskwatch import DiskLimits, DiskWatch
from arena.engine.home import CACHE_KEYS
from arena.engine.jit_copies import JIT_INSIDE, private_caches, warm_seed_caches
from arena.engine.record_reader import RecordReader, check_copy, send_job
from cacheon_subnet import lifecycle, sandbox
from cacheon_subnet.env import ENGINE_TREE, RECEIPT_DIR
from cacheon_subnet.log import get_logger
from cacheon_subnet.sandbox.logsink import LogSink

log = get_logger("arena.engine.host")
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class EngineRun:
    records: tuple[dict[str, Any], ...]
    rc: int | None
    timed_out: bool
    wall_s: float
    log_tail: str
    gpu_free: bool | None
    forgery: str | None = None  # a record or answer the host did not issue: the candidate's FAIL
    truncated: bool = False  # the stream's last line was cut short (a kill mid-write: a fault)
    # seconds of the host's own steps around the engine (copy the seeds in, launch, until the
    # "started" record, stop, GPU free, copy back): measured here, so unlike the driver's diag trusted
    timing: Mapping[str, float] = field(default_factory=dict)
    # stopped for what it wrote to the host's disk (arena/engine/diskwatch.py): (kind, why), kind
    # "growth" (its own writes: the candidate's, where one was loaded) or "reserve" (the host's disk)
    disk: tuple[str, str] | None = None

    @property
    def error(self) -> str | None:
        if self.forgery:
            return f"forging attempt: {self.forgery}"
        if self.disk:
            return f"engine stopped: {self.disk[1]}"
        for r in self.records:
            if r.get("op") == "error":
                return r["error"]
        if self.timed_out:
            started = any(r.get("op") == "started" for r in self.records)
            what = "its wall-clock limit" if started else "its start limit (or wall-clock limit) before starting"
            return f"engine exceeded {what} ({self.wall_s:.0f} s) and was killed"
        if not any(r.get("op") == "done" for r in self.records):
            return f"engine exited (rc {self.rc}) before finishing its steps; log tail: {self.log_tail[-600:]}"
        return None

    def step(self, tag: str) -> dict[str, Any]:
        """The record of step `tag` (one at most: the stream admits each step's nonce once)."""
        for r in self.records:
            if r.get("step") == tag:
                return r
        raise KeyError(f"no record for step {tag!r}")

    def lifecycle(self, op: str) -> dict[str, Any] | None:
        return next((r for r in self.records if r.get("op") == op and "step" not in r), None)


@dataclass(frozen=True)
class EngineSpec:
    name: str
    job: Mapping[str, Any]
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 1200.0
    start_timeout_s: float | None = None  # no "started" record by then -> killed (a stuck start)
    isolate_network: bool = True
    ranks: tuple[int, ...] = ()  # scheduler ranks that answer the host's RPCs (engines with a candidate)
    # outputs_ready record -> the quality sample to request ({"sample": {tag: [keys]}}), chosen now
    choose_sample: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    # after each gate step (the last window of a cycle): the records so far -> go on (True) or
    # stop (False); arena/verdict/sequential.py through arena/run.py. Any exception in it means go on.
    gate: Callable[[tuple[dict[str, Any], ...]], bool] | None = None
    seed_caches: Mapping[str, str] = field(default_factory=dict)  # env key -> operator cache to copy
    ro_paths: tuple[str, ...] = ()  # the checkpoint dir, the sealed engine tree (sandbox view)
    rw_paths: tuple[str, ...] = ()  # the receipts / answers dir the scheduler ranks write


def plugin_site(workdir: Path) -> str | None:
    """Make SGLang's plugin loader find `cacheon = seams.plugin:load` (group sglang.srt.plugins).

    An installed distribution already declares it (pyproject.toml). A bare source checkout (the
    GPU box gets the tree, not a wheel) gets a minimal dist-info on a path returned for PYTHONPATH.
    """
    from importlib.metadata import entry_points

    if any(ep.name == "cacheon" for ep in entry_points(group="sglang.srt.plugins")):
        return None
    site = workdir / "plugin-site"
    info = site / "cacheon_subnet-0.1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cacheon-subnet\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[sglang.srt.plugins]\ncacheon = seams.plugin:load\n")
    return str(site)


def gpu_memory_used_mib(visible: str | None = None) -> list[int] | None:
    """Memory in use per visible GPU (None where nvidia-smi is absent, e.g. CPU CI). visible: the
    arena's own CUDA_VISIBLE_DEVICES (one arena per GPU shares the host process with others)."""
    if not shutil.which("nvidia-smi"):
        return None
    cmd = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"]
    visible = (visible if visible is not None else os.environ.get("CUDA_VISIBLE_DEVICES", "")).strip()
    if visible:  # only the GPUs this arena owns: a neighbour's engine on another GPU is not ours
        cmd.insert(1, "--id=" + visible)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    return [int(x) for x in out.split() if x.strip().isdigit()]


def view_paths(spec: EngineSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What the engine's sandbox view adds to the system: the sealed tree and a finished
    checkpoint read-only; its receipts/answers dir read-write; a checkpoint dir that does not
    exist yet read-write (scripts; `arena run` writes it first in a pristine step)."""
    rw = list(spec.rw_paths)
    ro = list(spec.ro_paths)
    if spec.env.get(RECEIPT_DIR.name):
        rw.append(spec.env[RECEIPT_DIR.name])
    if spec.env.get(ENGINE_TREE.name):
        ro.append(spec.env[ENGINE_TREE.name])
    ckpt = (spec.job.get("checkpoint") or {}).get("dir")
    if ckpt:
        if os.path.isdir(ckpt):
            ro.append(ckpt)
        else:
            Path(ckpt).parent.mkdir(parents=True, exist_ok=True)
            rw.append(str(Path(ckpt).parent))
    rw_set = {os.path.abspath(p) for p in rw}
    ro = [
        p
        for p in dict.fromkeys(ro)
        if os.path.abspath(p) not in rw_set and not any(os.path.abspath(p).startswith(w + os.sep) for w in rw_set)
    ]
    return tuple(ro), tuple(dict.fromkeys(rw))


def may_warm_caches(spec: EngineSpec) -> bool:
    """Only an engine that loaded no contribution code (no sealed tree) may warm shared caches."""
    return not spec.env.get(ENGINE_TREE.name)


def engine_policy(
    spec: EngineSpec, caches: Mapping[str, str], inside: Mapping[str, str], env: Mapping[str, str]
) -> sandbox.SandboxPolicy:
    """The wall of every engine, one-shot (run_engine) or resident (arena/engine/resident.py)."""
    ro, rw = view_paths(spec)
    return sandbox.SandboxPolicy(
        wall_timeout_s=spec.timeout_s,
        cpu_seconds=None,
        file_bytes=64 << 30,
        open_files=65536,
        isolate_network=spec.isolate_network,
        loopback=True,
        max_processes=16384,
        scratch_bytes=16 << 30,
        tmp_bytes=16 << 30,
        inodes=1 << 20,
        gpu=True,
        ro_paths=ro,
        rw_paths=rw,
        fixed_binds=tuple((caches[k], inside[k]) for k in caches),
        extra_env={**env, **inside},
    )


def run_engine(spec: EngineSpec, workdir: Path, gpu_free_timeout_s: float = 30.0) -> EngineRun:
    """Run one engine job to completion (or its limit) and return every record it sent."""
    workdir.mkdir(parents=True, exist_ok=True)
    scratch = workdir / f"{spec.name}-scratch"
    result = workdir / f"{spec.name}.jsonl"  # the host's copy of what it accepted, for the record
    result.unlink(missing_ok=True)
    job = seal(dict(spec.job), answers=bool(spec.ranks))
    if spec.ranks:
        # the answer logs live in the receipts directory the ranks were given
        job["answers"] = {
            "dir": spec.env.get(RECEIPT_DIR.name),
            **(job.get("answers") or {}),
            "ranks": list(spec.ranks),
        }
        if not job["answers"]["dir"]:
            raise ValueError(f"engine {spec.name}: answer ranks {spec.ranks} but no {RECEIPT_DIR.name}")
    stream = RecordStream(job, tuple(spec.ranks))
    pythonpath = os.pathsep.join(p for p in (str(REPO), plugin_site(workdir), os.environ.get("PYTHONPATH", "")) if p)
    seeds = {k: v for k, v in spec.env.items() if k in CACHE_KEYS}  # an operator's cache: a seed, never shared
    timing: dict[str, float] = {}
    tc = time.monotonic()
    caches = private_caches(scratch, {**seeds, **spec.seed_caches})
    timing["copy_in_s"] = round(time.monotonic() - tc, 2)
    inside = {k: f"{JIT_INSIDE}/{Path(v).name}" for k, v in caches.items()}  # one path in every engine
    env = {k: v for k, v in spec.env.items() if k not in CACHE_KEYS}
    policy = engine_policy(spec, caches, inside, {"PYTHONPATH": pythonpath, **env})
    # what it may add to the host's disk: its own writable host dirs, only where contribution code
    # runs (a pristine engine writes the checkpoint); the free-space reserve holds for every engine
    limits = DiskLimits.from_env()
    if may_warm_caches(spec):
        limits = limits.unbounded()
    watch = DiskWatch([Path(p) for p in (*policy.rw_paths, *caches.values())], limits, kept=policy.rw_paths)
    log_path = workdir / f"{spec.name}.log"
    visible = spec.env.get("CUDA_VISIBLE_DEVICES")
    baseline = gpu_memory_used_mib(visible)
    job_r, job_w = os.pipe()
    rec_r, rec_w = os.pipe()
    reader = RecordReader(rec_r, stream, result, job_w, spec.choose_sample, spec.gate)
    t0 = time.monotonic()
    logf = LogSink(log_path)  # the engine's output: capped on disk, never read back whole
    with contextlib.closing(logf):
        try:
            proc = sandbox.launch(
                [sys.executable, "-m", "arena.engine.child", "--job-fd", str(job_r), "--record-fd", str(rec_w)],
                scratch=scratch,
                policy=policy,
                pass_fds=(job_r, rec_w),
                stdout=logf.fileno(),
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )
        except BaseException:
            reader.log.close()
            os.close(rec_r)
            os.close(job_w)
            raise
        finally:
            os.close(job_r)
            os.close(rec_w)
            logf.writer_passed()
        timing["launch_s"] = round(time.monotonic() - t0, 2)  # the wall: uid lease, chown, tmpfs, bwrap exec
        reader.start()
        watch.members = functools.partial(sandbox.members, proc)  # their unlinked-but-open files count too
        watch.start()
        threading.Thread(target=send_job, args=(job_w, job), daemon=True).start()
        log.info("arena.engine.start", engine=spec.name, pid=proc.pid, timeout_s=spec.timeout_s)
        timed_out = False
        start_deadline = t0 + spec.start_timeout_s if spec.start_timeout_s else None
        try:
            while proc.poll() is None:
                if lifecycle.SHUTDOWN.is_set():
                    break
                now = time.monotonic()
                if now - t0 > spec.timeout_s or stream.forgery or watch.breach:
                    timed_out = not (stream.forgery or watch.breach)
                    break
                if start_deadline and now > start_deadline:
                    if reader.started.is_set():
                        start_deadline = None
                    else:
                        timed_out = True
                        break
                time.sleep(0.2)
        finally:
            # TERM, grace, KILL the group, until no member runs (shorter when the validator stops)
            ts = time.monotonic()
            grace = 0.0 if watch.breach else lifecycle.SHUTDOWN_GRACE_S if lifecycle.SHUTDOWN.is_set() else 10.0
            sandbox.stop(proc, grace_s=grace)  # an engine filling the host's disk gets no grace
            timing["stop_s"] = round(time.monotonic() - ts, 2)
            disk = watch.stop()
    if disk and disk[0] == "growth" and not may_warm_caches(spec):  # a pristine step's rw dir holds every checkpoint
        # what it wrote must not outlive the run, nor keep the disk full while the host waits for
        # the GPU (other arenas on this host write there too): gone now; the record is in the result
        for d in policy.rw_paths:
            sandbox.remove_tree(d)
            os.makedirs(d, exist_ok=True)
        sandbox.remove_tree(scratch)  # its JIT cache copies (no engine with a breach copies back)
        log.warning("arena.engine.disk", engine=spec.name, why=disk[1])
    if lifecycle.SHUTDOWN.is_set():  # no verdict from a run we cut short; the GPU must be free first
        gpu_free = _wait_gpu_free(baseline, min(gpu_free_timeout_s, 15.0), visible)
        reader.join(timeout=5)
        sandbox.remove_tree(scratch)
        log.warning("arena.engine.interrupted", engine=spec.name, pid=proc.pid, gpu_free=gpu_free)
        raise lifecycle.Interrupted(f"engine {spec.name} stopped by a shutdown request (gpu free: {gpu_free})")
    reader.join(timeout=30)
    wall = time.monotonic() - t0
    if reader.started_at is not None:
        timing["to_started_s"] = round(reader.started_at - t0, 2)  # launch to the driver's "started" record
    if reader.is_alive() and stream.forgery is None:  # the driver never passes its pipe on
        stream.forgery = "a process outside the stopped engine group still holds the record pipe"
    check_copy(stream, result, reader.written)
    tg = time.monotonic()
    gpu_free = _wait_gpu_free(baseline, gpu_free_timeout_s, visible)
    timing["gpu_free_s"] = round(time.monotonic() - tg, 2)
    if may_warm_caches(spec) and not disk:
        tw = time.monotonic()
        warm_seed_caches(caches, {**seeds, **spec.seed_caches})
        timing["copy_back_s"] = round(time.monotonic() - tw, 2)
    sandbox.remove_tree(scratch)  # the engine's HOME/TMPDIR and caches (any depth); records and log stay
    tail = logf.tail(4000)
    log.info(
        "arena.engine.end",
        engine=spec.name,
        rc=proc.returncode,
        timed_out=timed_out,
        wall_s=round(wall, 1),
        gpu_free=gpu_free,
        forgery=stream.forgery,
    )
    return EngineRun(
        tuple(stream.records),
        proc.returncode,
        timed_out,
        wall,
        tail,
        gpu_free,
        stream.forgery,
        stream.truncated,
        timing,
        disk,
    )


def _wait_gpu_free(
    baseline: list[int] | None, timeout_s: float, visible: str | None = None, slack_mib: int = 1024
) -> bool | None:
    """True once every GPU's used memory is back to what it was before the engine started (within
    slack): the engine's contexts and caches are really gone, whatever PIDs nvidia-smi shows in a
    container. False if not within timeout_s; None where it cannot be seen."""
    if baseline is None:
        return None
    deadline = time.monotonic() + timeout_s
    while True:
        now = gpu_memory_used_mib(visible)
        if now is None or all(n <= b + slack_mib for n, b in zip(now, baseline)):
            return True if now is not None else None
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
