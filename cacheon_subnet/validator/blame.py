"""Evidence that blames the incumbent, not the challenger it was measured against.

arena/run.py charges a write into engine state (a static input a kernel is handed) to the route
in force: the challenger's is its FAIL, the incumbent's is NO_DECISION for the challenger ("the
incumbent baseline could not be established"). Such a row says nothing about the challenger and
something about the incumbent, so settlement retires the crown and measures its holder again
against stock (where its writes are its own), instead of keeping it while every challenger ends
no_decision (red team 2026-12-01).

Only the structured evidence counts (`detail.evidence.baseline_problems`, produced by the arena
host from nonce-bound answers), never free text alone: a reason can carry an engine's error
text, which a bundle's exception message reaches.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from cacheon_subnet.records import GpuDetail, RecordError, read_detail
from cacheon_subnet.scoring.settle import Crown

NO_BASELINE = "the incumbent baseline could not be established"
INCUMBENT_WROTE = "the incumbent wrote into engine state"


def _problems(detail: str | None) -> list[str]:
    """The incumbent's problems in a stored detail (records.read_detail); none when it does not decode."""
    try:
        doc = read_detail(detail)
    except RecordError:
        return []
    ev = doc.evidence if isinstance(doc, GpuDetail) else None
    return list(ev.baseline_problems) if ev is not None else []


def incumbent_blamed(rows: Sequence[sqlite3.Row], incumbent: Crown) -> tuple[list[str], str | None]:
    """(challenger ids whose evidence blames `incumbent`, the first such problem) for rows
    measured against it after its crown."""
    ids: list[str] = []
    first: str | None = None
    for r in rows:
        if (
            r["verdict"] != "NO_DECISION"
            or r["incumbent_id"] != incumbent.contribution_id
            or r["evaluated_block"] <= incumbent.crowned_block
            or not str(r["reason"] or "").startswith(NO_BASELINE)
        ):
            continue
        hits = [p for p in _problems(r["detail"]) if INCUMBENT_WROTE in p]
        if hits:
            ids.append(r["contribution_id"])
            first = first or hits[0]
    return ids, first
