"""seams.dispatch.Candidate.eligible reads a candidate's dim constraints through the manifest's own
DimConstraint.allows (bundle/manifest.py), not a copy of it; the answers are the ones the seam's
own copy gave (kept below as the reference) for every rule shape a sealed tree can hold."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import pytest
import torch

from cacheon_subnet.bundle.manifest import DimConstraint
from seams.dispatch import Candidate, dim_constraint

BF16 = torch.bfloat16
RULES: tuple[Mapping[str, Any], ...] = (
    {},
    {"min": 16},
    {"max": 64},
    {"min": 16, "max": 64},
    {"multiple_of": 8},
    {"multiple_of": 8, "min": 16},
    {"in": [32, 64, 128]},
    {"in": []},
    {"min": 0, "max": 0},
    {"multiple_of": 1, "in": [7]},
)
VALUES = (0, 1, 7, 8, 15, 16, 32, 60, 64, 65, 128, 4096)


def _old_eligible(constraints: tuple[tuple[str, Mapping[str, Any]], ...], dims: Mapping[str, int]) -> bool:
    """The seam's own copy of the check, before it used DimConstraint.allows (the reference)."""
    for dim, rule in constraints:
        v = dims.get(dim)
        if v is None:
            continue
        if ("min" in rule and v < rule["min"]) or ("max" in rule and v > rule["max"]):
            return False
        if "multiple_of" in rule and v % rule["multiple_of"]:
            return False
        if "in" in rule and v not in rule["in"]:
            return False
    return True


def _cand(constraints: tuple[tuple[str, Mapping[str, Any]], ...]) -> Candidate:
    return Candidate("norm.rmsnorm", "v", "pkg", (BF16,), constraints, lambda **kw: None)


@pytest.mark.parametrize("rule", RULES, ids=[str(r) for r in RULES])
def test_eligible_answers_as_the_seams_own_copy_did(rule: Mapping[str, Any]) -> None:
    two = (("H", rule), ("T", {"max": 64}))
    cand = _cand(two)
    for h, t in itertools.product(VALUES, VALUES):
        for dims in ({"H": h, "T": t}, {"H": h}, {"T": t}, {}):  # a dim the call did not bind is not checked
            assert cand.eligible(dims, BF16) == _old_eligible(two, dims), (rule, dims)
    assert not cand.eligible({"H": 64, "T": 1}, torch.float16)  # undeclared dtype: stock, whatever the dims


def test_the_rows_are_the_manifests_own_constraints() -> None:
    cand = _cand((("H", {"min": 16, "multiple_of": 8}), ("T", {"in": [1, 2]})))
    assert cand.limits == (DimConstraint("H", min=16, multiple_of=8), DimConstraint("T", one_of=(1, 2)))
    assert dim_constraint("H", {"in": []}).one_of == ()  # empty: allows nothing (never written by engine_tree)
