"""The physical-floor guard (issue 34 item 3): a gain no kernel can deliver is not a verdict.

An end-to-end C/B over the decode step says how much time C saved a step; all of it is the slot's
(C changes only that kernel), so the candidate's implied time a call is

    implied = stock_us − step_us · (1 − 1/ratio) / calls_per_step

where stock_us is the kernel B runs (the stock kernel's measured time a call in this arena's
profile, plus any handicap B carries), calls_per_step and step_us come from the same profile. A
kernel cannot beat its roofline: it must move its bytes through HBM and do its FLOPs, so

    floor = max(bytes / HBM bandwidth, FLOPs / peak)

(bytes and FLOPs from the slot spec at the arena's shape, card figures from configs/cards.toml).
A PASS whose implied time is below the floor is NO_DECISION: the box, a clock or a trick made
that ratio, not the kernel (GPU MODE's board shows times 22-25 % below the floor, "taken on
trust"). It is NO_DECISION rather than FAIL because the measurement, not the contribution, is
what is known to be wrong.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from arena.verdict.speed import SpeedVerdict
from cacheon_subnet.errors import CacheonError

CARDS = Path(__file__).resolve().parents[2] / "configs" / "cards.toml"


class FloorError(CacheonError, ValueError):
    """A card or profile figure the guard cannot use: which file, which field, why."""


@dataclass(frozen=True)
class CardFigures:
    name: str
    hbm_gbps: float
    hbm_source: str
    peak_tflops: float
    peak_source: str


def load_card(name: str, path: Path = CARDS) -> CardFigures:
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise FloorError(f"{path}: cannot read ({e})") from None
    raw = doc.get(name)
    if not isinstance(raw, dict):
        raise FloorError(f"{path}: no [{name}] table")
    for k in ("hbm_gbps", "peak_tflops"):
        v = raw.get(k)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not (math.isfinite(v) and v > 0):
            raise FloorError(f"{path} [{name}].{k}: must be a finite number > 0, got {v!r}")
    for k in ("hbm_source", "peak_source"):
        if not isinstance(raw.get(k), str) or not raw[k]:
            raise FloorError(f"{path} [{name}].{k}: say where the figure is from")
    return CardFigures(name, float(raw["hbm_gbps"]), raw["hbm_source"], float(raw["peak_tflops"]), raw["peak_source"])


@dataclass(frozen=True)
class SlotUsage:
    """What the arena's profile says one slot costs in a decode step of B."""

    slot: str
    stock_us: float  # B's kernel, a call (a handicap control adds its spin here)
    calls_per_step: float
    step_us: float
    source: str

    def __post_init__(self) -> None:
        for k in ("stock_us", "calls_per_step", "step_us"):
            v = getattr(self, k)
            if not (math.isfinite(v) and v > 0):
                raise FloorError(f"SlotUsage.{k} of {self.slot} ({self.source}): must be finite and > 0, got {v!r}")


def usage_from_profile(doc: dict[str, Any], slot: str, source: str, extra_us: float = 0.0) -> SlotUsage:
    """The DECODE stage of a scripts/profile_decode.py document: the slot's row and the step."""
    stage = next((s for s in doc.get("stages") or [] if s.get("stage") == "DECODE"), None)
    if stage is None:
        raise FloorError(f"{source}: no DECODE stage")
    row = next((r for r in stage.get("shares") or [] if r.get("category") == slot), None)
    if row is None or not row.get("calls"):
        raise FloorError(f"{source}: the DECODE stage has no calls of {slot}")
    steps = int(stage.get("steps") or doc.get("steps") or 0)
    if steps <= 0:
        raise FloorError(f"{source}: DECODE stage `steps` must be > 0")
    calls = float(row["calls"])
    return SlotUsage(slot, float(row["us"]) / calls + extra_us, calls / steps, float(stage["kernel_us"]) / steps, source)


def roofline_us(bytes_moved: int, flops: int | None, card: CardFigures) -> float:
    """The fastest a call can be on the card: its bytes through HBM, its FLOPs at peak."""
    t_mem = bytes_moved / (card.hbm_gbps * 1e3)  # GB/s -> bytes per µs
    t_math = (flops or 0) / (card.peak_tflops * 1e6)  # TFLOP/s -> FLOPs per µs
    return max(t_mem, t_math)


def implied_us(ratio: float, usage: SlotUsage) -> float:
    """The candidate's time a call implied by an end-to-end ratio (all the saving is the slot's)."""
    return usage.stock_us - usage.step_us * (1 - 1 / ratio) / usage.calls_per_step


def floor_guard(verdict: SpeedVerdict, usage: SlotUsage, floor_us: float, card: CardFigures) -> SpeedVerdict:
    """A PASS whose implied kernel time is below the slot's roofline floor is NO_DECISION."""
    if verdict.verdict != "PASS" or not math.isfinite(verdict.ratio):
        return verdict
    implied = implied_us(verdict.ratio, usage)
    if implied >= floor_us:
        return verdict
    return replace(
        verdict,
        verdict="NO_DECISION",
        reason=(
            f"physical floor: C/B {verdict.ratio:.4f} implies {usage.slot} runs in {implied:.2f} µs a call "
            f"({usage.stock_us:.2f} µs stock, {usage.calls_per_step:g} calls in a {usage.step_us:.0f} µs step; "
            f"{usage.source}), below its roofline {floor_us:.2f} µs on the {card.name} "
            f"({card.hbm_gbps:,.0f} GB/s: {card.hbm_source}; {card.peak_tflops:g} TFLOP/s: {card.peak_source}); "
            f"the ratio is the measurement's, not the kernel's: {verdict.reason}"
        ),
    )
