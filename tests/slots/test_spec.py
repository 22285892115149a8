"""The slot ABI machinery: symbolic dims, binding live tensors, catalog invariants."""

import pytest
import torch

from cacheon_subnet.errors import SlotError
from cacheon_subnet.slots import all_slots, get_slot
from cacheon_subnet.slots.spec import TIERS, DimExpr, dtype_of

FIRST_CATALOG = {
    "norm.rmsnorm",
    "norm.fused_add_rmsnorm",
    "activation.silu_and_mul",
    "rope.neox",
    "attention.decode",
    "moe.topk_softmax",
    "moe.fused_experts",
}


def test_dim_expressions():
    assert DimExpr.parse("2*D").size({"D": 3}) == 6 and DimExpr.parse("B+1").size({"B": 4}) == 5
    assert DimExpr.parse("2*D").solve(7) is None and DimExpr.parse("B+1").solve(5) == 4
    with pytest.raises(SlotError):
        DimExpr.parse("D*2")


def test_bind_dims_reports_the_offending_arg():
    spec = get_slot("norm.rmsnorm")
    x, w, out = torch.zeros(3, 8), torch.zeros(8), torch.zeros(3, 8)
    assert spec.bind_dims({"x": x, "weight": w, "out": out}) == {"T": 3, "H": 8}
    with pytest.raises(SlotError, match="weight axis 0"):
        spec.bind_dims({"x": x, "weight": torch.zeros(9), "out": out})
    with pytest.raises(SlotError, match="rank"):
        spec.bind_dims({"x": x, "weight": w, "out": torch.zeros(24)})
    with pytest.raises(SlotError, match="dtype"):
        spec.check_tensors({"x": x, "weight": w, "out": out.double()}, torch.float32)


def test_unknown_slot_and_version():
    with pytest.raises(SlotError, match="unknown slot"):
        get_slot("norm.nope")
    with pytest.raises(SlotError, match="ABI version"):
        get_slot("norm.rmsnorm", 2)


def test_first_catalog_present():
    ids = {s.id for s in all_slots()}
    missing = FIRST_CATALOG - ids
    assert not missing, f"slots missing from the catalog: {missing}"


@pytest.mark.parametrize("spec", all_slots(), ids=lambda s: s.id)
def test_every_slot_is_well_formed(spec):
    assert spec.version >= 1 and spec.summary and spec.sglang_target
    assert any(a.written for a in spec.args)
    for tier in TIERS:
        cases = spec.cases(tier)
        assert cases, f"{spec.id} has no {tier} cases"
        assert len({c.label for c in cases}) == len(cases)
    # cheapest verify case: inputs match the ABI, never all zeros, reference covers every written arg
    case = spec.cases("verify")[0]
    act = dtype_of(spec.dtypes[0])
    g = torch.Generator().manual_seed(0)
    inputs = spec.make_inputs(case, act, g)
    outs = {
        a.name: torch.empty(a.concrete_shape(case.dims), dtype=a.torch_dtype(act))
        for a in spec.args
        if a.role in ("out", "scratch")
    }
    dims = spec.check_tensors({**inputs, **outs}, act)
    assert all(dims[k] == v for k, v in case.dims.items() if k in dims)
    for name, t in inputs.items():
        if t.is_floating_point():
            assert bool((t != 0).any()), f"{name} is all zeros"
    ref = spec.reference(inputs, case.params)
    assert set(ref) == {a.name for a in spec.args if a.written}
