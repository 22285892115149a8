"""What a verdict carries beside its numbers: the arena's evidence, typed.

A GPU arena verdict (`GpuDetail`) keeps what the leaderboard plots (each timed stage's windows on
the judged clock, its speed figures), the execution evidence's findings, and where the full
arena result file lies; a CPU arena verdict (`CpuDetail`) keeps its timed shapes. The state DB
stores a detail as the JSON object these records encode to (evidence.detail; `{}` for none), and
`read_detail` decodes it strictly. The two kinds are told apart by their keys (`cases`), as the
rows already stored are.

Stored shape: the keys and values the arena wrote before these records existed, except that the
execution evidence no longer copies its per-rank receipt counts and route acks (`per_rank`,
`routes`: engine-reported tables, still in the result file `result_json` names); rows that hold
them read as before (EvidenceSummary.LEGACY_KEYS). A speed figure the judge could not determine
is null; older rows wrote NaN there, which reads as null too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cacheon_subnet.records.codec import FIGURE, RecordError, decode, dumps, finite, reading, spelled, to_json
from cacheon_subnet.records.enums import Role, SpeedMetric, Verdict

CLOCK_ERROR = "clock_error"


@dataclass(frozen=True)
class ArenaWindow:
    """One timed window of an engine stage: its place in the B C C B′ plan and each clock's
    reading (None: that clock did not read this window)."""

    index: int
    cycle: int  # -1 for warm-up
    role: Role
    route: str  # what the engine ran: "candidate" in C, the baseline route elsewhere
    at: float | None = reading()
    s: float | None = reading()
    gpu_s: float | None = reading()
    forwards: float | None = reading()
    decode_gpu_s: float | None = reading()
    decodes: float | None = reading()
    extend_gpu_s: float | None = reading()
    clock_error: str | None = reading()
    output_tokens_per_s: float | None = reading()
    total_tokens_per_s: float | None = reading()
    gpu_tokens_per_s: float | None = reading()
    decode_gpu_tokens_per_s: float | None = reading()
    extend_gpu_tokens_per_s: float | None = reading()

    def value(self, metric: SpeedMetric) -> float | None:
        """This window's throughput on `metric` (None: not read)."""
        v: float | None = getattr(self, SpeedMetric(metric).value)
        return v

    @classmethod
    def from_readings(cls, index: int, cycle: int, role: str, route: str, readings: Mapping[str, object]) -> ArenaWindow:
        """A window from the host's readings (arena/records.py WindowRecord): every key a known
        clock, every number finite; anything else is refused, never dropped."""
        known = {k for k in cls.__dataclass_fields__} - {"index", "cycle", "role", "route"}
        unknown = set(readings) - known
        if unknown:
            raise RecordError(f"ArenaWindow: unknown reading(s) {sorted(unknown)}")
        got: dict[str, Any] = {}
        for k, v in readings.items():
            if v is not None:
                got[k] = str(v) if k == CLOCK_ERROR else finite(v, f"ArenaWindow.{k}")
        if role not in Role._value2member_map_:
            raise RecordError(f"ArenaWindow.role: {role!r}, expected one of {[r.value for r in Role]}")
        return cls(index, cycle, Role(role), route, **got)


@dataclass(frozen=True)
class SpeedBrief:
    """The judged figures of one timed stage (arena.verdict.speed.SpeedVerdict) without its
    per-cycle lists. None: undetermined (fewer than two complete cycles)."""

    verdict: Verdict
    ratio: float | None = field(metadata=FIGURE)
    noise: float | None = field(metadata=FIGURE)
    bar: float | None = field(metadata=FIGURE)
    run_drift: float | None = field(metadata=FIGURE)
    reason: str


@dataclass(frozen=True)
class ConfirmFigures:
    """The confirmation engine's timed windows and speed figures (a speed PASS is re-timed alone)."""

    windows: tuple[ArenaWindow, ...]
    speed: SpeedBrief | None  # None: the engine failed before its windows were judged


@dataclass(frozen=True)
class EvidenceSummary:
    """What the execution evidence found (arena.verdict.evidence.Evidence): the challenger's
    problems (FAIL), the incumbent's (NO_DECISION: validator/blame.py reads them), the arena's."""

    LEGACY_KEYS = frozenset({"per_rank", "routes"})  # read from older rows and dropped

    ok: bool
    problems: tuple[str, ...]
    baseline_problems: tuple[str, ...]
    arena_problems: tuple[str, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class BoardFigures:
    """What the leaderboard plots of a verdict (validator/web): the slice of a GpuDetail the web
    process's snapshot holds. All None for a CPU verdict or a run that timed nothing."""

    metric: SpeedMetric | None
    windows: tuple[ArenaWindow, ...] | None
    speed: SpeedBrief | None
    confirm: ConfirmFigures | None
    speedup_basis: str | None


NO_FIGURES = BoardFigures(None, None, None, None, None)


@dataclass(frozen=True)
class GpuDetail:
    """A GPU arena verdict's evidence (arena/qualifier.py builds it from the typed ArenaResult)."""

    result_json: str | None  # the arena result file (schema cacheon.arena-result/2)
    speedup_basis: str  # how `speedup` relates to what B ran (measured vs the incumbent, or derived)
    evidence: EvidenceSummary | None  # None: no timed engine ran
    windows: tuple[ArenaWindow, ...] | None  # the resident engine's windows with a reading on `metric`
    wall_s: float | None
    metric: SpeedMetric | None  # the judged clock; None until the resident stage was judged
    speed: SpeedBrief | None
    confirm: ConfirmFigures | None

    def board(self) -> BoardFigures:
        return BoardFigures(self.metric, self.windows, self.speed, self.confirm, self.speedup_basis)


@dataclass(frozen=True)
class OffCpu:
    """Wall over CPU time of each side's counted batches (arena/cpu/host_timing.py off_cpu_failure)."""

    baseline: float
    candidate: float


@dataclass(frozen=True)
class CpuSeries:
    """Per-batch µs per call of B, B′ and C, in round order."""

    b: tuple[float, ...] = field(metadata=spelled("B"))
    b2: tuple[float, ...] = field(metadata=spelled("B2"))
    c: tuple[float, ...] = field(metadata=spelled("C"))


@dataclass(frozen=True)
class CpuCase:
    """One timed shape of the CPU arena (arena/cpu/case.py CaseTimer)."""

    case: str
    baseline_us: float
    baseline2_us: float
    candidate_us: float
    speedup: float
    noise: float
    calls_per_batch: int
    rounds: int
    batches_judged: int
    ipc_overhead_frac: float
    ipc_overhead_wall_frac: float
    wall_over_cpu: OffCpu
    frozen_cpu_ns: int
    clock: str
    series_us: CpuSeries
    # The in-process guard (case.py): the reference run inside the candidate's own worker, and the
    # ratio it gives; `speedup` is the lower of this and the cross-process ratio. Absent in older rows.
    reference_in_candidate_us: float | None = reading()
    cross_process_speedup: float | None = reading()


@dataclass(frozen=True)
class CpuDetail:
    """A CPU arena verdict's evidence: the shapes it timed (none when it stopped before timing)."""

    cases: tuple[CpuCase, ...]

    def board(self) -> BoardFigures:
        return NO_FIGURES


def detail_json(detail: GpuDetail | CpuDetail | None) -> str:
    """What evidence.detail holds: the record's canonical JSON, `{}` for none."""
    return "{}" if detail is None else dumps(detail)


def read_detail(text: str | bytes | None) -> GpuDetail | CpuDetail | None:
    """The detail of one evidence row (strict: RecordError names the record and field)."""
    try:
        doc = json.loads(text or "{}")
    except (TypeError, ValueError) as e:
        raise RecordError(f"evidence detail: not JSON ({e})") from None
    return decode_detail(doc)


def decode_detail(doc: object) -> GpuDetail | CpuDetail | None:
    if doc == {}:
        return None
    out: GpuDetail | CpuDetail = decode(GpuDetail | CpuDetail, doc, "evidence detail")
    return out


def board_of(detail: GpuDetail | CpuDetail | None) -> BoardFigures:
    return NO_FIGURES if detail is None else detail.board()


def board_json(figures: BoardFigures) -> str:
    """The web snapshot's copy of a verdict's plot figures."""
    return json.dumps(to_json(figures), sort_keys=True, allow_nan=False)
