"""Strict JSON for the messages on a pipe to a process that runs contribution code.

Why: the verify worker imports the bundle and an engine's scheduler ranks run it, so what comes
back over those pipes is hostile input. Each pipe keeps its messages in one module (verify/
protocol.py, arena/engine/protocol.py; as SGLang's managers/io_struct.py); this is their codec. A
message is a frozen dataclass with a ClassVar `TAG`; its `Family` tells the kinds apart by one key
("type", "op"). Decoding refuses an unknown kind, an unknown or missing key, a wrong type (a bool
is not an int), a non-finite number, an int outside 64 bits and a string, list or map over its
bound, naming kind and field; encoding checks the same, so a bad message is caught where made.

Shapes: str, int, float (finite), bool, a StrEnum, a union of those scalars, `X | None`,
`tuple[X, ...]`, `Mapping[str, X]` (unlike records/codec.py: messages carry maps keyed by argument
names), a frozen dataclass of those, and three markers: `Json`, `Reading`, `Document`. Field
metadata: `absent()` (the key may be missing; None is not written) and `bound(n)`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
from collections.abc import Callable, Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeVar, Union, get_args, get_origin, get_type_hints

T = TypeVar("T")
Convert = Callable[[Any], Any]
MAX_STR = 1 << 16  # characters of a string (a traceback tail is 1500)
MAX_ITEMS = 1 << 20  # items of a list or entries of a map (a window's token ids, per prompt)
MAX_KEY = 256  # characters of a map key (argument, tag and rank names)
MAX_DEPTH = 32  # nesting of a Json value
INT_BOUND = 1 << 63
_NONE = type(None)
_OMIT, _LIMIT = "msg_absent", "msg_limit"
_SCALARS = (bool, int, float, str)


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


def absent(limit: int | None = None) -> Any:
    """An optional field: the key may be missing (or null); None is not written."""
    return dataclasses.field(default=None, metadata={_OMIT: True, _LIMIT: limit})


def bound(limit: int) -> dict[str, int]:
    """Field metadata (`field(metadata=bound(n))`): the field's string, list or map holds at most
    `limit` characters or items."""
    return {_LIMIT: limit}


class _Bad(Exception):
    """What is wrong and where; each enclosing message, list or map prepends its part of the path."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self.msg, self.path = msg, list[str]()

    def at(self, part: str) -> _Bad:
        self.path.insert(0, part)
        return self


def _what(v: object) -> str:
    return "null" if v is None else f"{type(v).__name__} {v!r:.40}"


def _name(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    hint: Any
    omit: bool
    limit: int | None


@functools.cache
def _fields(cls: type) -> tuple[_Field, ...]:
    hints = get_type_hints(cls)
    return tuple(
        _Field(f.name, hints[f.name], bool(f.metadata.get(_OMIT)), f.metadata.get(_LIMIT)) for f in dataclasses.fields(cls)
    )


def _str(limit: int | None, encoding: bool) -> Convert:
    top = limit or MAX_STR

    def text(v: Any) -> str:
        if not (type(v) is str or (encoding and isinstance(v, str))):
            raise _Bad(f"{_what(v)}, expected str")
        if len(v) > top:
            raise _Bad(f"a string of {len(v)} characters, over the {top} allowed")
        return str(v)

    return text


def _int(v: Any) -> int:
    if type(v) is not int:
        raise _Bad(f"{_what(v)}, expected int")
    if not -INT_BOUND <= v < INT_BOUND:
        raise _Bad("an int outside 64 bits")
    return v


def _float(v: Any) -> float:
    if type(v) is int:
        return _int(v)
    if type(v) is not float:
        raise _Bad(f"{_what(v)}, expected a number")
    if not math.isfinite(v):
        raise _Bad(f"{v!r}, expected a finite number")
    return v


def _bool(v: Any) -> bool:
    if type(v) is not bool:
        raise _Bad(f"{_what(v)}, expected bool")
    return v


def _reading(v: Any) -> float:
    if type(v) not in (int, float):
        raise _Bad(f"{_what(v)}, expected a number")
    return v if type(v) is float else _int(v)


def _document(v: Any) -> Any:
    if type(v) is not dict:
        raise _Bad(f"{_what(v)}, expected an object")
    return v


def _enum(hint: type[Enum], encoding: bool) -> Convert:
    members = hint._value2member_map_
    expected = [m.value for m in hint]

    def enum(v: Any) -> Any:
        m = members.get(v) if isinstance(v, str) else None
        if m is None:
            raise _Bad(f"{_what(v)}, expected one of {expected}")
        return m.value if encoding else m

    return enum


def _scalar_union(hint: Any, members: list[Any], limit: int | None, encoding: bool) -> Convert:
    """A union of scalars, told apart by the value's exact type (a bool is never an int)."""
    by_type = {m: _convert(m, limit, encoding) for m in members}

    def one_of(v: Any) -> Any:
        kind = type(v) if type(v) in by_type else float if type(v) is int and float in by_type else None
        if kind is None and encoding and isinstance(v, str) and str in by_type:
            kind = str  # a str subclass (torch's TorchVersion) is written as its text
        if kind is None:
            raise _Bad(f"{_what(v)}, expected {_name(hint)}")
        return by_type[kind](v)

    return one_of


def _json(v: Any, depth: int = 0, budget: list[int] | None = None) -> Any:
    """A JSON value as is, within MAX_DEPTH levels, MAX_ITEMS nodes and MAX_STR per string."""
    budget = budget if budget is not None else [MAX_ITEMS]
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        raise _Bad(f"a JSON value over {MAX_ITEMS} nodes or {MAX_DEPTH} levels")
    if v is None or type(v) in (bool, int, float):
        return v
    if type(v) is str:
        if len(v) > MAX_STR:
            raise _Bad(f"a string of {len(v)} characters, over the {MAX_STR} allowed")
        return v
    if type(v) in (list, tuple):  # a tuple only in what this side encodes
        return [_json(x, depth + 1, budget) for x in v]
    if type(v) is dict:
        for k in v:
            if type(k) is not str or len(k) > MAX_KEY:
                raise _Bad(f"a map key {_what(k)}")
        return {k: _json(x, depth + 1, budget) for k, x in v.items()}
    raise _Bad(f"{_what(v)}, expected a JSON value")


def _sized(v: Any, limit: int | None, what: str) -> None:
    top = limit or MAX_ITEMS
    if len(v) > top:
        raise _Bad(f"a {what} of {len(v)} items, over the {top} allowed")


def _each(item: Convert, limit: int | None, encoding: bool) -> Convert:
    def each(v: Any) -> Any:
        if not (type(v) is list or (encoding and type(v) is tuple)):
            raise _Bad(f"{_what(v)}, expected a list")
        _sized(v, limit, "list")
        out = []
        for i, x in enumerate(v):
            try:
                out.append(item(x))
            except _Bad as e:
                raise e.at(f"[{i}]") from None
        return out if encoding else tuple(out)

    return each


def _map(item: Convert, limit: int | None, encoding: bool) -> Convert:
    key = _str(MAX_KEY, encoding)

    def entries(v: Any) -> dict[str, Any]:
        if not (type(v) is dict or (encoding and isinstance(v, Mapping))):
            raise _Bad(f"{_what(v)}, expected a map")
        _sized(v, limit, "map")
        out = {}
        for k, x in v.items():
            try:
                out[key(k)] = item(x)
            except _Bad as e:
                raise e.at(f"[{str(k)[:40]!r}]") from None
        return out

    return entries


@functools.cache
def _convert(hint: Any, limit: int | None, encoding: bool) -> Convert:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(hint) if a is not _NONE]
        if len(members) > 1 and any(m not in _SCALARS for m in members):
            raise TypeError(f"{_name(hint)}: only scalars may share a union")
        inner = _convert(members[0], limit, encoding) if len(members) == 1 else _scalar_union(hint, members, limit, encoding)
        nullable = _NONE in get_args(hint)

        def opt(v: Any) -> Any:
            if v is None:
                if nullable:
                    return None
                raise _Bad(f"null, expected {_name(hint)}")
            return inner(v)

        return opt
    if origin is tuple:
        return _each(_convert(get_args(hint)[0], None, encoding), limit, encoding)
    if origin is Mapping:
        return _map(_convert(get_args(hint)[1], None, encoding), limit, encoding)
    if hint is Json:
        return _json
    if hint is Reading:
        return _reading
    if hint is Document:
        return _document
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _record(hint, encoding)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return _enum(hint, encoding)
    if hint is str:
        return _str(limit, encoding)
    if hint in (int, float, bool):
        return {int: _int, float: _float, bool: _bool}[hint]
    raise TypeError(f"{_name(hint)} has no message form")


def _top(kind: Any, encoding: bool) -> Convert:
    """A message type's converter (built once, cached)."""
    return _convert(kind, None, encoding)


def _record(cls: type, encoding: bool) -> Convert:
    plan = [(f, _convert(f.hint, f.limit, encoding)) for f in _fields(cls)]
    names = frozenset(f.name for f in _fields(cls))

    def record(v: Any) -> Any:
        if encoding:
            if type(v) is not cls:
                raise _Bad(f"{type(v).__name__}, expected {cls.__name__}")
            out: dict[str, Any] = {}
            for f, convert in plan:
                x = getattr(v, f.name)
                if x is None and f.omit:
                    continue
                try:
                    out[f.name] = convert(x)
                except _Bad as e:
                    raise e.at(f.name) from None
            return out
        if type(v) is not dict:
            raise _Bad(f"{_what(v)}, expected an object")
        unknown = sorted(str(k)[:40] for k in v.keys() - names)
        if unknown:
            raise _Bad(f"unknown key(s) {unknown[:4]}").at(unknown[0])
        kwargs: dict[str, Any] = {}
        for f, convert in plan:
            if f.name in v:
                try:
                    kwargs[f.name] = convert(v[f.name])
                except _Bad as e:
                    raise e.at(f.name) from None
            elif f.omit:
                kwargs[f.name] = None
            else:
                raise _Bad("missing").at(f.name)
        return cls(**kwargs)

    return record


def encode(msg: object, error: Callable[[str, str, str], Exception]) -> dict[str, Any]:
    """The wire dict of an untagged message (one whose kind the pipe's position says)."""
    kind = type(msg)
    try:
        out: dict[str, Any] = _top(kind, True)(msg)
    except _Bad as e:
        raise _error(error, kind.__name__, e) from None
    return out


def decode(kind: type[T], doc: object, error: Callable[[str, str, str], Exception], name: str = "") -> T:
    """The untagged message `kind` from `doc`; `error(name, field, detail)` when it is not one."""
    try:
        msg: T = _top(kind, False)(doc)
    except _Bad as e:
        raise _error(error, name or kind.__name__, e) from None
    return msg


def _tag(kind: Any) -> str:
    """A message kind's tag (its ClassVar TAG)."""
    return str(kind.TAG)


def _error(error: Callable[[str, str, str], Exception], kind: str, e: _Bad) -> Exception:
    field = "".join(p if p.startswith("[") else f".{p}" for p in e.path).lstrip(".")
    return error(kind, field or "-", e.msg)


@dataclasses.dataclass(frozen=True)
class Family:
    """The messages of one pipe direction, told apart by `tag`. `error(kind, field, detail)` is
    the pipe's own error type (so its callers' existing handlers catch it)."""

    tag: str
    kinds: tuple[type, ...]
    error: Callable[[str, str, str], Exception]
    by_tag: Mapping[str, type] = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_tag", {_tag(k): k for k in self.kinds})
        for k in self.kinds:  # every converter built now: a field with no message form fails at import
            _top(k, True)
            _top(k, False)

    def encode(self, msg: object) -> dict[str, Any]:
        """The wire dict of `msg`: its tag first, then its fields in declaration order."""
        kind = type(msg)
        if kind not in self.by_tag.values():
            raise self.error(kind.__name__, self.tag, "not a message of this pipe")
        try:
            body = _top(kind, True)(msg)
        except _Bad as e:
            raise _error(self.error, _tag(kind), e) from None
        return {self.tag: _tag(kind), **body}

    def kind_of(self, doc: object) -> type | None:
        """The message kind `doc` claims to be (None: none of this pipe's), before any check."""
        tag = doc.get(self.tag) if type(doc) is dict else None
        return self.by_tag.get(tag) if type(tag) is str else None

    def decode(self, doc: object, *expect: type[T]) -> T:
        """The message `doc` holds, one of `expect` (default: any of this pipe's)."""
        if type(doc) is not dict:
            raise self.error("?", self.tag, f"{_what(doc)}, expected an object")
        tag = doc.get(self.tag)
        kind = self.by_tag.get(tag) if type(tag) is str else None
        if kind is None:
            raise self.error(str(tag)[:40], self.tag, f"unknown message kind {_what(tag)}")
        if expect and kind not in expect:
            want = [_tag(k) for k in expect]
            raise self.error(str(tag), self.tag, f"a {tag!r} message where {want} was due")
        try:
            msg: T = _top(kind, False)({k: v for k, v in doc.items() if k != self.tag})
        except _Bad as e:
            raise _error(self.error, str(tag), e) from None
        return msg
