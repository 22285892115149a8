"""The static-input watch compares bits, not values (seams/integrity.py `same_bits`).

Red team 2026-12-04: torch.equal says -0.0 == 0.0. The engine's RoPE cache holds exact zeros
(sin 0), a policy-clean rope kernel flipped one of them to -0.0 per call and read the count back
(`1 / x < 0`): a call counter in engine state that persists across calls, windows and routes and
that no nonce-bound answer named (the kernel turned wrong from its fourth call). Verify's fresh
random caches hold no exact zero, so there the kernel writes nothing.
"""

from __future__ import annotations

import math

import pytest
import torch

from cacheon_subnet.policy.scan import scan_files
from cacheon_subnet.slots import get_slot
from seams import dispatch
from seams.dispatch import Registry, guarded
from seams.integrity import StaticInputs

COUNTER = b"""import torch


def rope(positions, q, k, cos_sin_cache):
    c = cos_sin_cache
    neg = (1.0 / c) < 0
    plus_zero = (c == 0) & (~neg)
    calls = ((c == 0) & neg).sum()
    first = plus_zero & (plus_zero.cumsum(1) == 1) & (plus_zero.sum(1, keepdim=True) > 0)
    first = first & (first.cumsum(0) == 1)
    c.mul_(torch.where(first, -1.0, 1.0))
    q.add_(torch.where(calls >= 3, 1.0, 0.0))
"""


def _rope_cache(p: int = 64, d: int = 16) -> torch.Tensor:
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    ang = torch.arange(p).float()[:, None] * inv[None, :]
    return torch.cat([ang.cos(), ang.sin()], -1)  # row 0: sin(0) = +0.0, exactly


def test_a_sign_of_zero_counter_in_the_rope_cache_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    assert scan_files({"kernel.py": COUNTER}) == []  # policy-clean
    ns: dict = {}
    exec(compile(COUNTER, "kernel.py", "exec"), ns)  # noqa: S102 - the bundle's own text, as a rank imports it
    watch = StaticInputs()
    monkeypatch.setattr(dispatch, "WATCH", watch)
    body = guarded(get_slot("rope.neox"), ns["rope"], Registry(), None, "challenger")
    cache = _rope_cache()
    q, k = torch.zeros(4, 2, 16), torch.zeros(4, 1, 16)
    body(positions=torch.zeros(4, dtype=torch.long), q=q, k=k, cos_sin_cache=cache)
    assert torch.equal(cache, _rope_cache()), "the write changes no value (that is the point)"
    assert watch.report()["tampered"] == ["rope.neox:cos_sin_cache"]


def test_a_nan_the_engine_holds_is_not_a_write() -> None:
    """Bits, both ways: a static input that holds a NaN from the start is unchanged (torch.equal
    said it changed at every answer, charging the route in force with a write nobody made)."""
    spec = get_slot("norm.rmsnorm")
    watch = StaticInputs()
    w = torch.ones(64)
    w[3] = math.nan
    watch.watch(spec, {"x": torch.ones(2, 64), "weight": w})
    assert watch.report()["tampered"] == []
    w[5] = 2.0  # a plain value write is still named
    assert watch.report()["tampered"] == ["norm.rmsnorm:weight"]
