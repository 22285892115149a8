"""A miner's kernel that is right up to the timed window's prefill forward and wrong above it.

On the H100/H200 SGLang chunks prefill at 8192 tokens, so the arena never runs a larger forward
and its quality gate never sees one; a B200 validator's engine (chunked prefill 16384) and a
release user's engine do. Session 21 first sized verify's largest prefill by the window too,
which let such a kernel pass every check of the subnet; verify must reach max_prefill_tokens on
both tiers whatever the window is (cacheon_subnet/verify/shapes.py from_arena_config)."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from cacheon_subnet.slots import get_slot
from cacheon_subnet.verify import shapes

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu-tier", "cpu-tier"])
@pytest.mark.parametrize("chunk", [None, 4096])
def test_verify_reaches_above_the_window_on_every_tier(gpu: bool, chunk: int | None) -> None:
    from arena.config import load_config

    cfg = load_config(REPO / "configs/arena/dense.toml")
    cfg = replace(cfg, engine=replace(cfg.engine, chunked_prefill_size=chunk))
    arena = shapes.from_arena_config(cfg)
    window = dict(arena.window)["prefill"]
    assert window == (chunk or shapes.SGLANG_DEFAULT_CHUNKED_PREFILL)
    spec = get_slot("norm.rmsnorm")  # the kernel's branch: `if T > 8192: return garbage`
    base = spec.cases("gpu" if gpu else "verify")
    for seed in range(5):
        planned = shapes.plan_cases(spec, base, spec.dtypes, random.Random(seed), gpu=gpu, arena=arena, pool=base)
        above = [p for p in planned if p.case.dims["T"] > window]
        assert any(p.case.dims["T"] == shapes.SGLANG_MAX_PREFILL_TOKENS for p in above), (seed, window)
