"""What a qualifier returns, and the protocol every qualifier implements (`Qualifier`).

Kept apart from qualify.py, whose `CpuQualifier` needs the timing machinery (torch, the sandboxed
worker client): the loop, the ledger, the dispatch pools and the status tools import these names
and never time anything. qualify.py re-exports them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

from cacheon_subnet.bundle import Bundle, OpEntry
from cacheon_subnet.scoring.settle import Crown


@dataclass(frozen=True)
class QualifyResult:
    target: str
    verdict: str  # PASS | FAIL | NO_DECISION
    quality_ok: bool
    speedup: float  # vs the incumbent stack (what settlement compares against the bar)
    speedup_vs_stock: float
    noise: float  # relative noise band (B vs B')
    arena_id: str
    label: str
    reason: str
    detail: dict[str, Any] = field(default_factory=dict)


def result_problem(result: Any) -> str | None:
    """Why a qualifier's answer cannot be recorded (None: it can). The loop treats it as arena
    trouble (retried, then NO_DECISION): a NaN would be stored as NULL and abort every pass at the
    same item, an inf or a non-bool quality would reach settlement and the weights."""
    if not isinstance(result, QualifyResult):
        return f"qualifier returned {type(result).__name__}, not a QualifyResult"
    from cacheon_subnet.scoring.settle import VERDICTS

    if result.verdict not in VERDICTS:
        return f"qualifier returned verdict {result.verdict!r}, not one of {VERDICTS}"
    if not isinstance(result.quality_ok, (bool, int)):
        return f"qualifier returned quality_ok {result.quality_ok!r}, not a bool"
    for name in ("speedup", "speedup_vs_stock", "noise"):
        value = getattr(result, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            return f"qualifier returned {name} {value!r}, not a finite number >= 0"
    return None


class Qualifier(Protocol):
    @property
    def arena_id(self) -> str: ...  # read-only: a frozen dataclass's field or a property both fit

    @property
    def label(self) -> str: ...

    def qualify(self, bundle: Bundle, op: OpEntry, incumbent: Crown | None) -> QualifyResult: ...
