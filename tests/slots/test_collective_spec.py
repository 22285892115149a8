"""Collective slot specs: per-rank references, realistic per-rank inputs, shapes, ABI rules."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from cacheon_subnet.errors import SlotError
from cacheon_subnet.slots import get_slot, profiles
from cacheon_subnet.slots.compare import compare
from cacheon_subnet.slots.spec import TIERS, dtype_of

SLOTS = ("collective.all_reduce", "collective.ar_residual_rmsnorm")


def _rank_inputs(slot: str, world: int = 2, dtype: torch.dtype = torch.bfloat16, seed: int = 0):
    spec = get_slot(slot)
    c = spec.cases("verify")[0]
    return spec, c, spec.make_rank_inputs(c, dtype, torch.Generator().manual_seed(seed), world)


@pytest.mark.parametrize("slot", SLOTS)
def test_declared_collective_with_group_in_signature(slot: str) -> None:
    spec = get_slot(slot)
    assert spec.collective and spec.world_sizes == (2,) and spec.replicated
    assert spec.signature().endswith("group: ProcessGroup)")
    assert set(spec.replicated) == {a.name for a in spec.args if a.written}


@pytest.mark.parametrize("slot", SLOTS)
def test_shapes_come_from_tp2_model_profiles(slot: str) -> None:
    spec = get_slot(slot)
    for tier in TIERS:
        hidden = {c.dims["H"] for c in spec.cases(tier)}
        assert hidden == {profiles.get("qwen3-8b").hidden, profiles.get("qwen3-30b-a3b").hidden}
    tokens = {c.dims["T"] for c in spec.cases("bench")}
    if slot.endswith("rmsnorm"):  # SGLang fuses only up to FUSE_ALLREDUCE_MAX_BATCH_SIZE tokens
        assert max(tokens) == 2048 and all(c.params["eps"] == 1e-6 for c in spec.cases("bench"))
    else:
        assert max(tokens) == 8192 and all(not c.params for c in spec.cases("bench"))


@pytest.mark.parametrize("slot", SLOTS)
@pytest.mark.parametrize("world", [2, 4])
def test_rank_inputs_differ_per_rank_replicated_ones_do_not(slot: str, world: int) -> None:
    spec, c, ranks = _rank_inputs(slot, world)
    assert len(ranks) == world
    for r in ranks:
        spec.check_tensors({**r, **spec.allocate("out", c.dims, torch.bfloat16, "cpu")}, torch.bfloat16)
        assert all(bool((t != 0).any()) for t in r.values()), "all-zero input"
    for a, b in zip(ranks, ranks[1:]):
        assert not torch.equal(a["x"], b["x"]), "ranks got the same partial sums"
        for name in ("residual", "weight"):
            if name in a:
                assert torch.equal(a[name], b[name]) and a[name] is not b[name]  # replicated, not shared


def test_all_reduce_reference_is_the_sum_on_every_rank() -> None:
    spec, c, ranks = _rank_inputs("collective.all_reduce", 3, torch.float32)
    refs = spec.rank_reference(ranks, c.params)
    want = ranks[0]["x"] + ranks[1]["x"] + ranks[2]["x"]
    assert all(torch.allclose(r["out"], want, rtol=0, atol=1e-6) for r in refs)
    assert set(refs[0]) == {"out"} and refs[0]["out"].dtype == torch.float32


def test_fused_reference_matches_sum_plus_residual_then_norm_slot() -> None:
    spec, c, ranks = _rank_inputs("collective.ar_residual_rmsnorm", 2, torch.float32)
    refs = spec.rank_reference(ranks, c.params)
    resid = ranks[0]["x"] + ranks[1]["x"] + ranks[0]["residual"]
    norm = get_slot("norm.rmsnorm").reference({"x": resid, "weight": ranks[0]["weight"]}, c.params)["out"]
    for r in refs:
        assert torch.allclose(r["residual_out"], resid, atol=1e-5)
        assert torch.allclose(r["norm_out"], norm, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("slot", SLOTS)
def test_world_of_one_view_is_identity_all_reduce(slot: str) -> None:
    spec = get_slot(slot)
    c = spec.cases("verify")[0]
    one = spec.make_inputs(c, torch.float32, torch.Generator().manual_seed(1))
    ref = spec.reference(one, c.params)
    key = "out" if "out" in ref else "residual_out"
    base = one["x"] + (one["residual"] if "residual" in one else 0)
    assert torch.allclose(ref[key], base)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("slot", SLOTS)
def test_tolerance_accepts_rounding_rejects_a_dropped_rank(slot: str, dtype: str) -> None:
    spec, c, ranks = _rank_inputs(slot, 2, dtype_of(dtype))
    refs = spec.rank_reference(ranks, c.params)
    missing = spec.rank_reference(ranks[:1], c.params)[0]  # a kernel that forgot the other rank
    for name, ref in refs[0].items():
        rounded = ref.to(dtype_of(dtype))
        assert compare(rounded, ref, spec.tolerance(name, dtype)).ok
        assert not compare(missing[name].to(dtype_of(dtype)), ref, spec.tolerance(name, dtype)).ok


def test_spec_rules_for_collectives() -> None:
    spec = get_slot("collective.all_reduce")
    with pytest.raises(SlotError, match="at least 2 ranks"):
        dataclasses.replace(spec, world_sizes=(1,))
    with pytest.raises(SlotError, match="make_rank_inputs"):
        dataclasses.replace(spec, rank_reference=None)
    with pytest.raises(SlotError, match="need collective=True"):
        dataclasses.replace(spec, collective=False)
    with pytest.raises(SlotError, match="not written"):
        dataclasses.replace(spec, replicated=("x",))
    with pytest.raises(SlotError, match="reserved"):
        dataclasses.replace(spec, params=(dataclasses.replace(get_slot("norm.rmsnorm").params[0], name="group"),))
    assert not get_slot("norm.rmsnorm").collective and get_slot("norm.rmsnorm").world_sizes == ()
