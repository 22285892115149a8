"""A qualification attempt as it crosses to a worker (`QualifyJob`) and back (`JobResult`).

Both are pickled across processes (Ray tasks) and never stored: the validator files the result
through the ledger. A job carries what the arena needs and nothing of the validator's (no DB
handle, no wallet, no chain keys); validator/dispatch.py runs and checks them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cacheon_subnet.bundle import OpEntry
from cacheon_subnet.records.qualify import QualifyResult
from cacheon_subnet.scoring.settle import Crown


@dataclass(frozen=True)
class QualifyJob:
    """One qualification attempt, as a worker receives it (picklable; nothing secret in it)."""

    key: str  # idempotency key: contribution|target|attempt|round
    contribution_id: str
    target: str
    files: Mapping[str, bytes]  # the bundle's members (re-validated on the worker)
    op: OpEntry
    incumbent: Crown | None = None
    incumbent_files: Mapping[str, bytes] | None = None
    start_block: int = 0


@dataclass(frozen=True)
class JobResult:
    key: str
    contribution_id: str
    target: str
    start_block: int
    result: QualifyResult | None  # None: the job itself failed (error says why: never the miner's fault)
    error: str | None = None
    worker: str = ""  # which GPU / host ran it (for the log)
    wall_s: float = 0.0
    incumbent_id: str | None = None  # the crown it was measured against


def job_key(contribution_id: str, target: str, attempts: int, remeasures: int, finished: int = 0) -> str:
    """finished: how many jobs of (contribution, target) already have a recorded outcome. It makes
    the key of a new job differ from every recorded one whatever `attempts` did meanwhile (another
    op's PASS resets it to 0; a lost cache sends the contribution through verify again): a
    repeated key was found recorded and the op was never dispatched again (red team)."""
    return f"{contribution_id}|{target}|a{attempts}|r{remeasures}|n{finished}"
