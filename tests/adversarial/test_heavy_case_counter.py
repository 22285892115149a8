"""A paid miner against verify's heavy-case rule (verify/shapes.GPU_HEAVY_CASE_BYTES): heavy GPU
cases run as their identical-input pair plus, at random, one twin. The attacker's kernel counts
its calls per shape and turns wrong from its third call at a heavy shape (correct on the pair,
correct everywhere else), hoping verify never makes a third call there. Planned on the dense
arena's shapes (no GPU needed: which calls verify makes is the host's plan)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

from cacheon_subnet.slots import get_slot
from cacheon_subnet.verify import shapes
from cacheon_subnet.verify.runner import trial_plan
from cacheon_subnet.verify.trials import Budget, schedule

REPO = Path(__file__).resolve().parents[2]
SEEDS = 40


def _planned(seed: int, eligible=None):
    from arena.config import load_config

    att = get_slot("attention.decode")
    arena = shapes.from_arena_config(load_config(REPO / "configs/arena/dense.toml"))
    rng = random.Random(f"{seed}:attention.decode/default")
    base = [c for c in att.cases("gpu") if eligible is None or eligible(c.dims)]
    return shapes.plan_cases(att, base, att.dtypes, rng, gpu=True, arena=arena, eligible=eligible, pool=base), rng


def _caught(planned, plan) -> bool:
    """Judged wrong at least once: some heavy (case, dtype) got more than its two pair calls."""
    calls = Counter((t.case, t.dtype) for t in plan if t.kind in ("pair", "twin", "fresh"))
    return any(n > 2 for (i, _), n in calls.items() if planned[i].heavy)


def test_a_kernel_wrong_from_its_third_call_at_a_heavy_shape_is_caught_in_most_plans():
    caught = 0
    for seed in range(SEEDS):
        planned, rng = _planned(seed)
        assert sum(p.heavy for p in planned) >= 4
        caught += _caught(planned, trial_plan(planned, rng, Budget.for_device("cuda"), graphs=True, compile_check=True))
    assert caught >= 0.9 * SEEDS, f"caught in {caught} of {SEEDS} plans"


def test_control_pair_only_heavy_cases_never_catch_it():
    """The rule without its random twin (heavy cases pair-only): the attack passes every plan."""
    for seed in range(SEEDS // 4):
        planned, rng = _planned(seed)
        heavy = [i for i, p in enumerate(planned) if p.heavy]
        plan = schedule(
            [(i, p.dtypes) for i, p in enumerate(planned)],
            rng,
            Budget.for_device("cuda"),
            compile_check=True,
            pair_only=heavy,
        )
        assert not _caught(planned, plan)


def test_constraints_cannot_steer_verify_onto_heavy_cases_alone():
    """A manifest constraint B >= 64 keeps only the large batches: a light case still remains and
    gets the full call budget (and B >= 65 leaves no tier case: FAIL no_cases, runner.check_op)."""
    planned, rng = _planned(0, eligible=lambda d: d["B"] >= 64)
    light = [i for i, p in enumerate(planned) if not p.heavy]
    assert light
    plan = trial_plan(planned, rng, Budget.for_device("cuda"), graphs=True, compile_check=True)
    calls = Counter(t.case for t in plan if t.kind in ("pair", "twin", "fresh"))
    assert max(calls[i] for i in light) >= Budget.for_device("cuda").calls[0]
