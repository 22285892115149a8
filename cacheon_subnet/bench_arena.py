"""What `cacheon bench --arena` says beside its microbench (issue 34 item 1): which inputs it drew
(the arena's recorded fixture or synthetic), the decode-step and prefill gain the per-call gain
predicts at the slot's measured share, and whether its stock time a call agrees with the stock
kernel's time a call in the arena's own engine.

Why: `examples/moe.fused_experts` benched 1.48x stock at the MoE arena's window shape while the
arena read C/B 0.9953; its stock call benched at 443 µs, the engine's profile said ~37 µs. A
miner reads a per-call gain as a verdict unless bench says what share of the step it is and
whether it timed the engine's workload at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from cacheon_subnet.records.slot_inputs import ArenaFixture, Figure, SlotInputs
from cacheon_subnet.slots import fixture_draw

# bench's stock time a call must be within this of the engine's (issue 34: "e.g. 15 %")
TOLERANCE = 0.15


def fixture_constants(slot: str, fx: SlotInputs | None) -> dict[str, float]:
    """The case constants that make the slot's inputs like the engine's ({} when nothing recorded)."""
    if fx is None:
        return {}
    if slot == "moe.fused_experts" and fx.routing is not None:
        return fixture_draw.routing_constants(fx.routing.tokens_per_expert)
    if slot == "attention.decode" and fx.kv_lengths is not None:
        return fixture_draw.kv_constants(fx.kv_lengths.lengths)
    return {}


def step_gain(per_call: float, share: float) -> float:
    """The stage's gain when only the slot's `share` of it runs `per_call` times faster (Amdahl)."""
    return 1.0 / (1.0 - share * (1.0 - 1.0 / per_call))


@dataclass(frozen=True)
class Prediction:
    """One window row of the bench against the arena's fixture."""

    op: str
    case: str
    stage: str  # decode | prefill
    speedup: float  # bench's per-call gain
    share: Figure | None  # the slot's share of the stage in the engine (None: not measured)
    predicted: float | None  # the stage's gain at that share
    engine_stock_us: Figure | None  # the stock kernel's time a call in the arena's engine, at this size
    bench_stock_us: float
    agreement: float | None  # bench_stock_us / engine_stock_us
    unchecked: str = ""  # why the agreement was not checked though the engine's time is known

    @property
    def agrees(self) -> bool | None:
        return None if self.agreement is None else abs(self.agreement - 1.0) <= TOLERANCE

    def line(self) -> str:
        head = f"  {self.op} {self.case} ({self.stage}): per call {self.speedup:.3f}x"
        if self.share is None or self.predicted is None:
            gain = f"; the slot's share of the {self.stage} step is not measured in this arena: no prediction"
        else:
            gain = (
                f" x share {100 * self.share.value:.2f} % of the {self.stage} step -> predicted {self.stage} gain "
                f"{self.predicted:.4f}x ({self.share.source})"
            )
        if self.engine_stock_us is None:
            agree = "; the engine's stock time a call at this size is not measured: agreement not checked"
        elif self.agreement is None:
            agree = f"; agreement not checked: {self.unchecked}"
        else:
            verdict = (
                "agrees"
                if self.agrees
                else "DISAGREES: bench times another workload than the engine runs; read its gain with care"
            )
            agree = (
                f"; stock here {self.bench_stock_us:.2f} µs vs {self.engine_stock_us.value:.2f} µs a call in the "
                f"engine = {self.agreement:.2f}x ({verdict}, tolerance ±{TOLERANCE:.0%}; {self.engine_stock_us.source})"
            )
        return head + gain + agree


def predict(
    op: str,
    slot: str,
    case: str,
    where: str,
    tokens: int,
    speedup: float,
    bench_stock_us: float,
    fx: ArenaFixture | None,
    baseline: str = "",
    gpu: str = "",
) -> Prediction | None:
    """The prediction of a row bench timed at the window's own size (other sizes: None). Its stock
    time is compared with the engine's only where bench's baseline was the stock kernel (`baseline`
    "stock: ...") on the card the fixture was measured on (`gpu`, the bench device's name)."""
    if fx is None or not where.startswith("window "):
        return None
    stage_name = where.split()[-1]
    got = fx.slot(slot)
    stage = got.stage(where) if got is not None else None
    share = stage.share if stage is not None else None
    engine = stage.stock_us if stage is not None and stage.tokens == tokens else None
    unchecked = ""
    if not baseline.startswith("stock"):
        unchecked = f"the baseline here is not the stock kernel ({baseline or 'none'})"
    elif not fx.card or fx.card.lower() not in gpu.lower():
        unchecked = (
            f"the engine's times are the {fx.card or 'unnamed card'}'s, this bench ran on {gpu or 'an unnamed device'}"
        )
    return Prediction(
        op=op,
        case=case,
        stage=stage_name,
        speedup=speedup,
        share=share,
        predicted=step_gain(speedup, share.value) if share is not None and speedup > 0 else None,
        engine_stock_us=engine,
        bench_stock_us=bench_stock_us,
        agreement=bench_stock_us / engine.value if engine is not None and not unchecked else None,
        unchecked=unchecked if engine is not None else "",
    )


def inputs_line(arena: str, fx: ArenaFixture | None, drawn: dict[str, bool]) -> str:
    """Which inputs bench drew, slot by slot: the arena's fixture or synthetic."""
    if fx is None:
        return f"inputs: synthetic (arena {arena} has no slot-input fixture: configs/arena/fixtures/{arena}.json)"
    said = ", ".join(
        f"{s} {'fixture' if used else 'synthetic (the fixture records no input statistics for it)'}"
        for s, used in sorted(drawn.items())
    )
    return (
        f"inputs: {said} (fixture configs/arena/fixtures/{arena}.json, engine figures from the {fx.card or 'unnamed card'})"
    )
