"""One engine of a verdict (or of `arena warm`) behind the sandbox wall, and its lifecycle record.

Shared by `arena/run.py` (Qualification) and `arena/warm.py` so that every engine, timed or not,
gets the same view: the checkpoint and the sealed tree read-only, its own scratch plus `rw`
writable, the seed JIT caches, the device pin and what is left of the verdict's time budget."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from arena.config import ArenaConfig
from arena.home import seed_caches
from arena.host import EngineRun, EngineSpec, run_engine
from arena.records import StageRecord


@dataclass(frozen=True)
class StageContext:
    """What every engine of one verdict shares: its config, its work dir, its clock start (the
    time budget is the verdict's, not the engine's) and where it may run."""
    cfg: ArenaConfig
    workdir: Path
    t0: float
    devices: str | None = None
    isolate_network: bool = True


def run_stage(ctx: StageContext, name: str, job: dict[str, Any], env: dict[str, str], *,
              ranks: tuple[int, ...] = (), choose: Any = None, rw: tuple[str, ...] = (),
              gate: Callable[[tuple[dict[str, Any], ...]], bool] | None = None) -> tuple[EngineRun, StageRecord]:
    """Run one engine; `rw` is its answers dir (or the checkpoint dir, for the pristine
    checkpoint step alone), which is then not also bound read-only."""
    cfg = ctx.cfg
    left = cfg.limits.total_timeout_s - (time.monotonic() - ctx.t0)
    if ctx.devices is not None:
        env = {**env, "CUDA_VISIBLE_DEVICES": ctx.devices}
    ckpt = (job.get("checkpoint") or {}).get("dir")
    ro = tuple(p for p in (ckpt, env.get("CACHEON_ENGINE_TREE")) if p and p not in rw)
    run = run_engine(EngineSpec(name, job, env, timeout_s=max(30.0, left),
                                start_timeout_s=cfg.limits.engine_start_timeout_s,
                                isolate_network=ctx.isolate_network, ranks=ranks, choose_sample=choose,
                                seed_caches=seed_caches(), ro_paths=ro, rw_paths=rw, gate=gate),
                     ctx.workdir, cfg.limits.gpu_free_timeout_s)
    starts = tuple(r for r in run.records if r.get("op") in ("checkpoint", "started"))
    routes = tuple(r for r in run.records if r.get("op") == "route")
    return run, StageRecord(name, run.wall_s, run.rc, run.timed_out, run.gpu_free, run.error, run.forgery,
                            starts, routes, run.timing)
