"""The shared reflective codec's two dialects (records: storage; messages: a hostile pipe)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from cacheon_subnet.jsonform import MESSAGE, RECORD, Invalid, NoForm, convert, meta


@dataclass(frozen=True)
class A:
    x: int
    tag: str = field(metadata=meta(key="T"))


@dataclass(frozen=True)
class B:
    y: float | None = field(metadata=meta(nan=True))
    note: str | None = field(default=None, metadata=meta(omit=True))


@dataclass(frozen=True)
class Holder:
    items: tuple[A | B, ...]
    table: Mapping[str, int | str]


def _dec(hint, doc, dialect=MESSAGE):
    return convert(hint, False, dialect)(doc)


def _enc(hint, value, dialect=MESSAGE):
    return convert(hint, True, dialect)(value)


def test_round_trip_and_a_union_of_records_is_told_apart_by_its_keys():
    h = Holder((A(1, "a"), B(2.0)), {"k": 3, "s": "v"})
    doc = _enc(Holder, h)
    assert doc == {"items": [{"x": 1, "T": "a"}, {"y": 2.0}], "table": {"k": 3, "s": "v"}}
    assert _dec(Holder, doc) == h
    with pytest.raises(Invalid) as e:
        _dec(Holder, {"items": [{"x": 1, "T": "a", "y": 1.0}], "table": {}})
    assert (e.value.where, e.value.msg) == (".items[0] (A).y", "unknown key(s) ['y']"), e.value  # the nearest kind


def test_a_legacy_nan_reads_as_none_only_where_marked():
    assert _dec(B, {"y": math.nan}) == B(None)
    with pytest.raises(Invalid, match="finite"):
        _dec(tuple[float, ...], [math.nan])  # an unmarked float: NaN is refused


@pytest.mark.parametrize(
    "hint, doc, words",
    [
        (A, {"x": True, "T": "a"}, "expected int"),  # a bool is never an int
        (A, {"x": 2**63, "T": "a"}, "outside 64 bits"),
        (A, {"x": 1}, "missing key 'T'"),
        (A, {"x": 1, "T": "a", "z": 0}, "unknown key(s) ['z']"),
        (Mapping[str, int | str], {"k": 1.5}, "expected int | str"),
        (tuple[int, ...], (1, 2), "expected a list"),  # JSON has no tuple: a decoded list only
    ],
)
def test_decoding_refuses_each_wrong_shape_by_name(hint, doc, words):
    with pytest.raises(Invalid) as e:
        _dec(hint, doc)
    assert words in e.value.msg, e.value.msg


def test_only_the_message_dialect_bounds_sizes():
    long = "x" * (1 << 17)
    assert _dec(str, long, RECORD) == long
    with pytest.raises(Invalid, match="over the 65536 allowed"):
        _dec(str, long, MESSAGE)


def test_only_the_record_dialect_demands_exact_containers_when_encoding():
    assert _enc(tuple[int, ...], [1, 2], MESSAGE) == [1, 2]
    with pytest.raises(Invalid, match="expected a tuple"):
        _enc(tuple[int, ...], [1, 2], RECORD)


@pytest.mark.parametrize("hint", [dict, A | int, object])
def test_a_type_with_no_json_form_is_refused_when_its_converter_is_built(hint):
    with pytest.raises(NoForm):
        convert(hint, False, RECORD)
