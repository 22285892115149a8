"""`cacheon arena warm`: one pristine engine (no contribution code) runs the arena's own window
shape once, so SGLang's JIT output (Triton, tvm-ffi, Inductor, FlashInfer) lands in the
validator's seed caches and every later engine of that arena starts warm. A cold engine start behind the wall
took 123-142 s on the H200 (docs/benchmarks.md); a verdict has up to four engines. Run it after
an install or a pin move; the validator's first verdicts then meet the same time as later ones."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arena.config import ArenaConfig
from arena.engine.home import cache_part, seed_caches
from arena.engine.host import EngineRun
from arena.engine.stage import StageContext, run_stage
from arena.jobs import _prompts
from arena.records import StageRecord
from cacheon_subnet.env import JIT_SEEDS
from seams.table import seam_environment


@dataclass(frozen=True)
class WarmResult:
    arena_id: str
    caches: Mapping[str, str]  # env key -> the seed dir it warmed
    files_before: int
    files_after: int
    stages: tuple[StageRecord, ...]
    wall_s: float
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "cacheon.arena-warm/1",
            "arena_id": self.arena_id,
            "caches": dict(self.caches),
            "files_before": self.files_before,
            "files_after": self.files_after,
            "new_files": self.files_after - self.files_before,
            "wall_s": round(self.wall_s, 1),
            "error": self.error,
            "stages": {s.name: s.to_json() for s in self.stages},
        }


def count_files(caches: Mapping[str, str]) -> int:
    """Files in the seeds' copied parts (of FlashInfer's base only .cache/flashinfer)."""
    parts = {cache_part(k, d) for k, d in caches.items()}
    return sum(len(files) for d in parts for _, _, files in os.walk(d))


def warm_steps(cfg: ArenaConfig) -> list[dict[str, Any]]:
    """The timed windows' exact form (prompt count and length, max_new_tokens, top_k), so prefill,
    every captured decode graph and the logprob path compile; then one teacher-forcing step (T's
    path). Prompts come from a seed no verdict uses, so nothing here predicts a verdict's inputs."""
    w, top_k = cfg.workload, cfg.quality.top_k
    seed = random.SystemRandom().randrange(1 << 30, 1 << 31)
    gen = {
        "op": "generate",
        "tag": "warm-0",
        "keep": False,
        "top_k": top_k,
        "max_new_tokens": w.output_len,
        "prompts": _prompts(cfg, seed, w.prompts_per_window, w.input_len),
    }
    rng = random.Random(seed)
    hi = cfg.profile.vocab

    def ids(n: int) -> list[int]:
        return [rng.randrange(w.vocab_low, hi) for _ in range(n)]

    seqs = [{"key": i, "prompt": ids(w.input_len), "cont": ids(w.output_len)} for i in range(min(8, cfg.quality.prompts))]
    return [gen, {"op": "teacher", "tag": "T-warm", "top_k": top_k, "sequences": seqs}]


def warm(
    cfg: ArenaConfig, workdir: Path, checkpoint_root: Path, engine_factory: str | None = None, devices: str | None = None
) -> WarmResult:
    from arena.run import RunOptions, engine_base

    t0 = time.monotonic()
    seeds = seed_caches()
    before = count_files(seeds)
    stages: list[StageRecord] = []
    workdir.mkdir(parents=True, exist_ok=True)

    ctx = StageContext(cfg, workdir, t0, devices)

    def engine(name: str, job: dict[str, Any], env: dict[str, str], rw: tuple[str, ...] = ()) -> EngineRun:
        run, record = run_stage(ctx, name, job, env, rw=rw)
        stages.append(record)
        return run

    def done(error: str | None) -> WarmResult:
        return WarmResult(cfg.arena_id, seeds, before, count_files(seeds), tuple(stages), time.monotonic() - t0, error)

    if not seeds:
        return done(f"JIT seeding is off ({JIT_SEEDS.name}=off): there is no cache to warm")
    opts = RunOptions(workdir=workdir, checkpoint_root=checkpoint_root, engine_factory=engine_factory)
    base, why = engine_base(cfg, opts, engine)
    if base is None:
        return done(why)
    run = engine("warm", {**base, "steps": warm_steps(cfg)}, seam_environment(()))
    return done(run.error)


def maybe_warm(cfg: ArenaConfig, engine_factory: str | None = None) -> WarmResult | None:
    """What a validator does at start-up: warm the seeds when they hold nothing yet (a fresh
    install, a pin move); None when they already hold files or seeding is off."""
    from arena.engine.home import default_home

    seeds = seed_caches()
    if not seeds or count_files(seeds) > 0:
        return None
    home = default_home() / "arena"
    return warm(cfg, home / cfg.arena_id / "warm", home / "checkpoints", engine_factory=engine_factory)
