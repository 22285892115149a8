"""The physical-floor guard in the GPU arena's verdict (issue 34 items 1 and 3).

floor.py decides from a slot's figures; this module finds them for one arena: the stock kernel's
time a call, calls a step and the decode step's time from the arena's slot-input fixture
(configs/arena/fixtures/<arena>.json), the slot's bytes and FLOPs at the window's decode size, and
the card's figures. Where any of them is missing the guard says "not checked" and never blocks:
a verdict is only ever held back by figures that were measured.

The fixture's times are its card's: on another card (or none: a CPU test box) the guard is not
checked. A handicap control spins on B: its spin is added to B's time a call and, once a call, to
B's step, so the guard sees the slower B the control really timed and never blocks it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from arena.verdict.floor import FloorError, SlotUsage, floor_guard, implied_us, load_card, roofline_us
from arena.verdict.speed import SpeedVerdict
from cacheon_subnet.records import slot_inputs
from cacheon_subnet.slots import get_slot
from cacheon_subnet.slots.spec import dtype_of
from cacheon_subnet.verify.shapes import arena_cases, from_arena_config, token_count

NOT_CHECKED = "physical floor: not checked"


def detect_card() -> str:
    """The name of the first visible NVIDIA GPU ("" where there is none: no nvidia-smi)."""
    if not shutil.which("nvidia-smi"):
        return ""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return (out.stdout.strip().splitlines() or [""])[0]


def _window_bytes_flops(cfg: Any, slot: str, tokens: int) -> tuple[int, int | None] | None:
    spec = get_slot(slot)
    shapes = from_arena_config(cfg)
    for case, where in arena_cases(spec, spec.cases("bench"), shapes):
        if where.endswith("decode") and token_count(spec, case) == tokens:
            return spec.default_bytes(case, dtype_of(cfg.model.dtype)), spec.flops(case) if spec.flops else None
    return None


def check(
    verdict: SpeedVerdict,
    cfg: Any,
    slot: str,
    handicap_us: float = 0.0,
    card: str | None = None,
    root: Path | None = None,
) -> tuple[SpeedVerdict, str]:
    """(the verdict, NO_DECISION where a PASS implies a kernel below its floor; the guard's note).
    handicap_us: B's spin a call (the handicap control); card: the GPU's name (None: asks nvidia-smi)."""
    where = slot_inputs.path_for(cfg.name, root or slot_inputs.FIXTURES)
    try:
        fx = slot_inputs.load(cfg.name, root or slot_inputs.FIXTURES)
    except slot_inputs.FixtureError as e:
        return verdict, f"{NOT_CHECKED} (fixture unreadable: {e})"
    if fx is None:
        return verdict, f"{NOT_CHECKED} (no slot-input fixture {where})"
    use = fx.slot(slot)
    stage = use.decode if use is not None else None
    if stage is None or stage.stock_us is None or stage.calls_per_step is None or fx.decode_step_us is None:
        return verdict, f"{NOT_CHECKED} ({where} records no decode stock time a call, calls a step and step time for {slot})"
    name = detect_card() if card is None else card
    if not fx.card or fx.card.lower() not in name.lower():
        return (
            verdict,
            f"{NOT_CHECKED} (the fixture's times are the {fx.card or 'unnamed card'}'s; this arena runs on {name or 'no NVIDIA GPU'})",
        )
    try:
        figures = load_card(fx.card)
        sized = _window_bytes_flops(cfg, slot, stage.tokens)
        if sized is None:
            return verdict, f"{NOT_CHECKED} ({slot} has no case at decode bs {stage.tokens} in this arena)"
        calls = stage.calls_per_step.value
        usage = SlotUsage(
            slot,
            stage.stock_us.value + handicap_us,
            calls,
            fx.decode_step_us.value + handicap_us * calls,
            f"{stage.stock_us.source}" + (f"; + {handicap_us:g} µs handicap spin on B" if handicap_us else ""),
        )
    except FloorError as e:
        return verdict, f"{NOT_CHECKED} ({e})"
    floor_us = roofline_us(sized[0], sized[1], figures)
    out = floor_guard(verdict, usage, floor_us, figures)
    if out is not verdict:
        return out, out.reason
    if verdict.verdict != "PASS":
        return verdict, f"physical floor: not needed ({verdict.verdict}); {slot}'s floor {floor_us:.2f} µs a call"
    return verdict, (
        f"physical floor: checked, C/B {verdict.ratio:.4f} implies {implied_us(verdict.ratio, usage):.2f} µs a call "
        f">= the roofline {floor_us:.2f} µs on the {figures.name}"
    )
