"""The JSON form of a typed value: one strict, reflective codec for records and messages.

Why one: every value that crosses a process or storage boundary is a frozen dataclass whose type
hints already say what each field may hold, so reading a document back through those hints
leaves no lenient hand-written decoder (a `.get()` with a default is how a missing speed figure
once read as a 1.0x "gain"). Two fronts use it: records/codec.py (what storage holds: unbounded,
exact containers) and msgcodec.py (what a pipe to contribution code carries: hostile, so every
string, list, map and nesting is bounded). Decoding refuses an unknown or missing key, a wrong
type (a bool is never an int), a non-finite number and an int outside 64 bits, naming the field's
path; encoding checks the same, so a bad value is caught where it is made, not where it is read.

Shapes: str, int, float (finite; an int reads as a float), bool, a StrEnum, `X | None`,
`tuple[X, ...]`, `Mapping[str, X]`, a frozen dataclass of those, a union of scalars (told apart by
the value's exact type) or of dataclasses (told apart by their keys), and three markers: `Json`,
`Reading`, `Document`. A bare `dict`, `Any` or `object` has no form. Field metadata (`meta`): the
JSON key when spelled otherwise than the field ("B'"), `omit` (None is an absent key), `limit`
(a string's characters, a list's or map's items), `nan` (a NaN that older code wrote reads as
None). A dataclass may list `LEGACY_KEYS`: keys older code wrote, read and dropped.
Each converter is built once from the hints and cached; a field's place is named only on error.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
from collections.abc import Callable, Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any, Union, get_args, get_origin, get_type_hints

Convert = Callable[[Any], Any]
MAX_STR = 1 << 16  # characters of a string (a traceback tail is 1500)
MAX_ITEMS = 1 << 20  # items of a list or entries of a map (a window's token ids, per prompt)
MAX_KEY = 256  # characters of a map key (argument, tag and rank names)
MAX_DEPTH = 32  # nesting of a Json value
INT_BOUND = 1 << 63
_NONE = type(None)
_KEY, _OMIT, _LIMIT, _NAN = "jsonform_key", "jsonform_omit", "jsonform_limit", "jsonform_nan"
_SCALARS = (bool, int, float, str)


@dataclasses.dataclass(frozen=True)
class Dialect:
    """How strict a front is beyond the shapes: `bounded` (the size limits above: hostile input),
    `exact` (encoding takes only a tuple for a tuple and a dict for a map: a record is immutable)."""

    bounded: bool
    exact: bool


RECORD = Dialect(bounded=False, exact=True)
MESSAGE = Dialect(bounded=True, exact=False)


if TYPE_CHECKING:  # what a checker sees of the markers below: the values they stand for
    Json = Any
    Document = dict[str, Any]
    Reading = float
else:

    class Json:
        """Marker type: any JSON value (bounded depth, size and strings), read as is."""

    class Document:
        """Marker type: a JSON object passed as is, unchecked and unbounded: what a trusted sender
        made for its own reader (the arena host's next job for its driver), never a hostile reply."""

    class Reading:
        """Marker type: a number of any value, NaN and inf included (never a bool): a reading whose
        reader judges it, such as a logprob a candidate's kernel made NaN (quality grading fails it)."""


class NoForm(TypeError):
    """A type with no JSON form (a dict, Any or object field): a programming error, found when the
    type's converter is first built."""


class Invalid(Exception):
    """What is wrong, and where: each enclosing value prepends its part of the path (".name",
    "[0]", "['key']")."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self.msg, self.path = msg, list[str]()

    def at(self, part: str) -> Invalid:
        self.path.insert(0, part)
        return self

    @property
    def where(self) -> str:
        return "".join(self.path)


def meta(key: str | None = None, omit: bool = False, limit: int | None = None, nan: bool = False) -> dict[str, Any]:
    """Field metadata (`field(metadata=meta(...))`); see the module doc."""
    out: dict[str, Any] = {_OMIT: omit, _LIMIT: limit, _NAN: nan}
    return out | ({_KEY: key} if key is not None else {})


def what(v: object) -> str:
    return "null" if v is None else f"{type(v).__name__} {v!r:.40}"


def name_of(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def is_record(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    key: str
    hint: Any
    omit: bool
    limit: int | None
    nan: bool


@functools.cache
def _fields(cls: type) -> tuple[_Field, ...]:
    hints = get_type_hints(cls)
    return tuple(
        _Field(
            f.name,
            f.metadata.get(_KEY, f.name),
            hints[f.name],
            bool(f.metadata.get(_OMIT)),
            f.metadata.get(_LIMIT),
            bool(f.metadata.get(_NAN)),
        )
        for f in dataclasses.fields(cls)
    )


@functools.cache
def keys_of(cls: type) -> tuple[frozenset[str], frozenset[str]]:
    """(the keys `cls` must have, the keys it may have: its fields' and its LEGACY_KEYS)."""
    fields = _fields(cls)
    legacy = frozenset(getattr(cls, "LEGACY_KEYS", ()))
    return frozenset(f.key for f in fields if not f.omit), frozenset(f.key for f in fields) | legacy


# -- leaves ---------------------------------------------------------------------------------


def _int(v: Any) -> int:
    if type(v) is not int:
        raise Invalid(f"{what(v)}, expected int")
    if not -INT_BOUND <= v < INT_BOUND:
        raise Invalid("an int outside 64 bits")
    return v


def finite(v: Any) -> float:
    """`v` as a finite float: an int (within 64 bits) or a float, never a bool, NaN or inf."""
    if type(v) is int:
        return float(_int(v))
    if type(v) is not float:
        raise Invalid(f"{what(v)}, expected a number")
    if not math.isfinite(v):
        raise Invalid(f"{v!r}, expected a finite number")
    return v


def _figure(v: Any) -> float:
    """A float where older code wrote NaN for "undetermined": NaN reads as None."""
    return None if type(v) is float and math.isnan(v) else finite(v)  # type: ignore[return-value]


def _bool(v: Any) -> bool:
    if type(v) is not bool:
        raise Invalid(f"{what(v)}, expected bool")
    return v


def _reading(v: Any) -> float:
    if type(v) not in (int, float):
        raise Invalid(f"{what(v)}, expected a number")
    return v if type(v) is float else _int(v)


def _document(v: Any) -> Any:
    if type(v) is not dict:
        raise Invalid(f"{what(v)}, expected an object")
    return v


def _str(limit: int | None, encoding: bool) -> Convert:
    def text(v: Any) -> str:
        if not (type(v) is str or (encoding and isinstance(v, str))):  # a str subclass (TorchVersion) writes as text
            raise Invalid(f"{what(v)}, expected str")
        if limit is not None and len(v) > limit:
            raise Invalid(f"a string of {len(v)} characters, over the {limit} allowed")
        return str(v)

    return text


def _enum(hint: type[Enum], encoding: bool) -> Convert:
    members = hint._value2member_map_
    expected = [m.value for m in hint]

    def enum(v: Any) -> Any:
        m = members.get(v) if isinstance(v, str) else None
        if m is None:
            raise Invalid(f"{what(v)}, expected one of {expected}")
        return m.value if encoding else m

    return enum


def _json(v: Any, depth: int = 0, budget: list[int] | None = None) -> Any:
    """A JSON value as is, within MAX_DEPTH levels, MAX_ITEMS nodes and MAX_STR per string."""
    budget = budget if budget is not None else [MAX_ITEMS]
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        raise Invalid(f"a JSON value over {MAX_ITEMS} nodes or {MAX_DEPTH} levels")
    if v is None or type(v) in (bool, int, float):
        return v
    if type(v) is str:
        if len(v) > MAX_STR:
            raise Invalid(f"a string of {len(v)} characters, over the {MAX_STR} allowed")
        return v
    if type(v) in (list, tuple):  # a tuple only in what this side encodes
        return [_json(x, depth + 1, budget) for x in v]
    if type(v) is dict:
        for k in v:
            if type(k) is not str or len(k) > MAX_KEY:
                raise Invalid(f"a map key {what(k)}")
        return {k: _json(x, depth + 1, budget) for k, x in v.items()}
    raise Invalid(f"{what(v)}, expected a JSON value")


# -- containers -----------------------------------------------------------------------------


def _sized(v: Any, limit: int | None, kind: str) -> None:
    if limit is not None and len(v) > limit:
        raise Invalid(f"a {kind} of {len(v)} items, over the {limit} allowed")


def _each(item: Convert, limit: int | None, encoding: bool, exact: bool) -> Convert:
    def each(v: Any) -> Any:
        ok = type(v) is tuple if encoding and exact else type(v) in (list, tuple) if encoding else type(v) is list
        if not ok:
            raise Invalid(f"{what(v)}, expected a {'tuple' if encoding and exact else 'list'}")
        _sized(v, limit, "list")
        out = []
        for i, x in enumerate(v):
            try:
                out.append(item(x))
            except Invalid as e:
                raise e.at(f"[{i}]") from None
        return out if encoding else tuple(out)

    return each


def _map(item: Convert, key: Convert, limit: int | None, encoding: bool, exact: bool) -> Convert:
    def entries(v: Any) -> dict[str, Any]:
        if not (type(v) is dict or (encoding and not exact and isinstance(v, Mapping))):
            raise Invalid(f"{what(v)}, expected a map")
        _sized(v, limit, "map")
        out = {}
        for k, x in v.items():
            try:
                out[key(k)] = item(x)
            except Invalid as e:
                raise e.at(f"[{str(k)[:40]!r}]") from None
        return out

    return entries


def _nullable(hint: Any, inner: Convert) -> Convert:
    nullable = _NONE in get_args(hint)

    def opt(v: Any) -> Any:
        if v is None:
            if nullable:
                return None
            raise Invalid(f"null, expected {name_of(hint)}")
        return inner(v)

    return opt


def _scalar_union(hint: Any, by_type: dict[Any, Convert], encoding: bool) -> Convert:
    """A union of scalars, told apart by the value's exact type (a bool is never an int)."""

    def one_of(v: Any) -> Any:
        kind = type(v) if type(v) in by_type else float if type(v) is int and float in by_type else None
        if kind is None and encoding and isinstance(v, str) and str in by_type:
            kind = str
        if kind is None:
            raise Invalid(f"{what(v)}, expected {name_of(hint)}")
        return by_type[kind](v)

    return one_of


def _record_union(hint: Any, kinds: dict[Any, Convert], encoding: bool) -> Convert:
    """A union of dataclasses: by type when encoding; by keys when decoding (the error names the
    bad field of the kind sharing the most keys when none fits)."""

    def one_of(v: Any) -> Any:
        if encoding:
            if type(v) not in kinds:
                raise Invalid(f"{type(v).__name__}, expected {name_of(hint)}")
            return kinds[type(v)](v)
        if type(v) is not dict:
            raise Invalid(f"{what(v)}, expected an object ({name_of(hint)})")
        fits = [m for m in kinds if keys_of(m)[0] <= v.keys() <= keys_of(m)[1]]
        if len(fits) > 1:
            raise Invalid(f"keys {sorted(v)} fit each of {[name_of(m) for m in fits]}")
        kind = fits[0] if fits else max(kinds, key=lambda m: len(v.keys() & keys_of(m)[1]))
        try:
            return kinds[kind](v)
        except Invalid as e:
            raise e.at(f" ({name_of(kind)})") from None

    return one_of


def _record(cls: type, encoding: bool, dialect: Dialect) -> Convert:
    plan = []
    for f in _fields(cls):
        try:
            plan.append((f, convert(f.hint, encoding, dialect, f.limit, f.nan)))
        except NoForm as e:
            raise NoForm(f"{cls.__name__}.{f.name}: {e}") from None
    allowed = keys_of(cls)[1]

    def encode(v: Any) -> dict[str, Any]:
        if type(v) is not cls:
            raise Invalid(f"{type(v).__name__}, expected {cls.__name__}")
        out: dict[str, Any] = {}
        for f, conv in plan:
            x = getattr(v, f.name)
            if x is None and f.omit:
                continue
            try:
                out[f.key] = conv(x)
            except Invalid as e:
                raise e.at(f".{f.name}") from None
        return out

    def decode(v: Any) -> Any:
        if type(v) is not dict:
            raise Invalid(f"{what(v)}, expected an object ({cls.__name__})")
        unknown = sorted(str(k)[:40] for k in v.keys() - allowed)
        if unknown:
            raise Invalid(f"unknown key(s) {unknown[:4]}").at(f".{unknown[0]}")
        kwargs: dict[str, Any] = {}
        for f, conv in plan:
            if f.key in v:
                try:
                    kwargs[f.name] = conv(v[f.key])
                except Invalid as e:
                    raise e.at(f".{f.name}") from None
            elif f.omit:
                kwargs[f.name] = None
            else:
                raise Invalid(f"missing key {f.key!r}").at(f".{f.name}")
        return cls(**kwargs)

    return encode if encoding else decode


def convert(hint: Any, encoding: bool, dialect: Dialect, limit: int | None = None, nan: bool = False) -> Convert:
    """The converter of `hint` one way (built once, cached); NoForm when `hint` has no JSON form."""
    return _build(hint, encoding, dialect, limit, nan)


@functools.cache
def _build(hint: Any, encoding: bool, dialect: Dialect, limit: int | None, nan: bool) -> Convert:
    bounded, exact = dialect.bounded, dialect.exact
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(hint) if a is not _NONE]
        if len(members) == 1:
            return _nullable(hint, convert(members[0], encoding, dialect, limit, nan))
        if all(m in _SCALARS for m in members):
            by_type = {m: convert(m, encoding, dialect, limit) for m in members}
            return _nullable(hint, _scalar_union(hint, by_type, encoding))
        if all(is_record(m) for m in members):
            kinds = {m: convert(m, encoding, dialect) for m in members}
            return _nullable(hint, _record_union(hint, kinds, encoding))
        raise NoForm(f"{name_of(hint)}: a union is of scalars only or of records only")
    if origin is tuple:
        top = limit or (MAX_ITEMS if bounded else None)
        return _each(convert(get_args(hint)[0], encoding, dialect), top, encoding, exact)
    if origin is Mapping:
        top = limit or (MAX_ITEMS if bounded else None)
        key = _str(MAX_KEY if bounded else None, encoding)
        return _map(convert(get_args(hint)[1], encoding, dialect), key, top, encoding, exact)
    if hint is Json:
        return _json
    if hint is Reading:
        return _reading
    if hint is Document:
        return _document
    if is_record(hint):
        return _record(hint, encoding, dialect)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return _enum(hint, encoding)
    if hint is str:
        return _str(limit or (MAX_STR if bounded else None), encoding)
    if hint is float:
        return _figure if nan and not encoding else finite
    if hint in (int, bool):
        return _int if hint is int else _bool
    raise NoForm(f"a field typed {name_of(hint)} has no JSON form")
