"""THE dict-verdict guard: no field reachable from QualifyResult is a dict, a Mapping, Any or object.

A verdict used to travel as `detail: dict[str, Any]`, read back three times with three sets of
`.get()` key lists. The walker below follows every field's type hint from QualifyResult through
unions, Optionals, tuples and nested dataclasses, and fails on any untyped table; its broken
control shows it catches one hidden two levels down.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from enum import Enum
from typing import Any, Literal, Union

import pytest

from arena.config_sections import SPEED_METRICS
from arena.records import ArenaResult
from cacheon_subnet.records import ContributionState, QualifyResult, Role, SpeedMetric
from cacheon_subnet.validator import state
from cacheon_subnet.validator.web import stages

LEAVES = (str, int, float, bool, type(None))


def untyped_fields(root: type) -> list[str]:
    """'Record.field: hint' for every field reachable from `root` typed dict, Mapping, Any, object
    (or any other leaf that is not str/int/float/bool/None/an Enum/a dataclass)."""
    out: list[str] = []
    seen: set[type] = set()

    def walk(hint: Any, where: str) -> None:
        origin = typing.get_origin(hint)
        if hint is Any or hint is object:
            out.append(f"{where}: {hint}")
        elif origin is Literal:  # a closed set of leaf values
            return
        elif origin in (Union, types.UnionType) or origin is tuple:
            for arg in typing.get_args(hint):
                if arg is not Ellipsis:
                    walk(arg, where)
        elif origin is not None:  # dict[...], Mapping[...], list[...], ...
            out.append(f"{where}: {hint}")
        elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
            if hint in seen:
                return
            seen.add(hint)
            hints = typing.get_type_hints(hint)
            for f in dataclasses.fields(hint):
                walk(hints[f.name], f"{hint.__name__}.{f.name}")
        elif isinstance(hint, type) and issubclass(hint, Mapping | dict):
            out.append(f"{where}: {hint}")
        elif not (hint in LEAVES or (isinstance(hint, type) and issubclass(hint, Enum))):
            out.append(f"{where}: {hint} (not a record leaf)")

    walk(root, root.__name__)
    return out


def test_no_field_reachable_from_a_verdict_is_an_untyped_table():
    assert untyped_fields(QualifyResult) == []


# What an arena result keeps verbatim from the engine child (decoded by arena/engine/protocol.py,
# never re-read to decide a verdict): everything else in it is a typed record. A new untyped field
# (the identity or the setup as a dict again) turns the test below red.
ARENA_RAW = {
    "StageRecord.startup": "the child's startup records",
    "StageRecord.routes": "the child's route records",
    "StageRecord.host_timing": "the host's named timings of one engine",
    "WindowRecord.readings": "one window's clocks as the child reported them",
    "Evidence.per_rank": "fired counts a rank, as each rank reported them",
    "Evidence.routes": "route epochs a rank",
    "TimedStage.by_metric": "one typed SpeedVerdict a metric name",
    "ArenaResult.receipts": "the seam's receipts files",
    "QualityVerdict.metrics": "what the quality verdict was computed from",
    "PostCondition.detail": "the post-condition's digests and leftovers",
}


def test_an_arena_result_is_typed_except_the_engine_records_it_keeps_verbatim():
    assert {x.split(":")[0] for x in untyped_fields(ArenaResult)} == set(ARENA_RAW)


@dataclasses.dataclass(frozen=True)
class _Leaf:
    ok: bool
    extra: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class _Middle:
    leaves: tuple[_Leaf, ...] | None


@dataclasses.dataclass(frozen=True)
class _Broken:
    verdict: str
    detail: _Middle | None = None


@dataclasses.dataclass(frozen=True)
class _Each:
    a: Mapping[str, float]
    b: Any
    c: object
    d: tuple[dict, ...]
    e: list[str]


def test_the_walker_catches_a_dict_hidden_inside_nested_records():
    """Broken control: a throwaway verdict whose dict sits in a tuple inside an Optional record."""
    assert untyped_fields(_Broken) == ["_Leaf.extra: dict[str, typing.Any]"]
    assert [x.split(":")[0] for x in untyped_fields(_Each)] == [f"_Each.{k}" for k in "abcde"]


def test_the_closed_sets_match_the_code_that_speaks_them():
    """The enums are the one spelling: arena clocks, intake states, the page's plotted roles."""
    assert tuple(m.value for m in SpeedMetric) == SPEED_METRICS
    assert set(state.STATES) == set(ContributionState) and len(state.STATES) == len(ContributionState)
    assert set(state.TRANSITIONS) == set(ContributionState)
    assert set(stages.ROLES) == set(Role) - {Role.T}


@pytest.mark.parametrize("record", [QualifyResult])
def test_every_reachable_record_is_frozen(record: type) -> None:
    seen: list[type] = []

    def walk(hint: Any) -> None:
        for arg in typing.get_args(hint):
            walk(arg)
        if isinstance(hint, type) and dataclasses.is_dataclass(hint) and hint not in seen:
            seen.append(hint)
            for h in typing.get_type_hints(hint).values():
                walk(h)

    walk(record)
    assert len(seen) > 5 and [r.__name__ for r in seen if not r.__dataclass_params__.frozen] == []  # type: ignore[attr-defined]
