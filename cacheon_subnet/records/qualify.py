"""What a qualifier returns (`QualifyResult`), and the protocol every qualifier implements.

Here, below the arenas and the validator, because both sides speak it: arena/qualifier.py and
arena/cpu/qualifier.py build it, the validator's stages check it (`result_problem`), the ledger
files it, the dispatch pools carry it back from workers. It needs no torch and times nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

from cacheon_subnet.bundle import Bundle, OpEntry
from cacheon_subnet.records import codec
from cacheon_subnet.records.detail import CpuDetail, GpuDetail
from cacheon_subnet.records.enums import Verdict
from cacheon_subnet.scoring.settle import VERDICTS, Crown


@dataclass(frozen=True)
class QualifyResult:
    target: str
    verdict: Verdict
    quality_ok: bool
    speedup: float  # vs the incumbent stack (what settlement compares against the bar)
    speedup_vs_stock: float
    noise: float  # relative noise band (B vs B')
    arena_id: str
    label: str
    reason: str
    detail: GpuDetail | CpuDetail | None = None  # the arena's evidence (records/detail.py)

    def to_json(self) -> dict[str, Any]:
        return codec.to_json(self)

    @classmethod
    def from_json(cls, doc: object) -> QualifyResult:
        return codec.from_json(cls, doc)


def result_problem(result: object) -> str | None:
    """Why a qualifier's answer cannot be recorded (None: it can). The loop treats it as arena
    trouble (retried, then NO_DECISION): a NaN would be stored as NULL and abort every pass at the
    same item, an inf or a non-bool quality would reach settlement and the weights, and a detail
    that does not encode would abort the transaction that files it."""
    if not isinstance(result, QualifyResult):
        return f"qualifier returned {type(result).__name__}, not a QualifyResult"
    if result.verdict not in VERDICTS:
        return f"qualifier returned verdict {result.verdict!r}, not one of {VERDICTS}"
    if not isinstance(result.quality_ok, bool):
        return f"qualifier returned quality_ok {result.quality_ok!r}, not a bool"
    for name in ("speedup", "speedup_vs_stock", "noise"):
        value = getattr(result, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            return f"qualifier returned {name} {value!r}, not a finite number >= 0"
    try:
        codec.to_json(result)
    except codec.RecordError as e:
        return f"qualifier returned a result that cannot be stored: {e}"
    return None


class Qualifier(Protocol):
    @property
    def arena_id(self) -> str: ...  # read-only: a frozen dataclass's field or a property both fit

    @property
    def label(self) -> str: ...

    def qualify(self, bundle: Bundle, op: OpEntry, incumbent: Crown | None) -> QualifyResult: ...
