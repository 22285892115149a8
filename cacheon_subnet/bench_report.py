"""What `cacheon bench` reports: one row per timed case, the report and its text (the table, the
clock each row was read on, the arena predictions). Kept apart from the run that fills them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from cacheon_subnet.bench_arena import Prediction
from cacheon_subnet.verify import protocol as P


@dataclass(frozen=True)
class BenchRow:
    op: str
    case: str
    dtype: str
    candidate_us: float
    baseline_us: float
    speedup: float
    baseline: str
    bytes: int
    candidate_gbps: float
    pct_hbm: float | None
    n: int
    rel_stderr: float
    recheck: str
    where: str = ""  # with --arena: "window decode|prefill" (the timed window's own size) or "arena decode|prefill"
    inputs: str = "synthetic"  # "fixture": drawn with the arena's recorded statistics (records/slot_inputs.py)
    clock: str = ""  # bench_timing.GRAPH_CLOCK on a GPU, or why the sides ran eager; "host clock" on CPU


@dataclass(frozen=True)
class BenchReport:
    digest: str
    device: str
    rows: tuple[BenchRow, ...]
    errors: tuple[str, ...]
    env: dict[str, Any] = field(default_factory=dict)
    hbm_gbps: float | None = None
    duration_s: float = 0.0
    arena: str = ""  # what the arena's timed window runs, when benched against one
    predictions: tuple[Prediction, ...] = ()  # window rows against the arena's fixture (bench_arena.py)

    @property
    def ok(self) -> bool:
        return bool(self.rows) and not self.errors and all(r.recheck == "ok" for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        gpu = self.env.get("gpu", self.device)
        hdr = f"cacheon bench  digest {self.digest[:16]}…  {gpu}"
        if self.hbm_gbps:
            hdr += f"  (measured copy bandwidth {self.hbm_gbps:,.0f} GB/s = 100 %)"
        lines = [hdr] + ([self.arena] if self.arena else [])
        where = any(r.where for r in self.rows)
        lines.append(
            f"{'op':30} {'case':28} {'dtype':9} "
            + (f"{'where':15} " if where else "")
            + f"{'cand µs':>9} {'base µs':>9} {'speedup':>8} {'GB/s':>8} {'%HBM':>6} {'n':>6} {'±':>7}  recheck  baseline"
        )
        for r in self.rows:
            pct = f"{r.pct_hbm:5.1f}" if r.pct_hbm is not None else "   - "
            lines.append(
                f"{r.op:30} {r.case:28} {r.dtype:9} "
                + (f"{r.where:15} " if where else "")
                + f"{r.candidate_us:9.2f} {r.baseline_us:9.2f} {r.speedup:7.3f}x "
                f"{r.candidate_gbps:8.1f} {pct:>6} {r.n:6d} {100 * r.rel_stderr:6.2f}%  {r.recheck:7}  {r.baseline}"
            )
        lines += clock_lines(self.rows)
        if self.predictions:
            lines.append("predicted in the arena (per-call gain x the slot's measured share of the step):")
            lines += [p.line() for p in self.predictions]
        lines += [f"error: {e}" for e in self.errors]
        lines.append(f"({self.duration_s:.1f} s)")
        return "\n".join(lines)


def clock_lines(rows: tuple[BenchRow, ...]) -> list[str]:
    """What each row's times are: GPU work replayed as the engine runs it, or eager calls whose
    host dispatch is in the time (which the engine's graphs never pay)."""
    clocks = {r.clock for r in rows if r.clock}
    if not clocks:
        return []
    if len(clocks) == 1:
        (c,) = clocks
        return [
            f"timed on: {c}"
            + (" (each side's call captured once and replayed, as the engine runs it)" if c == P.GRAPH_CLOCK else "")
        ]
    return [f"timed on: {r.clock}  [{r.op} {r.case} {r.dtype}]" for r in rows if r.clock]
