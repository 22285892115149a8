"""Execution evidence fails closed: coverage on every rank and every route swap acknowledged."""

from __future__ import annotations

from arena.evidence import check

SLOT = "norm.rmsnorm"
SWAPS = [(1, "stock"), (2, "candidate"), (3, "stock")]


def receipt(rank=0, role="scheduler", fired=5, routes=None, **counts):
    c = {"active": 1, "fired": fired, "completed": fired, "fallback": 0, "load_failed": 0, **counts}
    acks = routes if routes is not None else [
        {"epoch": 1, "route": "stock", "fired_during_capture": {SLOT: 0}},
        {"epoch": 2, "route": "candidate", "fired_during_capture": {SLOT: 3}},
        {"epoch": 3, "route": "stock", "fired_during_capture": {SLOT: 0}}]
    return {"role": role, "rank": rank, "pid": 10 + rank, "slots": {SLOT: c}, "errors": [], "routes": acks}


def test_complete_evidence_is_ok():
    ev = check([receipt(0), receipt(1)], SLOT, [0, 1], SWAPS, graphs_on=True)
    assert ev.ok, ev.problems


def test_missing_rank_extra_rank_and_foreign_role_fail():
    assert "rank 1: no receipt" in " ".join(check([receipt(0)], SLOT, [0, 1], SWAPS, True).problems)
    assert "unexpected rank 2" in " ".join(check([receipt(0), receipt(2)], SLOT, [0], SWAPS, True).problems)
    bad = check([receipt(0), receipt(0, role="driver")], SLOT, [0], SWAPS, True)
    assert not bad.ok and "outside a scheduler rank" in " ".join(bad.problems)


def test_never_fired_or_fallback_fails():
    assert not check([receipt(fired=0)], SLOT, [0], SWAPS, True).ok
    assert not check([receipt(fallback=1)], SLOT, [0], SWAPS, True).ok


def test_unacknowledged_or_ineffective_swaps_fail():
    acks = receipt()["routes"]
    missing = check([receipt(routes=acks[:2])], SLOT, [0], SWAPS, True)
    assert "swap 3 (stock) not acknowledged" in " ".join(missing.problems)
    idle = [dict(a, fired_during_capture={SLOT: 0}) for a in acks]
    assert "without calling the candidate" in " ".join(check([receipt(routes=idle)], SLOT, [0], SWAPS, True).problems)
    leaky = [dict(a, fired_during_capture={SLOT: 2}) for a in acks]
    assert "still called the candidate" in " ".join(check([receipt(routes=leaky)], SLOT, [0], SWAPS, True).problems)
    wrong = [dict(a, route="candidate") for a in acks]
    assert "expected 'stock'" in " ".join(check([receipt(routes=wrong)], SLOT, [0], SWAPS, True).problems)


def head_to_head(inc_fired_in_baseline: int = 4, inc_counts: dict | None = None):
    inc = "norm.rmsnorm@incumbent"
    acks = [{"epoch": 1, "route": "incumbent", "fired_during_capture": {SLOT: 0, inc: inc_fired_in_baseline}},
            {"epoch": 2, "route": "candidate", "fired_during_capture": {SLOT: 3, inc: 0}},
            {"epoch": 3, "route": "incumbent", "fired_during_capture": {SLOT: 0, inc: inc_fired_in_baseline}}]
    r = receipt(routes=acks)
    r["slots"][inc] = inc_counts or {"active": 1, "fired": 5, "completed": 5, "fallback": 0, "load_failed": 0}
    return check([r], SLOT, [0], [(1, "incumbent"), (2, "candidate"), (3, "incumbent")], True, incumbent=True)


def test_head_to_head_evidence():
    assert head_to_head().ok
    bad = head_to_head(inc_fired_in_baseline=0)
    assert not bad.ok and not bad.problems  # the challenger did everything right
    assert "without calling the incumbent" in " ".join(bad.baseline_problems)
    fb = head_to_head(inc_counts={"active": 1, "fired": 5, "completed": 4, "fallback": 1, "load_failed": 0})
    assert not fb.ok and "fallback" in " ".join(fb.baseline_problems)
