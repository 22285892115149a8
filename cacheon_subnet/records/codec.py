"""Strict JSON for the records that cross a process or storage boundary.

Why: a stored verdict is read back by the page, the blame rule and the API; a lenient reader (a
`.get()` with a default) is how a missing speed figure once read as a 1.0x "gain". This is the
records' front on the shared codec (cacheon_subnet/jsonform.py) in its storage dialect: exact
containers (a record holds tuples, never lists) and no size bounds (storage is the validator's own;
a long traceback must still read back). Decoding refuses unknown keys, missing keys, wrong types
and non-finite numbers, naming the record and the field; encoding refuses the same. A `dict`,
`Any` or `object` field has no form (records hold no dicts; tests/records guards the fields).

Field metadata: `spelled` (a JSON key spelled otherwise than the field: "B'"), `reading()` (a key
that is absent rather than null when the value is None: a clock that did not read a window),
`FIGURE` (a figure where older code wrote NaN for "undetermined": read as None, never written).
A record may list `LEGACY_KEYS`: keys older code wrote that are read and dropped.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, TypeVar

from cacheon_subnet import jsonform
from cacheon_subnet.errors import CacheonError
from cacheon_subnet.jsonform import RECORD, Invalid, NoForm, convert, is_record, meta

T = TypeVar("T")


class RecordError(CacheonError, ValueError):
    """A document (or a record) that is not what its type says; the message names record and field."""


def _error(root: str, e: Invalid) -> RecordError:
    return RecordError(f"{root}{e.where}: {e.msg}")


def spelled(key: str) -> dict[str, Any]:
    """Field metadata (`field(metadata=spelled("B'"))`): the field's JSON key is `key`."""
    return meta(key=key)


# Field metadata (`field(metadata=FIGURE)`): a required `float | None` where None means
# undetermined; a NaN that older code wrote there reads as None (and is never written).
FIGURE = meta(nan=True)


def reading() -> Any:
    """An optional field (default None): None is written as an absent key, an absent key reads as None."""
    return dataclasses.field(default=None, metadata=meta(omit=True))


def finite(value: object, where: str) -> float:
    """`value` as a finite float: an int or float, never a bool, NaN or inf."""
    try:
        return jsonform.finite(value)
    except Invalid as e:
        raise _error(where, e) from None


def _converter(hint: Any, encoding: bool, root: str) -> jsonform.Convert:
    try:
        return convert(hint, encoding, RECORD)
    except NoForm as e:
        raise RecordError(f"{root}: {e} (records hold no dicts)") from None


def to_json(record: object) -> dict[str, Any]:
    """The JSON object of a record (checked field by field: see the module doc)."""
    kind: Any = type(record)
    if not is_record(kind):
        raise RecordError(f"{kind.__name__} is not a record")
    try:
        out: dict[str, Any] = _converter(kind, True, kind.__name__)(record)
    except Invalid as e:
        raise _error(kind.__name__, e) from None
    return out


def dumps(record: object) -> str:
    """Canonical text of a record (sorted keys, no NaN): what storage holds."""
    return json.dumps(to_json(record), sort_keys=True, allow_nan=False)


def decode(hint: Any, doc: object, where: str) -> Any:
    """A value of type `hint` (a union of records, say) from a parsed JSON document."""
    try:
        return _converter(hint, False, where)(doc)
    except Invalid as e:
        raise _error(where, e) from None


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
