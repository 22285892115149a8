"""Host-owned engine lifecycle. The host never imports SGLang or contribution code: it writes a
job, starts `python -m arena.engine_child` in its own process group with exactly the environment
of the role (seam gates, sealed tree, receipts dir), enforces a hard wall-clock limit, reads the
step records, and tears down by killing the whole group and checking the GPU is free again.

Confinement of an engine: own process group and session; scrubbed environment (sandbox.child_env:
no ambient CACHEON_SEAM_* gate can arm an adapter the host did not select); HOME/TMPDIR in its own
scratch dir; a fresh network namespace with only loopback up (SGLang's ranks rendezvous on
127.0.0.1) where the platform allows it; the engine tree is sealed read-only and digest-checked
by every scheduler rank; hard wall-clock timeout -> a clear verdict, never a hang.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from cacheon_subnet import sandbox
from cacheon_subnet.log import get_logger

log = get_logger("arena.host")
REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class EngineRun:
    records: tuple[dict[str, Any], ...]
    rc: int | None
    timed_out: bool
    wall_s: float
    log_tail: str
    gpu_free: bool | None

    @property
    def error(self) -> str | None:
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
        for r in self.records:
            if r.get("step") == tag:
                return r
        raise KeyError(f"no record for step {tag!r}")


@dataclass(frozen=True)
class EngineSpec:
    name: str
    job: Mapping[str, Any]
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 1200.0
    start_timeout_s: float | None = None  # no "started" record by then -> killed (a stuck start)
    isolate_network: bool = True
    ro_paths: tuple[str, ...] = ()  # e.g. the checkpoint dir, the sealed engine tree (sandbox view)
    rw_paths: tuple[str, ...] = ()  # e.g. the receipts dir while receipts still travel as files


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


def gpu_memory_used_mib() -> list[int] | None:
    """Memory in use per visible GPU (None where nvidia-smi is absent, e.g. CPU CI)."""
    if not shutil.which("nvidia-smi"):
        return None
    cmd = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible:  # only the GPUs this arena owns: a neighbour's engine on another GPU is not ours
        cmd.insert(1, "--id=" + visible)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    return [int(x) for x in out.split() if x.strip().isdigit()]


def run_engine(spec: EngineSpec, workdir: Path, gpu_free_timeout_s: float = 30.0) -> EngineRun:
    """Run one engine job to completion (or its limit) and return every record it wrote."""
    workdir.mkdir(parents=True, exist_ok=True)
    scratch = workdir / f"{spec.name}-scratch"
    result = workdir / f"{spec.name}.jsonl"
    result.unlink(missing_ok=True)
    result.touch()  # bound read-write into the engine's view (the only host file it may write)
    job = dict(spec.job, result_path=str(result))
    job_path = workdir / f"{spec.name}.job.json"
    job_path.write_text(json.dumps(job))
    pythonpath = os.pathsep.join(p for p in (str(REPO), plugin_site(workdir), os.environ.get("PYTHONPATH", "")) if p)
    policy = sandbox.SandboxPolicy(wall_timeout_s=spec.timeout_s, cpu_seconds=None, file_bytes=64 << 30,
                                   open_files=65536, isolate_network=spec.isolate_network, loopback=True,
                                   max_processes=16384, scratch_bytes=16 << 30, tmp_bytes=16 << 30, gpu=True,
                                   ro_paths=(str(job_path), *spec.ro_paths), rw_paths=(str(result), *spec.rw_paths),
                                   extra_env={"PYTHONPATH": pythonpath, **spec.env})
    log_path = workdir / f"{spec.name}.log"
    baseline = gpu_memory_used_mib()
    t0 = time.monotonic()
    with open(log_path, "wb") as logf:
        proc = sandbox.launch([sys.executable, "-m", "arena.engine_child", str(job_path)], scratch=scratch,
                              policy=policy, stdout=logf, stderr=subprocess.STDOUT, cwd=REPO)
        log.info("arena.engine.start", engine=spec.name, pid=proc.pid, timeout_s=spec.timeout_s)
        timed_out = False
        start_deadline = t0 + spec.start_timeout_s if spec.start_timeout_s else None
        try:
            while proc.poll() is None:
                now = time.monotonic()
                if now - t0 > spec.timeout_s:
                    timed_out = True
                    break
                if start_deadline and now > start_deadline:
                    if result.exists() and '"op": "started"' in result.read_text():
                        start_deadline = None
                    else:
                        timed_out = True
                        break
                time.sleep(0.2)
        finally:
            sandbox.stop(proc, grace_s=10.0)  # TERM, grace, KILL the group, until no member runs
    wall = time.monotonic() - t0
    records = []
    if result.exists():
        for line in result.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                records.append({"op": "corrupt", "line": line[:200]})
    gpu_free = _wait_gpu_free(baseline, gpu_free_timeout_s)
    shutil.rmtree(scratch, ignore_errors=True)  # the engine's HOME/TMPDIR; records and log stay
    tail = log_path.read_text(errors="replace")[-4000:] if log_path.exists() else ""
    log.info("arena.engine.end", engine=spec.name, rc=proc.returncode, timed_out=timed_out, wall_s=round(wall, 1),
             gpu_free=gpu_free)
    return EngineRun(tuple(records), proc.returncode, timed_out, wall, tail, gpu_free)


def _wait_gpu_free(baseline: list[int] | None, timeout_s: float, slack_mib: int = 1024) -> bool | None:
    """True once every GPU's used memory is back to what it was before the engine started (within
    slack): the engine's contexts and caches are really gone, whatever PIDs nvidia-smi shows in a
    container. False if not within timeout_s; None where it cannot be seen."""
    if baseline is None:
        return None
    deadline = time.monotonic() + timeout_s
    while True:
        now = gpu_memory_used_mib()
        if now is None or all(n <= b + slack_mib for n, b in zip(now, baseline)):
            return True if now is not None else None
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
