"""One op's whole verify plan, drawn from the secret seed before any input exists.

The shapes (shapes.plan_cases), the shuffled trials (trials.schedule) and the secret choices the
trials make while they run (which rows a twin shares with its pair, how many replays a graph trial
gets) come from one `random.Random` in one fixed order. They used to be drawn as the trials ran;
drawing them here, in that same order, gives the same plan for the same seed while letting every
input be drawn ahead, on other threads (verify/draws.py). scripts/verify_coverage.py prints it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cacheon_subnet.slots.spec import ShapeCase, SlotSpec, dtype_of
from cacheon_subnet.verify.gates import graph_enabled, select_cases
from cacheon_subnet.verify.shapes import PlannedCase, plan_cases
from cacheon_subnet.verify.trials import Budget, Rows, Trial, graph_picks, schedule, twin_rows

# A graph trial sends its capture and every replay's fresh dynamic inputs in one frame; the
# worker refuses frames over wire.MAX_MESSAGE (4 GiB), and the host holds a few copies of it.
GRAPH_FRAME_BYTES = 2 << 30


def trial_plan(
    planned: Sequence[PlannedCase], rng: random.Random, budget: Budget, *, graphs: bool, compile_check: bool
) -> list[Trial]:
    """One op's shuffled trials over its planned cases. The CPU tier's largest case gets only its
    identical-input pair, a heavy GPU case the pair and at random one twin; every light decode
    case gets a CUDA-graph trial (the engine captures each). A heavy case gets none: its frame
    (the capture plus 3-6 replays of fresh inputs) would pass the wire's 4 GiB frame limit at the
    dense arena's bs 256 (5.7-10 GB) and the worker would die on it; the arena captures it."""
    heavy = [i for i, p in enumerate(planned) if p.heavy]
    decode = [i for i, p in enumerate(planned) if p.kind == "decode" and not p.heavy]
    picks = graph_picks(len(planned), decode, rng, budget, skip=heavy) if graphs else []
    pair_only = [i for i, p in enumerate(planned) if p.origin == "largest"]
    return schedule(
        [(i, p.dtypes) for i, p in enumerate(planned)],
        rng,
        budget,
        compile_check=compile_check,
        graph_cases=picks,
        pair_only=pair_only,
        short=heavy,
    )


def arg_rows(spec: SlotSpec, case: ShapeCase, dtype: str) -> list[tuple[str, Rows]]:
    """The read inputs (in, inout) in argument order, as the slot's generators make them (order,
    shape, floating: tests/verify/test_verify_draws.py checks every slot), for drawing a twin's rows."""
    act = dtype_of(dtype)
    return [
        (a.name, (a.concrete_shape(case.dims), a.torch_dtype(act).is_floating_point))
        for a in spec.args
        if a.role in ("in", "inout")
    ]


def frame_fit(spec: SlotSpec, case: ShapeCase, dtype: str) -> int:
    """How many replays fit a graph-trial frame, at the inputs' own extents (a view wider than its
    extents, such as the engine's strided q, sends its storage: draws.py caps again on the real
    storages with `replays_that_fit`)."""
    act = dtype_of(dtype)
    return _fit(
        {
            a.name: math.prod(a.concrete_shape(case.dims)) * a.torch_dtype(act).itemsize
            for a in spec.args
            if a.role in ("in", "inout")
        },
        dynamic_args(spec),
        None,
    )


def replays_that_fit(capture: Mapping[str, Any], dynamic: set[str], budget: int | None = None) -> int:
    """How many replays of fresh dynamic inputs fit one graph-trial frame beside the capture
    (storage sizes: an upper bound, a view such as the engine's strided q sends its storage)."""
    return _fit({k: v.untyped_storage().nbytes() for k, v in capture.items()}, dynamic, budget)


def _fit(size: Mapping[str, int], dynamic: set[str], budget: int | None) -> int:
    budget = GRAPH_FRAME_BYTES if budget is None else budget
    per_replay = sum(n for k, n in size.items() if k in dynamic)
    room = budget - sum(size.values())
    if room < 0:
        return 0
    return room // per_replay if per_replay else 1 << 30


def dynamic_args(spec: SlotSpec) -> set[str]:
    """Inputs a graph replay gets fresh values in (what the engine changes between replays)."""
    return {a.name for a in spec.args if a.graph_dynamic or a.role == "inout"}


@dataclass(frozen=True)
class OpPlan:
    """Everything verify will do for one op, on a PASS: the cases, the trials in order, for each
    twin trial the rows it shares with its pair (None: the mixture would equal the pair's inputs,
    a fresh draw instead), for each graph trial the replays drawn and what fits its frame."""

    planned: tuple[PlannedCase, ...]
    trials: tuple[Trial, ...]
    twin_rows: Mapping[int, Mapping[str, int] | None]
    wanted: Mapping[int, int]
    replays: Mapping[int, int]

    def calls(self, n: int) -> int:
        """Worker calls trial n makes when it passes (a graph trial: the capture and each replay)."""
        return 1 + self.replays[n] if self.trials[n].kind == "graph" else 1


def op_plan(spec: SlotSpec, op: Any, opts: Any, seed: int) -> OpPlan:
    """The plan runner.check_op runs (opts: runner.VerifyOptions). The rng is consumed as the
    trials used to consume it while running: twins in schedule order, then graph replay counts."""
    tier = opts.resolved_tier
    base = select_cases(spec, op, tier, opts.max_cases)
    rng = random.Random(f"{seed}:{op.key}")  # str seeds hash with SHA-512: same plan for the same seed
    if not base:
        return OpPlan((), (), {}, {}, {})
    pool = [c for c in spec.cases(tier) if op.eligible(c.dims)]
    planned = plan_cases(
        spec, base, op.dtypes, rng, gpu=opts.device.startswith("cuda"), arena=opts.arena, eligible=op.eligible, pool=pool
    )
    budget = opts.budget or Budget.for_device(opts.device)
    trials = trial_plan(
        planned, rng, budget, graphs=graph_enabled(opts.graph_check, opts.device), compile_check=opts.compile_check
    )
    rows: dict[int, Mapping[str, int] | None] = {}
    wanted: dict[int, int] = {}
    replays: dict[int, int] = {}
    for n, t in enumerate(trials):
        case = planned[t.case].case
        if t.kind == "twin":
            rows[n] = twin_rows(arg_rows(spec, case, t.dtype), rng)
        elif t.kind == "graph":
            wanted[n] = rng.randint(opts.graph_replays, 2 * opts.graph_replays)
            replays[n] = min(wanted[n], frame_fit(spec, case, t.dtype))
    return OpPlan(tuple(planned), tuple(trials), rows, wanted, replays)
