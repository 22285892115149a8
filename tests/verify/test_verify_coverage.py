"""Verify's coverage for a fixed seed is what it was before session 13's screening rework (issue 30
item 1): the same cases, shapes, dtypes, trials of every kind and calls (graph replays counted).

The expected files under tests/verify/coverage_before/ were printed by scripts/verify_coverage.py from
main c7cdecf's own code, before any change (2026-12-04; c7cdecf had no `op_plan`, so the script ran
with a replica of c7cdecf's check_op planning and of the rng draws its OpTrials made while running,
and that replica was checked against c7cdecf's real OpTrials with an honest in-process worker:
the same calls and graph replay counts for attention.decode and norm.rmsnorm, seeds 1-3). The
rework draws inputs ahead on host threads; it must change none of this.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
import torch

from cacheon_subnet.slots import all_slots, get_slot
from cacheon_subnet.slots.gen import seed_generator
from cacheon_subnet.verify.opplan import arg_rows
from cacheon_subnet.verify.trials import input_rows, twin_rows

REPO = Path(__file__).resolve().parents[2]
BEFORE = Path(__file__).parent / "coverage_before"
sys.path.insert(0, str(REPO / "scripts"))

CASES = [  # (expected file, bundle, seed, device)
    ("attention.decode-dense-seed1.json", "examples/attention.decode", 1, "cuda"),
    ("attention.decode-dense-seed2.json", "examples/attention.decode", 2, "cuda"),
    ("attention.decode-dense-seed3.json", "examples/attention.decode", 3, "cuda"),
    ("attention.decode-dense-seed1-cpu.json", "examples/attention.decode", 1, "cpu"),
    ("norm.rmsnorm-dense-seed1.json", "examples/norm.rmsnorm", 1, "cuda"),
]


@pytest.mark.parametrize("name,bundle,seed,device", CASES)
def test_coverage_is_unchanged_for_a_fixed_seed(name, bundle, seed, device):
    from verify_coverage import coverage

    got = coverage(bundle, str(REPO / "configs/arena/dense.toml"), seed, device)
    want = json.loads((BEFORE / name).read_text())
    assert got["totals"] == want["totals"]
    for g, w in zip(got["ops"], want["ops"], strict=True):
        assert g["cases"] == w["cases"], "cases, shapes or dtypes changed"
        assert g["by_case"] == w["by_case"], "trials or calls per (case, dtype) changed"
        assert g["trials"] == w["trials"] and g["calls"] == w["calls"]


def test_the_dense_screen_of_attention_decode_keeps_its_whole_coverage():
    """The numbers docs/benchmarks.md records (session 13), as a readable floor."""
    want = json.loads((BEFORE / "attention.decode-dense-seed1.json").read_text())
    assert want["totals"] == {"calls": 411, "case_dtypes": 35, "cases": 20, "ops": 1, "trials": 342}
    assert want["ops"][0]["trials"] == {"compile": 2, "fresh": 141, "graph": 16, "pair": 70, "twin": 113}


@pytest.mark.parametrize("spec", all_slots(), ids=lambda s: s.id)
def test_twin_rows_are_drawn_from_the_shapes_every_generator_makes(spec):
    """opplan draws a twin's rows from the slot's argument specs before any input exists; the
    draws match the old in-place ones only if every generator makes its read inputs in argument
    order with those shapes and kinds (the rng's consumption depends on each row count)."""
    for dtype in spec.dtypes:
        case = spec.cases("verify")[0]
        made = spec.make_inputs(case, getattr(torch, dtype), seed_generator(1))
        read = {k: v for k, v in made.items() if spec.arg(k).role in ("in", "inout")}
        assert input_rows(read) == arg_rows(spec, case, dtype)
        a, b = random.Random(5), random.Random(5)
        assert twin_rows(input_rows(read), a) == twin_rows(arg_rows(spec, case, dtype), b)
        assert a.random() == b.random()  # the same draws consumed


def test_a_control_plan_with_one_more_twin_row_draw_changes_the_coverage(monkeypatch):
    """Broken control: draw one extra rng value per twin (as a reordered or extra in-place draw
    would) and the recorded coverage of the dense screen no longer matches."""
    from verify_coverage import coverage

    from cacheon_subnet.verify import opplan

    real = opplan.twin_rows

    def shifted(inputs, rng):
        rng.random()
        return real(inputs, rng)

    monkeypatch.setattr(opplan, "twin_rows", shifted)
    got = coverage("examples/attention.decode", str(REPO / "configs/arena/dense.toml"), 1, "cuda")
    want = json.loads((BEFORE / "attention.decode-dense-seed1.json").read_text())
    assert got["ops"][0]["by_case"] != want["ops"][0]["by_case"]
    assert get_slot("attention.decode").id == got["ops"][0]["slot"]
