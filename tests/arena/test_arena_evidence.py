"""Execution evidence fails closed: coverage on every rank and every route swap acknowledged."""

from __future__ import annotations

from arena.verdict.evidence import check

SLOT = "norm.rmsnorm"
SWAPS = [(1, "stock"), (2, "candidate"), (3, "stock")]


def receipt(rank=0, role="scheduler", fired=5, routes=None, **counts):
    c = {"active": 1, "fired": fired, "completed": fired, "fallback": 0, "load_failed": 0, **counts}
    acks = (
        routes
        if routes is not None
        else [
            {"epoch": 1, "route": "stock", "fired_during_capture": {SLOT: 0}},
            {"epoch": 2, "route": "candidate", "fired_during_capture": {SLOT: 3}},
            {"epoch": 3, "route": "stock", "fired_during_capture": {SLOT: 0}},
        ]
    )
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
    acks = [
        {"epoch": 1, "route": "incumbent", "fired_during_capture": {SLOT: 0, inc: inc_fired_in_baseline}},
        {"epoch": 2, "route": "candidate", "fired_during_capture": {SLOT: 3, inc: 0}},
        {"epoch": 3, "route": "incumbent", "fired_during_capture": {SLOT: 0, inc: inc_fired_in_baseline}},
    ]
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


def test_calls_outside_the_slots_abi_are_the_arenas_problem_and_the_bundles_choices_a_note():
    """The H200 case (2026-12-02): the candidate fired at capture (so every earlier check passed)
    but declined 756 of 840 decode-attention calls, Qwen3's strided q being outside the @1 ABI;
    the run read C/B 1.0000 with evidence "ok". Such declines now keep the verdict from standing."""
    from types import SimpleNamespace

    from arena.verdict.outcome import outcome

    abi = receipt()
    abi["declines"] = {SLOT: {"abi: x not contiguous (strides (4096, 1))": 756}}
    ev = check([abi], SLOT, [0], SWAPS, True)
    assert not ev.ok and not ev.problems and not ev.baseline_problems
    assert ev.arena_problems == (
        "rank 0: the candidate took 5 call(s) and declined 756 (abi: x not contiguous (strides (4096, 1)))",
    )
    stage = SimpleNamespace(leaks=(), evidence=ev)
    run = SimpleNamespace(forgery=None, records=[], error=None)
    verdict, reason = outcome("resident", run, [], stage, SLOT, False)
    assert verdict == "NO_DECISION" and "outside its ABI" in reason and "declined 756" in reason

    mine = receipt()
    mine["declines"] = {
        SLOT: {"manifest: constraints exclude H=60": 3, "slot: dtype float32 outside the slot's bfloat16/float16": 2}
    }
    ev = check([mine], SLOT, [0], SWAPS, True)
    assert ev.ok and not ev.arena_problems and len(ev.notes) == 2
    assert outcome("resident", run, [], SimpleNamespace(leaks=(), evidence=ev), SLOT, False) is None
