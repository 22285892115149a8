"""The validator's view of the arena: the Qualifier protocol of cacheon_subnet.validator.qualify."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arena.config import ArenaConfig
from arena.run import RunOptions, qualify
from cacheon_subnet.bundle import Bundle, OpEntry
from cacheon_subnet.scoring.settle import Crown
from cacheon_subnet.validator.qualify import QualifyResult


def default_home() -> Path:
    return Path(os.environ.get("CACHEON_HOME", Path.home() / ".cacheon"))


@dataclass(frozen=True)
class GpuQualifier:
    config: ArenaConfig
    label: str = "gpu-arena"

    @property
    def arena_id(self) -> str:
        return self.config.arena_id

    def options(self, bundle: Bundle, op: OpEntry) -> RunOptions:
        home = default_home()
        work = home / "arena" / self.arena_id / f"{bundle.digest[:16]}-{op.slot}-{op.variant}"
        return RunOptions(workdir=work, checkpoint_root=home / "arena" / "checkpoints")

    def qualify(self, bundle: Bundle, op: OpEntry, incumbent: Crown | None) -> QualifyResult:
        result = qualify(self.config, bundle, op, self.options(bundle, op))
        return to_qualify_result(result, op, incumbent, self.arena_id, self.label)


def to_qualify_result(result: dict[str, Any], op: OpEntry, incumbent: Crown | None, arena_id: str,
                      label: str) -> QualifyResult:
    """B is stock in this arena version; the ratio vs an incumbent is derived by dividing by the
    incumbent's chained speedup vs stock (labelled in detail['speedup_basis'])."""
    speed = result.get("speed") or {}
    vs_stock = speed.get("ratio")
    vs_stock = float(vs_stock) if isinstance(vs_stock, (int, float)) and math.isfinite(vs_stock) else 1.0
    noise = speed.get("noise")
    noise = float(noise) if isinstance(noise, (int, float)) and math.isfinite(noise) else 0.0
    basis = "measured vs stock"
    speedup = vs_stock
    if incumbent is not None:
        speedup = vs_stock / incumbent.speedup_vs_stock
        basis = f"derived: measured vs stock / incumbent's {incumbent.speedup_vs_stock:.4f}"
    quality_ok = (result.get("quality") or {}).get("verdict") == "PASS"
    detail = {"result_json": result.get("result_path"), "speedup_basis": basis, "evidence": result.get("evidence"),
              "windows": result.get("windows"), "wall_s": result.get("wall_s")}
    return QualifyResult(op.slot, result["verdict"], quality_ok, speedup, vs_stock, noise, arena_id, label,
                         result.get("reason", ""), detail)
