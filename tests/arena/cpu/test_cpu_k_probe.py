"""K (calls per timed batch) comes from a side's fastest warm call, not the slow one after its
first touch: read from that one call, the MoE case got K = 1-2 where 4-5 was right, and its 1-call
batches ran to max_rounds (demo test: 72-84 s, 55-58 s with the probes; docs/benchmarks.md)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from arena.cpu.case import K_PROBES, CaseTimer


def _timer(times_us: list[float]) -> tuple[CaseTimer, list[float]]:
    """A CaseTimer whose batches return the scripted per-call µs (one call each) and record them."""
    t = CaseTimer.__new__(CaseTimer)
    t.q = SimpleNamespace(batch_target_s=0.004)
    spent: list[float] = []
    script = iter(times_us)

    def batch(side: object, other: object, sets: list[object], target: str | None = None) -> float:
        assert len(sets) == 1  # a probe is a single call
        spent.append(next(script))
        return spent[-1]

    t.batch = batch  # type: ignore[method-assign]
    t.fresh = lambda n: [None] * n  # type: ignore[method-assign,assignment]
    return t, spent


def test_the_per_call_time_is_the_fastest_probe_not_the_slow_first_one():
    # the MoE case on a fresh worker (session 20): 5.0 ms right after the first touch, then ~1.1 ms
    t, spent = _timer([5000.0, 1000.0, 2600.0, 1400.0, 900.0])
    assert K_PROBES >= 3
    per_call = t._per_call_s(object(), object())  # type: ignore[arg-type]
    assert len(spent) == K_PROBES
    assert per_call == min(spent) * 1e-6 and per_call < 0.0012, per_call  # K = 4, not 1


def test_a_hopeless_side_costs_one_probe():
    # the CPU interpreter's Triton: ~0.5 s a call, over ten batches' worth: K is 1 whatever follows
    t, spent = _timer([500_000.0, 1.0, 1.0, 1.0])
    assert t._per_call_s(object(), object()) == 0.5  # type: ignore[arg-type]
    assert spent == [500_000.0]


def test_both_sides_are_probed_before_k_is_set():
    t, _ = _timer([3000.0] * 8)
    t.q.batch_target_s, probed = 0.004, []

    class Probed(Exception):
        pass

    def probe(side: object, other: object) -> float:
        probed.append(side)
        if len(probed) == 2:
            raise Probed
        return 0.001

    t._per_call_s = probe  # type: ignore[method-assign]
    b, c = object(), object()
    with pytest.raises(Probed):
        t._measure(b, c, 16)  # type: ignore[arg-type]
    assert probed == [b, c]
