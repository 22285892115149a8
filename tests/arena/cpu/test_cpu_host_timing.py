"""Host side of the CPU arena's timing (no workers): shared-memory layout and the per-call judge."""

from __future__ import annotations

import pytest
import torch

from arena.cpu.host_timing import Arena, judge_call, plan_layout
from cacheon_subnet.slots import all_slots, get_slot
from cacheon_subnet.slots.gen import seed_generator
from cacheon_subnet.slots.spec import dtype_of

SINGLE = [s for s in all_slots() if not s.collective]


def _inputs(spec, case, act, seed):
    made = spec.make_inputs(case, act, seed_generator(seed))
    return {k: v for k, v in made.items() if spec.arg(k).role in ("in", "inout")}


@pytest.mark.parametrize("spec", SINGLE, ids=lambda s: s.id)
def test_layout_round_trips_every_slot_with_views(spec):
    case = spec.cases("verify")[0]
    act = dtype_of(spec.dtypes[0])
    sets = [_inputs(spec, case, act, 7 + i) for i in range(3)]
    arena = Arena(plan_layout(spec, case, act, sets[0], 3))
    try:
        assert arena.layout.call_bytes % 4096 == 0  # each call is mapped on its own in the worker
        for i, s in enumerate(sets):
            arena.write_inputs(i, s, spec)
        for i, s in enumerate(sets):
            for name, t in s.items():
                got = arena.tensor(i, name)
                assert got.shape == t.shape and got.stride() == t.stride() and got.dtype == t.dtype
                assert torch.equal(got.view(torch.uint8) if got.dtype == torch.bool else got, t), (i, name)
            for a in spec.by_role("out"):  # poisoned before every batch
                out = arena.tensor(i, a.name)
                assert bool(torch.isnan(out).all()) if out.is_floating_point() else bool((out == -0x5A5A5A5A).all())
    finally:
        arena.close()


def _judge(spec, written: dict, seed=1, full=False):
    case = spec.cases("verify")[-1]
    act = spec.dtypes[0]
    inputs = _inputs(spec, case, dtype_of(act), seed)
    ref = spec.reference(inputs, dict(case.params))
    arena = Arena(plan_layout(spec, case, dtype_of(act), inputs, 1))
    try:
        arena.write_inputs(0, inputs, spec)
        for name, make in written.items():
            arena.tensor(0, name).copy_(make(inputs, ref))
        return judge_call(spec, act, arena, 0, inputs, ref, full, seed_generator(3))
    finally:
        arena.close()


@pytest.mark.parametrize("full", [False, True])
def test_judge_passes_the_reference_and_fails_broken_controls(full):
    spec = get_slot("norm.rmsnorm")
    assert _judge(spec, {"out": lambda i, r: r["out"]}, full=full) is None
    assert _judge(spec, {}, full=full).reason == "nan_inf"  # never written: poison
    stale = _inputs(spec, spec.cases("verify")[-1], torch.bfloat16, 99)
    stale_ref = spec.reference(stale, dict(spec.cases("verify")[-1].params))["out"]
    assert _judge(spec, {"out": lambda i, r: stale_ref}, full=full).reason == "mismatch"  # replayed
    assert _judge(spec, {"out": lambda i, r: r["out"] * 1.1}, full=full).reason == "mismatch"  # wrong math
