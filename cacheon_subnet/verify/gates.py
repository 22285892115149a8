"""Case selection for both verify paths, and the gate order of multi-rank verification: per dtype,
every case eagerly (cases already shuffled and extended by shapes.plan_cases), then the
torch.compile trace, then CUDA graph capture/replay on two cases. Single-rank verification runs
the interleaved, secret schedule of trials.py instead (op_trials.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cacheon_subnet.verify.report import Failure

Trial = Callable[[Any, Any], "Failure | None"]


def run_gates(
    dtypes: Sequence[Any],
    cases: Sequence[Any],
    *,
    compile_check: bool,
    graph_check: bool,
    eager: Trial,
    compile_trial: Trial,
    graph_trial: Trial,
) -> Failure | None:
    """The first failure, or None when every gate passed."""
    for act in dtypes:
        for c in cases:
            f = eager(act, c)
            if f:
                return f
        if compile_check:
            f = compile_trial(act, cases[0])
            if f:
                return f
        for c in cases[:2] if graph_check else ():
            f = graph_trial(act, c)
            if f:
                return f
    return None


def graph_enabled(graph_check: bool | None, device: str) -> bool:
    """CUDA graph trials by default on CUDA devices, unless the caller chose."""
    return graph_check if graph_check is not None else device.startswith("cuda")


def select_cases(spec: Any, op: Any, tier: str, max_cases: int | None) -> list[Any]:
    """The slot's workload shapes at this tier that the op's constraints admit (capped)."""
    cases = [c for c in spec.cases(tier) if op.eligible(c.dims)]
    return cases[:max_cases] if max_cases else cases
