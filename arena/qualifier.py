"""The validator's view of the arena: the Qualifier protocol of arena.cpu.qualifier."""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from arena.config import ArenaConfig
from arena.cpu.qualifier import QualifyResult
from arena.engine.home import default_home
from arena.run import RunOptions, qualify
from cacheon_subnet.bundle import Bundle, OpEntry
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
            result = qualify(self.config, bundle, op, replace(opts, workdir=work), incumbent=pair)
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
    result: dict[str, Any], op: OpEntry, incumbent: Crown | None, arena_id: str, label: str, head_to_head: bool = False
) -> QualifyResult:
    """Head-to-head (B ran the incumbent): the ratio is measured against it and chained to stock.
    Without the incumbent's bundle, B is stock and the ratio vs the incumbent is derived by
    dividing by its chained speedup (labelled in detail['speedup_basis'])."""
    speed = result.get("speed") or {}
    ratio = speed.get("ratio")
    ratio = float(ratio) if isinstance(ratio, (int, float)) and math.isfinite(ratio) else 1.0
    noise = speed.get("noise")
    noise = float(noise) if isinstance(noise, (int, float)) and math.isfinite(noise) else 0.0
    if incumbent is not None and head_to_head:
        speedup, vs_stock = ratio, ratio * incumbent.speedup_vs_stock
        basis = f"measured vs the incumbent; vs stock chained through its {incumbent.speedup_vs_stock:.4f}"
    elif incumbent is not None:
        speedup, vs_stock = ratio / incumbent.speedup_vs_stock, ratio
        basis = f"derived: measured vs stock / incumbent's {incumbent.speedup_vs_stock:.4f}"
    else:
        speedup, vs_stock, basis = ratio, ratio, "measured vs stock"
    quality_ok = (result.get("quality") or {}).get("verdict") == "PASS"
    confirm = result.get("confirm") or {}
    detail = {
        "result_json": result.get("result_path"),
        "speedup_basis": basis,
        "evidence": result.get("evidence"),
        "windows": result.get("windows"),
        "wall_s": result.get("wall_s"),
        # what the leaderboard plots need (per-window B, C, B′ with the noise band and bar)
        "metric": result.get("metric"),
        "speed": _speed_brief(result.get("speed")),
        "confirm": {"windows": confirm.get("windows"), "speed": _speed_brief(confirm.get("speed"))} if confirm else None,
    }
    return QualifyResult(
        op.slot, result["verdict"], quality_ok, speedup, vs_stock, noise, arena_id, label, result.get("reason", ""), detail
    )


SPEED_KEYS = ("verdict", "ratio", "noise", "bar", "run_drift", "reason")


def _speed_brief(speed: Any) -> dict[str, Any] | None:
    """The judged figures of one timed stage (arena.verdict.speed.SpeedVerdict.to_json), without the per-cycle lists."""
    return {k: speed.get(k) for k in SPEED_KEYS} if isinstance(speed, dict) else None
