"""What a qualification needs before its first timed engine: its options, the control ops, the
machine check (preflight), the blame rule for a dead engine, and the job fields every engine of
one arena shares (engine kwargs and a pristine checkpoint). Split from arena/run.py, which runs
the stages."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arena.config import ArenaConfig
from arena.engine.host import EngineRun
from arena.jobs import checkpoint_job, engine_kwargs
from cacheon_subnet.bundle import OpEntry
from cacheon_subnet.errors import CacheonError
from seams.table import seam_environment


@dataclass(frozen=True)
class RunOptions:
    workdir: Path
    checkpoint_root: Path
    engine_factory: str | None = None  # tests only: a fake engine class "module:attr"
    isolate_network: bool = True
    control: str | None = None  # "stock-as-candidate" | "handicap" | "slowdown" (seams/controls.py; never a crown)
    handicap_us: float = 0.0  # the spin per call of the slowed side: B/B′ (handicap) or C (slowdown)
    devices: str | None = None  # CUDA_VISIBLE_DEVICES of every engine of this arena (one arena per GPU)
    # T grades only a speed PASS (a slower or undecided kernel is not crowned whatever its
    # quality, and T is an engine start); calibration runs and controls grade every verdict
    grade_always: bool = False
    teachers: Any = None  # arena.engine.resident.TeacherPool for a resident T (default: the process's own)
    timed_engines: Any = None  # arena.engine.resident_timed.TimedPool ([engine] resident; default: the process's own)


# stock-as-candidate: stock vs stock through the candidate route -> the role bias (speed only).
# handicap: B/B′ run stock + a fixed GPU spin per call, C plain stock -> a known speedup, run
# through the whole PASS path (T, confirmation): does the arena crown a gain of that size?
# slowdown: C runs stock + a fixed GPU spin per call, B/B′ plain stock -> a known loss: how soon
# does a verdict end on a clear loser (issue 19: the sequential test)?
CONTROLS = ("stock-as-candidate", "handicap", "slowdown")
SPIN_CONTROLS = ("handicap", "slowdown")


def stock_control_op(slot: str) -> OpEntry:
    """The op the role-bias control runs: SGLang's own kernel placed in the candidate route."""
    from cacheon_subnet.slots import get_slot

    spec = get_slot(slot)
    return OpEntry(
        slot=slot,
        slot_version=spec.version,
        module="stock",
        attr="stock",
        variant="stock-control",
        dtypes=tuple(spec.dtypes),
    )


class ArenaUnavailable(RuntimeError):
    """This machine cannot run the arena (no SGLang, no GPU): a usage problem, never a verdict."""


def preflight() -> None:
    import importlib.util

    if importlib.util.find_spec("sglang") is None:
        raise ArenaUnavailable(
            "SGLang is not importable here: the GPU arena needs the `gpu` extra "
            "(sglang==0.5.13.post1) on a CUDA machine; use --arena cpu for CPU timing"
        )
    if not shutil.which("nvidia-smi"):
        raise ArenaUnavailable("no NVIDIA driver (nvidia-smi) on this machine: the GPU arena needs a CUDA GPU")
    from seams.entry import entry_point_problem

    if problem := entry_point_problem():  # else every engine runs stock and every challenger FAILs evidence
        raise ArenaUnavailable(f"the seam plugin would not load: {problem}")


def candidate_blame(receipts: list[dict[str, Any]], slot: str) -> str:
    """Why a dead engine is the candidate's fault, or "" (fail closed only on real evidence):
    a recorded seam error or load failure, or a call that fired and never completed (a crash or
    hang inside the kernel)."""
    for r in receipts:
        # not the incumbent's, and not a swap that never called the challenger
        mine = [e for e in r.get("errors", []) if not e.startswith((f"{slot}@", "route@incumbent", "route@stock"))]
        if mine:
            return f"recorded by rank {r.get('rank')}: {mine[0][:300]}"
        c = r.get("slots", {}).get(slot, {})
        if c.get("load_failed"):
            return f"rank {r.get('rank')}: the bundle failed to load"
        if c.get("fired", 0) > c.get("completed", 0) + 1:  # +1: the receipt file may trail by one call
            return f"rank {r.get('rank')}: {c['fired'] - c['completed']} candidate calls never completed"
    return ""


def engine_base(cfg: ArenaConfig, opts: RunOptions, engine: Callable[..., EngineRun]) -> tuple[dict[str, Any] | None, str]:
    """The job fields every engine of one arena shares: engine kwargs and the checkpoint, made
    first by a pristine child (read-only to every later engine) or, for a real model, a verified
    copy of the operator's. (None, why) when that fails: infrastructure, never the miner's fault."""
    base: dict[str, Any] = {
        "engine_kwargs": engine_kwargs(cfg),
        "engine_factory": opts.engine_factory,
        "checkpoint": None if opts.engine_factory and not cfg.real else checkpoint_job(cfg, opts.checkpoint_root),
    }
    if base["checkpoint"] and cfg.real:  # the operator's checkpoint: a verified copy, its corpus tokenized
        from arena.model.real import prepare

        try:
            base["text_tokens"] = prepare(cfg, Path(base["checkpoint"]["dir"]))
        except CacheonError as e:  # not the declared checkpoint: refused, never charged to the miner
            return None, f"real checkpoint refused: {e}"
    elif base["checkpoint"]:  # written by a pristine child before any engine: read-only to all of them
        ck = base["checkpoint"]
        if cfg.engine.resident and ck["dir"] in MADE and Path(ck["dir"]).is_dir():
            # a verdict in the resident timed engine: this process's pristine step already made or found
            # it (engines only ever see it read-only); its child would cost 3-14 s a verdict (H200)
            return base, ""
        Path(ck["dir"]).parent.mkdir(parents=True, exist_ok=True)
        made = engine(
            "checkpoint",
            {**base, "steps": [], "checkpoint_only": True},
            seam_environment(()),
            rw=(str(Path(ck["dir"]).parent),),
        )
        if made.error:
            return None, f"the checkpoint step failed (infrastructure): {made.error}"
        MADE.add(ck["dir"])
    return base, ""


MADE: set[str] = set()  # checkpoint dirs a pristine step of this process made or found
