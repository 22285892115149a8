"""The validator's view of the GPU arena: a Qualifier (records/qualify.py) over arena/run.py,
whose typed ArenaResult becomes the QualifyResult directly (the result file is written for people
and scripts, never read back to make a verdict)."""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from arena.config import ArenaConfig
from arena.engine.home import default_home
from arena.records import ArenaResult, TimedStage
from arena.run import RunOptions, run_arena
from arena.verdict.evidence import Evidence
from arena.verdict.speed import SpeedVerdict
from cacheon_subnet.bundle import Bundle, OpEntry
from cacheon_subnet.records import (
    ArenaWindow,
    ConfirmFigures,
    EvidenceSummary,
    GpuDetail,
    QualifyResult,
    SpeedBrief,
    SpeedMetric,
    Verdict,
)
from cacheon_subnet.scoring.settle import Crown


@dataclass(frozen=True)
class GpuQualifier:
    config: ArenaConfig
    label: str = "gpu-arena"
    head_to_head: bool = True  # the validator hands over the incumbent's bundle (loop._incumbent_bundle)
    devices: str | None = None  # CUDA_VISIBLE_DEVICES for this arena's engines (validator/dispatch.py: one per GPU)

    @property
    def arena_id(self) -> str:
        return self.config.arena_id

    def options(self, bundle: Bundle, op: OpEntry) -> RunOptions:
        home = default_home()
        work = home / "arena" / self.arena_id / f"{bundle.digest[:16]}-{op.slot}-{op.variant}"
        return RunOptions(workdir=work, checkpoint_root=home / "arena" / "checkpoints", devices=self.devices)

    def on_devices(self, devices: str) -> GpuQualifier:
        """The same arena bound to one GPU (or a TP group: "2,3") of this host."""
        from dataclasses import replace

        return replace(self, devices=devices)

    def qualify(
        self, bundle: Bundle, op: OpEntry, incumbent: Crown | None, incumbent_bundle: Bundle | None = None
    ) -> QualifyResult:
        inc_op = None
        if incumbent is not None and incumbent_bundle is not None:
            inc_op = next((o for o in incumbent_bundle.manifest.ops if o.slot == op.slot), None)
        pair = (incumbent_bundle, inc_op) if incumbent_bundle is not None and inc_op is not None else None
        opts = self.options(bundle, op)
        with exclusive_workdir(opts.workdir) as work:
            result = run_arena(self.config, bundle, op, replace(opts, workdir=work), incumbent=pair)
        return to_qualify_result(result, op, incumbent, self.arena_id, self.label, head_to_head=pair is not None)


WORKDIR_TRIES = 64


@contextlib.contextmanager
def exclusive_workdir(base: Path, tries: int = WORKDIR_TRIES) -> Iterator[Path]:
    """`base`, or `base.1`, `base.2`, ... : the first whose lock no other run holds, held for the
    whole run. The workdir is named by bundle digest and op only, so two runs of one bundle at
    once on one host (arenas on two GPUs, Ray tasks on one worker host) met in one dir: same
    engine tree (the second run's rmtree of it), same receipts and result.json (red team). Two
    contributions of one digest run at once when the earlier commit appears after the later one
    was dispatched (intake's swap), or when a restarted validator re-dispatches a job whose old
    run is still alive (a Ray Client session's grace period). flock: per open file, so threads of
    one process exclude each other too; the lock dies with the run's process."""
    base.parent.mkdir(parents=True, exist_ok=True)
    for i in range(tries):
        work = base if i == 0 else base.with_name(f"{base.name}.{i}")
        fd = os.open(f"{work}.lock", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            yield work
        finally:
            os.close(fd)
        return
    raise RuntimeError(f"arena workdir {base}: {tries} runs of this bundle and op hold it already")


def to_qualify_result(
    result: ArenaResult, op: OpEntry, incumbent: Crown | None, arena_id: str, label: str, head_to_head: bool = False
) -> QualifyResult:
    """The validator's verdict from the typed arena result (no JSON in between).

    Head-to-head (B ran the incumbent): the ratio is measured against it and chained to stock.
    Without the incumbent's bundle, B is stock and the ratio vs the incumbent is derived by
    dividing by its chained speedup (labelled in detail.speedup_basis). A stage never judged
    (no speed verdict, or an undetermined ratio) reads as 1.0x with no noise: never as a gain."""
    if result.verdict is None:
        raise ValueError(f"arena result of {op.key} has no verdict: the run did not finish")
    resident = result.resident
    speed = resident.speed if resident is not None else None
    judged_ratio, judged_noise = (_figure(speed.ratio), _figure(speed.noise)) if speed else (None, None)
    ratio = 1.0 if judged_ratio is None else judged_ratio
    noise = 0.0 if judged_noise is None else judged_noise
    if incumbent is not None and head_to_head:
        speedup, vs_stock = ratio, ratio * incumbent.speedup_vs_stock
        basis = f"measured vs the incumbent; vs stock chained through its {incumbent.speedup_vs_stock:.4f}"
    elif incumbent is not None:
        speedup, vs_stock = ratio / incumbent.speedup_vs_stock, ratio
        basis = f"derived: measured vs stock / incumbent's {incumbent.speedup_vs_stock:.4f}"
    else:
        speedup, vs_stock, basis = ratio, ratio, "measured vs stock"
    quality_ok = result.quality is not None and result.quality.passed == Verdict.PASS
    metric = SpeedMetric(result.metric)
    confirm = result.confirm
    path = result.identity.result_path
    detail = GpuDetail(
        result_json=None if path is None else str(path),
        speedup_basis=basis,
        evidence=_evidence(resident.evidence) if resident is not None else None,
        windows=_windows(resident, metric) if resident is not None else None,
        wall_s=result.wall_s,
        # what the leaderboard plots (per-window B, C, B′ with the noise band and bar) once judged
        metric=metric if speed is not None else None,
        speed=_brief(speed),
        confirm=ConfirmFigures(_windows(confirm, metric), _brief(confirm.speed)) if confirm is not None else None,
    )
    return QualifyResult(
        op.slot, Verdict(result.verdict), quality_ok, speedup, vs_stock, noise, arena_id, label, result.reason or "", detail
    )


def _figure(v: float | None) -> float | None:
    """A judged figure, None where the judge could not determine it (NaN)."""
    return float(v) if v is not None and math.isfinite(v) else None


def _brief(speed: SpeedVerdict | None) -> SpeedBrief | None:
    """The judged figures of one timed stage, without the per-cycle lists."""
    if speed is None:
        return None
    return SpeedBrief(
        Verdict(speed.verdict),
        _figure(speed.ratio),
        _figure(speed.noise),
        _figure(speed.bar),
        _figure(speed.run_drift),
        speed.reason,
    )


def _windows(stage: TimedStage, metric: SpeedMetric) -> tuple[ArenaWindow, ...]:
    """The stage's windows that read the judged clock, with every clock's reading."""
    return tuple(
        ArenaWindow.from_readings(r.window.index, r.window.cycle, r.window.role, r.window.route, r.readings)
        for r in stage.windows
        if r.value(metric) is not None
    )


def _evidence(ev: Evidence) -> EvidenceSummary:
    return EvidenceSummary(ev.ok, tuple(ev.problems), tuple(ev.baseline_problems), tuple(ev.arena_problems), tuple(ev.notes))
