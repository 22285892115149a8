"""Strict JSON for the records that cross a process or storage boundary.

Why one reflective codec: every record is a frozen dataclass whose type hints already say what
each field may hold, so reading a document back through those hints leaves no record a lenient
hand-written decoder (a `.get()` with a default is how a missing speed figure once read as a
1.0x "gain"). Decoding refuses unknown keys, missing keys, wrong types and non-finite numbers,
and names the record and the field; encoding refuses the same, so a bad record is caught where
it is made, not where it is read. Only these shapes have a JSON form: str, bool, int, finite
float, a StrEnum, `X | None`, `tuple[X, ...]`, a frozen dataclass of those, and a union of
dataclasses told apart by their keys. A `dict`, `Mapping`, `Any` or `object` field has none.

Field metadata (`spelled`, `reading`, `FIGURE`): a JSON key spelled otherwise than the field
("B'"); a key that is absent rather than null when the value is None (a clock that did not read
a window); a figure where older code wrote NaN for "undetermined" (read as None, never written).
A record may list `LEGACY_KEYS`: keys older code wrote that are read and dropped.

Each type's converter is built once from its hints and cached (the web snapshot re-encodes every
stored verdict each pass); a field's place is named only when something is wrong.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
from collections.abc import Callable
from enum import Enum
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from cacheon_subnet.errors import CacheonError

T = TypeVar("T")
Convert = Callable[[Any], Any]
_NONE = type(None)
_JSON, _OMIT, _NAN = "json_key", "omit_none", "legacy_nan"


class RecordError(CacheonError, ValueError):
    """A document (or a record) that is not what its type says; the message names record and field."""


class _Bad(Exception):
    """What is wrong, and where: each enclosing record or list prepends its part of the path."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self.msg, self.path = msg, list[str]()

    def at(self, part: str) -> _Bad:
        self.path.insert(0, part)
        return self

    def error(self, root: str) -> RecordError:
        return RecordError(f"{root}{''.join(self.path)}: {self.msg}")


def spelled(key: str) -> dict[str, str]:
    """Field metadata (`field(metadata=spelled("B'"))`): the field's JSON key is `key`."""
    return {_JSON: key}


# Field metadata (`field(metadata=FIGURE)`): a required `float | None` where None means
# undetermined; a NaN that older code wrote there reads as None (and is never written).
FIGURE = {_NAN: True}


def reading() -> Any:
    """An optional field (default None): None is written as an absent key, an absent key reads as None."""
    return dataclasses.field(default=None, metadata={_OMIT: True})


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    key: str
    hint: Any
    omit: bool  # None <-> absent key
    nan: bool  # a stored NaN reads as None


@functools.cache
def _fields(cls: type) -> tuple[_Field, ...]:
    hints = get_type_hints(cls)
    return tuple(
        _Field(f.name, f.metadata.get(_JSON, f.name), hints[f.name], bool(f.metadata.get(_OMIT)), bool(f.metadata.get(_NAN)))
        for f in dataclasses.fields(cls)
    )


def _is_union(hint: Any) -> bool:
    return get_origin(hint) in (Union, types.UnionType)


def _is_record(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _name(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def _what(value: object) -> str:
    return "null" if value is None else f"{type(value).__name__} {value!r:.60}"


def finite(value: object, where: str) -> float:
    """`value` as a finite float: an int or float, never a bool, NaN or inf."""
    try:
        return _finite(value)
    except _Bad as e:
        raise e.error(where) from None


def _finite(v: Any) -> float:
    if type(v) is float:
        if math.isfinite(v):
            return v
        raise _Bad(f"{v!r}, expected a finite number")
    if type(v) is int:
        return float(v)
    raise _Bad(f"{_what(v)}, expected a finite number")


def _scalar(hint: Any, encoding: bool) -> Convert:
    """The converter of a leaf type (the same both ways, but for an enum)."""
    if isinstance(hint, type) and issubclass(hint, Enum):
        members = hint._value2member_map_
        expected = [m.value for m in hint]

        def enum(v: Any) -> Any:
            m = members.get(v) if isinstance(v, str) else None
            if m is None:
                raise _Bad(f"{'null' if v is None else repr(v)[:60]}, expected one of {expected}")
            return m.value if encoding else m

        return enum
    if hint is float:
        return _finite
    if hint in (int, bool, str):

        def exact(v: Any) -> Any:
            if type(v) is hint or (hint is str and isinstance(v, str) and encoding):
                return str(v) if hint is str else v
            raise _Bad(f"{_what(v)}, expected {hint.__name__}")

        return exact
    raise _Bad(f"a field typed {_name(hint)} has no JSON form (records hold no dicts)")


def _nullable(hint: Any, inner: Convert) -> Convert:
    nullable = _NONE in get_args(hint)

    def opt(v: Any) -> Any:
        if v is None:
            if nullable:
                return None
            raise _Bad(f"null, expected {_name(hint)}")
        return inner(v)

    return opt


def _each(item: Convert, encoding: bool) -> Convert:
    def each(v: Any) -> Any:
        if type(v) is not (tuple if encoding else list):
            raise _Bad(f"{type(v).__name__}, expected a {'tuple' if encoding else 'list'}")
        out = []
        for i, x in enumerate(v):
            try:
                out.append(item(x))
            except _Bad as e:
                raise e.at(f"[{i}]") from None
        return out if encoding else tuple(out)

    return each


def _plan(cls: type, build: Callable[[_Field], Convert]) -> list[tuple[_Field, Convert]]:
    plan = []
    for f in _fields(cls):
        try:
            plan.append((f, build(f)))
        except _Bad as e:
            raise e.at(f".{f.name}") from None
    return plan


# -- encoding -------------------------------------------------------------------------------


@functools.cache
def _encoder(hint: Any) -> Convert:
    if _is_union(hint):
        members = [a for a in get_args(hint) if a is not _NONE]
        if len(members) == 1:
            return _nullable(hint, _encoder(members[0]))
        kinds = {m: _encoder(m) for m in members if _is_record(m)}

        def one_of(v: Any) -> Any:
            if type(v) not in kinds:
                raise _Bad(f"{type(v).__name__}, expected {_name(hint)}")
            return kinds[type(v)](v)

        return _nullable(hint, one_of)
    if get_origin(hint) is tuple:
        return _each(_encoder(get_args(hint)[0]), encoding=True)
    if _is_record(hint):
        plan = _plan(hint, lambda f: _encoder(f.hint))

        def record(v: Any) -> dict[str, Any]:
            if type(v) is not hint:
                raise _Bad(f"{type(v).__name__}, expected {hint.__name__}")
            out: dict[str, Any] = {}
            for f, convert in plan:
                x = getattr(v, f.name)
                if x is None and f.omit:
                    continue
                try:
                    out[f.key] = convert(x)
                except _Bad as e:
                    raise e.at(f".{f.name}") from None
            return out

        return record
    return _scalar(hint, encoding=True)


def to_json(record: object) -> dict[str, Any]:
    """The JSON object of a record (checked field by field: see the module doc)."""
    kind: Any = type(record)
    if not _is_record(kind):
        raise RecordError(f"{kind.__name__} is not a record")
    try:
        out: dict[str, Any] = _encoder(kind)(record)
    except _Bad as e:
        raise e.error(kind.__name__) from None
    return out


def dumps(record: object) -> str:
    """Canonical text of a record (sorted keys, no NaN): what storage holds."""
    return json.dumps(to_json(record), sort_keys=True, allow_nan=False)


# -- decoding -------------------------------------------------------------------------------


@functools.cache
def _keys(cls: type) -> tuple[frozenset[str], frozenset[str]]:
    """(the keys `cls` must have, the keys it may have: its fields' and its LEGACY_KEYS)."""
    fields = _fields(cls)
    legacy = frozenset(getattr(cls, "LEGACY_KEYS", ()))
    return frozenset(f.key for f in fields if not f.omit), frozenset(f.key for f in fields) | legacy


@functools.cache
def _decoder(hint: Any, nan_is_none: bool = False) -> Convert:
    if _is_union(hint):
        members = [a for a in get_args(hint) if a is not _NONE]
        if len(members) == 1:
            return _nullable(hint, _decoder(members[0], nan_is_none))
        return _nullable(hint, _one_of(hint, members))
    if get_origin(hint) is tuple:
        return _each(_decoder(get_args(hint)[0]), encoding=False)
    if _is_record(hint):
        return _record(hint)
    if nan_is_none and hint is float:

        def figure(v: Any) -> float | None:
            return None if type(v) is float and math.isnan(v) else _finite(v)

        return figure
    return _scalar(hint, encoding=False)


def _one_of(hint: Any, members: list[Any]) -> Convert:
    """A union of records: the one whose keys the document has (its error names the bad field
    when none fits: the kind sharing the most keys)."""

    def one_of(v: Any) -> Any:
        if type(v) is not dict:
            raise _Bad(f"{type(v).__name__}, expected an object ({_name(hint)})")
        fits = [m for m in members if _keys(m)[0] <= v.keys() <= _keys(m)[1]]
        if len(fits) > 1:
            raise _Bad(f"keys {sorted(v)} fit each of {[_name(m) for m in fits]}")
        kind = fits[0] if fits else max(members, key=lambda m: len(v.keys() & _keys(m)[1]))
        try:
            return _decoder(kind)(v)
        except _Bad as e:
            raise e.at(f" ({_name(kind)})") from None

    return one_of


def _record(cls: type) -> Convert:
    plan = _plan(cls, lambda f: _decoder(f.hint, f.nan))
    allowed = _keys(cls)[1]

    def record(v: Any) -> Any:
        if type(v) is not dict:
            raise _Bad(f"{type(v).__name__}, expected an object ({cls.__name__})")
        if not v.keys() <= allowed:
            raise _Bad(f"unknown key(s) {sorted(map(str, v.keys() - allowed))}")
        kwargs: dict[str, Any] = {}
        for f, convert in plan:
            if f.key in v:
                try:
                    kwargs[f.name] = convert(v[f.key])
                except _Bad as e:
                    raise e.at(f".{f.name}") from None
            elif f.omit:
                kwargs[f.name] = None
            else:
                raise _Bad(f"missing key {f.key!r}")
        return cls(**kwargs)

    return record


def decode(hint: Any, doc: object, where: str) -> Any:
    """A value of type `hint` (a union of records, say) from a parsed JSON document."""
    try:
        return _decoder(hint)(doc)
    except _Bad as e:
        raise e.error(where) from None


def from_json(cls: type[T], doc: object) -> T:
    """The record `cls` from a parsed JSON document; RecordError names what is wrong."""
    out: T = decode(cls, doc, cls.__name__)
    return out


def loads(cls: type[T], text: str | bytes) -> T:
    try:
        doc = json.loads(text)
    except (TypeError, ValueError) as e:
        raise RecordError(f"{cls.__name__}: not JSON ({e})") from None
    return from_json(cls, doc)
