"""Strict JSON for the messages on a pipe to a process that runs contribution code.

Why: the verify worker imports the bundle and an engine's scheduler ranks run it, so what comes
back over those pipes is hostile input. Each pipe keeps its messages in one module (verify/
protocol.py, arena/engine/protocol.py; as SGLang's managers/io_struct.py); this is their front on
the shared codec (jsonform.py) in its bounded dialect: every string, list, map and nesting has a
bound, so a reply cannot make the host build something huge. A message is a frozen dataclass
with a ClassVar `TAG`; its `Family` tells the kinds apart by one key ("type", "op"). Errors go
through the pipe's own error type, `error(kind, field, detail)`, so its readers' handlers catch it.
Field metadata: `absent()` (the key may be missing; None is not written) and `bound(n)`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from cacheon_subnet.jsonform import MESSAGE, Document, Invalid, Json, Reading, convert, meta, what

__all__ = ["Document", "Family", "Json", "Reading", "absent", "bound", "decode", "encode"]

T = TypeVar("T")
ErrorType = Callable[[str, str, str], Exception]


def absent(limit: int | None = None) -> Any:
    """An optional field: the key may be missing (or null); None is not written."""
    return dataclasses.field(default=None, metadata=meta(omit=True, limit=limit))


def bound(limit: int) -> dict[str, Any]:
    """Field metadata (`field(metadata=bound(n))`): the field's string, list or map holds at most
    `limit` characters or items."""
    return meta(limit=limit)


def _error(error: ErrorType, kind: str, e: Invalid) -> Exception:
    return error(kind, e.where.lstrip(".") or "-", e.msg)


def encode(msg: object, error: ErrorType) -> dict[str, Any]:
    """The wire dict of an untagged message (one whose kind the pipe's position says)."""
    kind = type(msg)
    try:
        out: dict[str, Any] = convert(kind, True, MESSAGE)(msg)
    except Invalid as e:
        raise _error(error, kind.__name__, e) from None
    return out


def decode(kind: type[T], doc: object, error: ErrorType, name: str = "") -> T:
    """The untagged message `kind` from `doc`; `error(name, field, detail)` when it is not one."""
    try:
        msg: T = convert(kind, False, MESSAGE)(doc)
    except Invalid as e:
        raise _error(error, name or kind.__name__, e) from None
    return msg


def _tag(kind: Any) -> str:
    """A message kind's tag (its ClassVar TAG)."""
    return str(kind.TAG)


@dataclasses.dataclass(frozen=True)
class Family:
    """The messages of one pipe direction, told apart by `tag`. `error(kind, field, detail)` is
    the pipe's own error type (so its callers' existing handlers catch it)."""

    tag: str
    kinds: tuple[type, ...]
    error: ErrorType
    by_tag: Mapping[str, type] = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_tag", {_tag(k): k for k in self.kinds})
        for k in self.kinds:  # every converter built now: a field with no message form fails at import
            convert(k, True, MESSAGE)
            convert(k, False, MESSAGE)

    def encode(self, msg: object) -> dict[str, Any]:
        """The wire dict of `msg`: its tag first, then its fields in declaration order."""
        kind = type(msg)
        if kind not in self.by_tag.values():
            raise self.error(kind.__name__, self.tag, "not a message of this pipe")
        try:
            body = convert(kind, True, MESSAGE)(msg)
        except Invalid as e:
            raise _error(self.error, _tag(kind), e) from None
        return {self.tag: _tag(kind), **body}

    def kind_of(self, doc: object) -> type | None:
        """The message kind `doc` claims to be (None: none of this pipe's), before any check."""
        tag = doc.get(self.tag) if type(doc) is dict else None
        return self.by_tag.get(tag) if type(tag) is str else None

    def decode(self, doc: object, *expect: type[T]) -> T:
        """The message `doc` holds, one of `expect` (default: any of this pipe's)."""
        if type(doc) is not dict:
            raise self.error("?", self.tag, f"{what(doc)}, expected an object")
        tag = doc.get(self.tag)
        kind = self.by_tag.get(tag) if type(tag) is str else None
        if kind is None:
            raise self.error(str(tag)[:40], self.tag, f"unknown message kind {what(tag)}")
        if expect and kind not in expect:
            want = [_tag(k) for k in expect]
            raise self.error(str(tag), self.tag, f"a {tag!r} message where {want} was due")
        try:
            msg: T = convert(kind, False, MESSAGE)({k: v for k, v in doc.items() if k != self.tag})
        except Invalid as e:
            raise _error(self.error, str(tag), e) from None
        return msg
