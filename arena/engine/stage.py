"""One engine of a verdict (or of `arena warm`) behind the sandbox wall, and its lifecycle record.

Shared by `arena/run.py` (Qualification) and `arena/engine/warm.py` so that every engine, timed or not,
gets the same view: the checkpoint and the sealed tree read-only, its own scratch plus `rw`
writable, the seed JIT caches, the device pin and what is left of the verdict's time budget."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arena.config import ArenaConfig
from arena.engine.home import seed_caches
from arena.engine.host import EngineRun, EngineSpec, run_engine
from arena.records import StageRecord
from cacheon_subnet.env import ENGINE_TREE


@dataclass(frozen=True)
class StageContext:
    """What every engine of one verdict shares: its config, its work dir, its clock start (the
    time budget is the verdict's, not the engine's) and where it may run."""

    cfg: ArenaConfig
    workdir: Path
    t0: float
    devices: str | None = None
    isolate_network: bool = True


def run_stage(
    ctx: StageContext,
    name: str,
    job: dict[str, Any],
    env: dict[str, str],
    *,
    ranks: tuple[int, ...] = (),
    choose: Any = None,
    rw: tuple[str, ...] = (),
    gate: Callable[[tuple[dict[str, Any], ...]], bool] | None = None,
) -> tuple[EngineRun, StageRecord]:
    """Run one engine; `rw` is its answers dir (or the checkpoint dir, for the pristine
    checkpoint step alone), which is then not also bound read-only."""
    cfg = ctx.cfg
    left = cfg.limits.total_timeout_s - (time.monotonic() - ctx.t0)
    if ctx.devices is not None:
        env = {**env, "CUDA_VISIBLE_DEVICES": ctx.devices}
    ckpt = (job.get("checkpoint") or {}).get("dir")
    ro = tuple(p for p in (ckpt, env.get(ENGINE_TREE.name)) if p and p not in rw)
    run = run_engine(
        EngineSpec(
            name,
            job,
            env,
            timeout_s=max(30.0, left),
            start_timeout_s=cfg.limits.engine_start_timeout_s,
            isolate_network=ctx.isolate_network,
            ranks=ranks,
            choose_sample=choose,
            seed_caches=seed_caches(),
            ro_paths=ro,
            rw_paths=rw,
            gate=gate,
        ),
        ctx.workdir,
        cfg.limits.gpu_free_timeout_s,
    )
    starts = tuple(r for r in run.records if r.get("op") in ("checkpoint", "started"))
    routes = tuple(r for r in run.records if r.get("op") == "route")
    return run, StageRecord(
        name, run.wall_s, run.rc, run.timed_out, run.gpu_free, run.error, run.forgery, starts, routes, run.timing
    )


def resident_stage(
    ctx: StageContext, name: str, job: dict[str, Any], env: dict[str, str], pool: Any
) -> list[tuple[EngineRun, StageRecord]]:
    """The pristine teacher in its resident engine (arena/engine/resident.py): every attempt with its
    record ("teacher", then "teacher-retry" when the first one failed and a fresh T regraded)."""
    from arena.engine.home import default_home

    cfg, t = ctx.cfg, ctx.cfg.teacher
    left = cfg.limits.total_timeout_s - (time.monotonic() - ctx.t0)
    if ctx.devices is not None:
        env = {**env, "CUDA_VISIBLE_DEVICES": ctx.devices}
    # beside the timed engine on its GPU: its own share, and rank 0 blocks on its sockets when idle;
    # no CUDA graphs: T never decodes (max_new_tokens 1, its one token comes from the eager prefill),
    # so capturing them costs start time and memory and changes none of its numbers
    job = {
        **job,
        "engine_kwargs": {
            **job["engine_kwargs"],
            "mem_fraction_static": t.mem_fraction_static,
            "sleep_on_idle": True,
            "disable_cuda_graph": True,
            "disable_piecewise_cuda_graph": True,
        },
        "start_diag": False,
    }
    ckpt = (job.get("checkpoint") or {}).get("dir")
    spec = EngineSpec(
        name,
        job,
        env,
        timeout_s=max(30.0, left),
        start_timeout_s=cfg.limits.engine_start_timeout_s,
        isolate_network=ctx.isolate_network,
        seed_caches=seed_caches(),
        ro_paths=tuple(p for p in (ckpt,) if p),
    )
    runs = pool.run(
        spec,
        ctx.workdir,
        default_home() / "arena" / "resident",
        atol=t.canary_atol,
        max_jobs=t.max_jobs,
        start_timeout_s=cfg.limits.engine_start_timeout_s,
    )
    out = []
    for i, run in enumerate(runs):
        starts = tuple(r for r in run.records if r.get("op") in ("checkpoint", "started"))
        out.append(
            (
                run,
                StageRecord(
                    name if i == 0 else f"{name}-retry",
                    run.wall_s,
                    run.rc,
                    run.timed_out,
                    run.gpu_free,
                    run.error,
                    run.forgery,
                    starts,
                    (),
                    run.timing,
                ),
            )
        )
    return out


def resident_timed_stage(
    ctx: StageContext,
    name: str,
    job: dict[str, Any],
    env: dict[str, str],
    install: dict[str, str],
    pool: Any,
    *,
    ranks: tuple[int, ...],
    receipts_dir: Path,
    choose: Any = None,
    gate: Any = None,
) -> tuple[EngineRun, StageRecord, Any]:
    """A timed stage in the resident timed engine (arena/engine/resident_timed.py): the contribution named
    by `install` (a sealed tree or a host-set control) goes in and out of one engine kept across
    verdicts; returns the verdict's run, its record and the post-condition."""
    from arena.engine import postcondition as pc
    from arena.engine.home import default_home

    cfg = ctx.cfg
    left = cfg.limits.total_timeout_s - (time.monotonic() - ctx.t0)
    if ctx.devices is not None:
        env = {**env, "CUDA_VISIBLE_DEVICES": ctx.devices}
    ckpt = (job.get("checkpoint") or {}).get("dir")
    base = {k: v for k, v in job.items() if k != "steps"}
    spec = EngineSpec(
        name,
        base,
        env,
        timeout_s=max(30.0, left),
        start_timeout_s=cfg.limits.engine_start_timeout_s,
        isolate_network=ctx.isolate_network,
        ranks=ranks,
        seed_caches=seed_caches(),
        ro_paths=tuple(p for p in (ckpt,) if p),
    )
    runs, post = pool.run(
        spec,
        list(job["steps"]),
        install,
        workdir=ctx.workdir,
        receipts_dir=receipts_dir,
        home=default_home() / "arena" / "resident-timed",
        canary=pc.canary_step(cfg),
        post=pc.post_steps(cfg),
        max_jobs=cfg.engine.resident_max_jobs,
        start_timeout_s=cfg.limits.engine_start_timeout_s,
        choose=choose,
        gate=gate,
    )
    run = runs[-1]
    starts = tuple(r for x in runs for r in x.records if r.get("op") in ("checkpoint", "started"))
    routes = tuple(r for r in run.records if r.get("op") == "route")
    timing = {**run.timing, "reference_s": round(runs[0].wall_s, 2)} if len(runs) > 1 else dict(run.timing)
    wall = sum(r.wall_s for r in runs)
    return (
        run,
        StageRecord(name, wall, run.rc, run.timed_out, run.gpu_free, run.error, run.forgery, starts, routes, timing),
        post,
    )
