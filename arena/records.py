"""Typed, frozen records of one qualification: what each engine stage saw, what each clock said,
how quality graded, and the verdict. arena/run.py builds them stage by stage with
`dataclasses.replace` (no dict mutated across the run) and writes `ArenaResult.to_json()` after
every stage. The JSON keeps the keys of schema 1; schema 2 adds `quality.sample` (which timed
windows' outputs were graded), `confirm_quality`, `leaks` and the stage `forgery` field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from arena.engine.postcondition import PostCondition
from arena.verdict.evidence import Evidence
from arena.verdict.quality import QualityVerdict
from arena.verdict.sequential import SprtState
from arena.verdict.speed import SpeedVerdict, Window

SCHEMA = "cacheon.arena-result/2"
WINDOW_FIELDS = ("at", "s", "gpu_s", "forwards", "decode_gpu_s", "decodes", "extend_gpu_s", "clock_error")


def _frozen(d: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class WindowRecord:
    """One window as the host accepted it: its place in the plan and every clock's reading."""

    window: Window
    readings: Mapping[str, Any]

    @classmethod
    def of(cls, w: Window, rec: Mapping[str, Any], metrics: tuple[str, ...]) -> WindowRecord:
        return cls(w, _frozen({k: rec[k] for k in WINDOW_FIELDS + metrics if k in rec}))

    def value(self, metric: str) -> float | None:
        v = self.readings.get(metric)
        return None if v is None else float(v)

    def to_json(self, metric: str) -> dict[str, Any]:
        w = self.window
        return {
            "index": w.index,
            "cycle": w.cycle,
            "role": w.role,
            "route": w.route,
            metric: self.value(metric),
            **dict(self.readings),
        }


@dataclass(frozen=True)
class StageRecord:
    """One engine's lifecycle as the host saw it."""

    name: str
    wall_s: float
    rc: int | None
    timed_out: bool
    gpu_free: bool | None
    error: str | None
    forgery: str | None
    startup: tuple[Mapping[str, Any], ...]
    routes: tuple[Mapping[str, Any], ...]
    host_timing: Mapping[str, float] = field(default_factory=dict)  # arena.engine.host.EngineRun.timing

    def to_json(self) -> dict[str, Any]:
        return {
            "wall_s": round(self.wall_s, 1),
            "rc": self.rc,
            "timed_out": self.timed_out,
            "gpu_free": self.gpu_free,
            "error": self.error,
            "forgery": self.forgery,
            "startup": [dict(r) for r in self.startup],
            "routes": [dict(r) for r in self.routes],
            "host_timing": dict(self.host_timing),
        }


def _speed_json(v: SpeedVerdict) -> dict[str, Any]:
    return {
        "ratio": v.ratio,
        "run_drift": v.run_drift,
        "noise": v.noise,
        "verdict": v.verdict,
        "cycle_ratio": v.cycle_ratio,
        "cycle_drift": v.cycle_drift,
        "paired_ratio": v.paired_ratio,
        "paired_se": v.paired_se,
    }


@dataclass(frozen=True)
class TimedStage:
    """An engine with the candidate armed (resident or confirmation): windows, evidence, clocks."""

    windows: tuple[WindowRecord, ...]
    evidence: Evidence
    leaks: tuple[str, ...] = ()
    speed: SpeedVerdict | None = None
    by_metric: Mapping[str, SpeedVerdict] = field(default_factory=dict)

    def samples(self, metric: str) -> list[tuple[Window, float]]:
        return [(r.window, v) for r in self.windows if (v := r.value(metric)) is not None]

    def to_json(self, metric: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "evidence": self.evidence.to_json(),
            "leaks": list(self.leaks),
            "windows": [r.to_json(metric) for r in self.windows if r.value(metric) is not None],
        }
        if self.speed is not None:
            out["speed"] = self.speed.to_json()
            out["speed_by_metric"] = {m: _speed_json(v) for m, v in self.by_metric.items()}
        return out


@dataclass(frozen=True)
class QualityRecord:
    """The verdict of T on a sample of one timed stage's outputs, and which outputs those were."""

    verdict: QualityVerdict
    sample: tuple[tuple[str, str, int], ...]  # (C window tag, paired baseline window tag, prompt index)

    @property
    def passed(self) -> str:
        return self.verdict.verdict

    def to_json(self) -> dict[str, Any]:
        return {**self.verdict.to_json(), "sample": [list(s) for s in self.sample]}


@dataclass(frozen=True)
class ArenaIdentity:
    """Which qualification this is: the arena, the contribution (or control), and where it is written."""

    arena_id: str
    arena: str
    control: str | None
    config: str
    bundle_digest: str | None
    op: str
    slot: str
    started: str
    result_path: str

    def to_json(self) -> dict[str, Any]:
        return {
            "arena_id": self.arena_id,
            "arena": self.arena,
            "control": self.control,
            "config": self.config,
            "bundle_digest": self.bundle_digest,
            "op": self.op,
            "slot": self.slot,
            "started": self.started,
            "result_path": self.result_path,
        }


@dataclass(frozen=True)
class ArenaSetup:
    """What the timed engines were set up with: the baseline, the bindings, the sealed tree, the
    controls' spin, and one physical-floor note a judged stage (resident, then confirmation)."""

    baseline: str | None = None
    handicap_us: float | None = None
    candidate_control: str | None = None  # the slowdown control's description
    bindings: tuple[str, ...] | None = None
    tree_digest: str | None = None
    swaps: int | None = None
    armed: tuple[str, ...] | None = None  # what the resident timed engine arms ([engine] resident)
    floor: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        for k in ("baseline", "handicap_us", "candidate_control", "tree_digest", "swaps"):
            if (v := getattr(self, k)) is not None:
                doc[k] = v
        for k in ("bindings", "armed"):
            if (t := getattr(self, k)) is not None:
                doc[k] = list(t)
        if self.floor:
            doc["floor"] = list(self.floor)
        return doc


@dataclass(frozen=True)
class GatedCycle:
    """The sequential test's state after one gated cycle, and the gate's decision."""

    state: SprtState
    gated: str  # CONTINUE, or the decision that ended the cycles

    def to_json(self) -> dict[str, Any]:
        return {**self.state.to_json(), "gated": self.gated}


@dataclass(frozen=True)
class ArenaResult:
    """Everything one qualification decided, stage by stage."""

    identity: ArenaIdentity
    metric: str
    stages: tuple[StageRecord, ...] = ()
    setup: ArenaSetup = ArenaSetup()
    resident: TimedStage | None = None
    receipts: tuple[Mapping[str, Any], ...] = ()
    role_bias: float | None = None
    quality: QualityRecord | None = None
    confirm: TimedStage | None = None
    confirm_quality: QualityRecord | None = None
    sequential: tuple[GatedCycle, ...] = ()  # the SPRT's state after each gated cycle (arena/verdict/sequential.py)
    resident_engine: PostCondition | None = None  # the resident timed engine's post-condition
    verdict: str | None = None
    reason: str | None = None
    finished: str | None = None
    wall_s: float | None = None

    def with_stage(self, stage: StageRecord) -> ArenaResult:
        return replace(self, stages=tuple(s for s in self.stages if s.name != stage.name) + (stage,))

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "schema": SCHEMA,
            **self.identity.to_json(),
            **self.setup.to_json(),
            "stages": {s.name: s.to_json() for s in self.stages},
        }
        if self.resident is not None:
            r = self.resident.to_json(self.metric)
            doc.update(
                evidence=r["evidence"], leaks=r["leaks"], receipts=[dict(x) for x in self.receipts], windows=r["windows"]
            )
            if "speed" in r:
                doc.update(speed=r["speed"], speed_by_metric=r["speed_by_metric"], metric=self.metric)
        if self.role_bias is not None:
            doc["role_bias"] = self.role_bias
        if self.sequential:
            doc["sequential"] = [s.to_json() for s in self.sequential]
        if self.resident_engine is not None:
            doc["resident_engine"] = self.resident_engine.to_json()
        if self.quality is not None:
            doc["quality"] = self.quality.to_json()
        if self.confirm is not None:
            doc["confirm"] = self.confirm.to_json(self.metric)
        if self.confirm_quality is not None:
            doc["confirm_quality"] = self.confirm_quality.to_json()
        for k in ("verdict", "reason", "finished", "wall_s"):
            if getattr(self, k) is not None:
                doc[k] = getattr(self, k)
        return doc
