"""Invariants of SEAM_ADAPTERS: one closed vocabulary, fixed gates, rows the canary can check."""

from __future__ import annotations

import re

import pytest

from cacheon_subnet.slots.catalog import catalog
from seams.table import (
    BINDINGS,
    HOOK_TARGETS,
    PINNED,
    PLUGIN_GROUP,
    SEAM_ADAPTERS,
    adapters_for_slot,
    by_binding,
    normalize_bindings,
    seam_environment,
)

DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"


def test_bindings_unique_and_canonical() -> None:
    names = [a.binding for a in SEAM_ADAPTERS]
    assert len(names) == len(set(names))
    assert BINDINGS == tuple(sorted(names))
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", b) for b in names)


def test_adapter_slots_exist_in_catalog() -> None:
    known = set(catalog())
    for a in SEAM_ADAPTERS:
        assert a.slots and set(a.slots) <= known, f"{a.binding}: unknown slot(s) {set(a.slots) - known}"
        assert all(a in adapters_for_slot(s) for s in a.slots)


def test_env_gates_fixed_and_unique() -> None:
    gates = [a.env_gate for a in SEAM_ADAPTERS]
    assert len(gates) == len(set(gates))
    assert all(g == f"CACHEON_SEAM_{a.binding.upper()}" for g, a in zip(gates, SEAM_ADAPTERS, strict=True))
    assert [by_binding(a.binding).env_gate for a in SEAM_ADAPTERS] == gates  # derived, not stored: cannot drift


def test_rows_are_checkable_by_the_canary() -> None:
    for a in SEAM_ADAPTERS:
        assert re.fullmatch(DOTTED, a.module) and re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)?", a.symbol), a
        assert a.params and len(set(a.params)) == len(a.params), f"{a.binding}: duplicate params"
        assert ("." in a.symbol) == (a.params[0] == "self"), f"{a.binding}: methods list self, functions do not"
        assert a.module.split(".")[0] in a.requires and "sglang" in a.requires
        assert a.patch_points and all(re.fullmatch(DOTTED + ":" + DOTTED, p) for p in a.patch_points)
        assert re.fullmatch(r"seams\.adapters\.\w+:\w+", a.install)
    assert all(re.fullmatch(DOTTED + ":" + DOTTED, t) for t in HOOK_TARGETS)
    assert PLUGIN_GROUP == "sglang.srt.plugins" and PINNED == "0.5.13.post1"


@pytest.mark.parametrize(
    "bad, why",
    [
        (["nope"], "unknown seam binding"),
        (["norm", "norm"], "requested twice"),
        (["Norm"], "not canonical"),
        ([" norm"], "not canonical"),
        (["norm "], "not canonical"),
    ],
)
def test_normalize_bindings_rejects(bad: list[str], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        normalize_bindings(bad)


def test_normalize_bindings_sorts() -> None:
    assert normalize_bindings(list(reversed(BINDINGS))) == BINDINGS
    assert normalize_bindings([]) == ()


@pytest.mark.parametrize("selected", [(), ("norm",), BINDINGS])
def test_seam_environment_sets_every_gate(selected: tuple[str, ...]) -> None:
    env = seam_environment(selected)
    assert set(env) == {a.env_gate for a in SEAM_ADAPTERS}
    assert all(env[a.env_gate] == ("1" if a.binding in selected else "0") for a in SEAM_ADAPTERS)


def test_seam_environment_rejects_unknown() -> None:
    with pytest.raises(ValueError):
        seam_environment(("norm", "bogus"))
