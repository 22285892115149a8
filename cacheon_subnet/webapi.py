"""The validator web API's contract, shared by the server (validator/web) and its readers
(`cacheon miner status`): the schema id, the paths, and the shape check a reader runs on what a
validator it does not trust sends back.

Every JSON document the API serves carries `"schema": SCHEMA`. A reader refuses any other
schema id, so a server speaking a newer, incompatible API is reported, never misread.
"""

from __future__ import annotations

import math
from typing import Any

SCHEMA = "cacheon.leaderboard/1"
PATH_HEALTH = "/api/health"
PATH_CROWNS = "/api/crowns"
PATH_CONTRIBUTIONS = "/api/contributions"
MAX_PAGE = 500  # contributions per /api/contributions page
VERDICTS = ("PASS", "FAIL", "NO_DECISION")


class ApiShapeError(ValueError):
    """A document that does not follow SCHEMA (names the field and why)."""


def clean(value: Any) -> Any:
    """JSON-safe copy: NaN and ±inf become None (strict JSON has no such numbers)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def _need(obj: Any, key: str, kinds: tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise ApiShapeError(f"{where}: missing field {key!r}")
    v = obj[key]
    if not isinstance(v, kinds) or (isinstance(v, bool) and bool not in kinds):
        raise ApiShapeError(f"{where}.{key}: expected {'/'.join(k.__name__ for k in kinds)}, got {type(v).__name__}")
    return v


def check_contributions(doc: Any) -> list[dict[str, Any]]:
    """The contributions of a /api/contributions document, each with its evidence checked.

    Checks the schema id and every field a reader prints (types, verdict names); extra fields
    are allowed (additive changes keep the schema id)."""
    if not isinstance(doc, dict):
        raise ApiShapeError(f"document: expected an object, got {type(doc).__name__}")
    schema = doc.get("schema")
    if schema != SCHEMA:
        raise ApiShapeError(f"schema {schema!r}: this reader understands {SCHEMA!r}")
    rows = _need(doc, "contributions", (list,), "document")
    for i, c in enumerate(rows):
        where = f"contributions[{i}]"
        for key in ("id", "hotkey", "state", "reason"):
            _need(c, key, (str,), where)
        _need(c, "commit_block", (int,), where)
        for j, e in enumerate(_need(c, "evidence", (list,), where)):
            w = f"{where}.evidence[{j}]"
            for key in ("target", "verdict", "reason", "arena_id", "label"):
                _need(e, key, (str,), w)
            if e["verdict"] not in VERDICTS:
                raise ApiShapeError(f"{w}.verdict: {e['verdict']!r} is not one of {VERDICTS}")
            for key in ("speedup", "speedup_vs_stock", "noise"):
                if e.get(key) is not None:
                    _need(e, key, (int, float), w)
    return rows
