"""A call counter read from torch's default generator (red team 2026-12-04).

`torch.rand_like` is allowlisted and draws from the process's default generators. CUDA's starts
from a fixed seed, so in a verify worker the k-th draw was a known number: a kernel faithful
while its draw matched the first 400 values of that sequence, and biased after, PASSed verify
(`/tmp/rt1/rng_counter` on the red team's box; the engine reseeds, so there it was always biased).
The worker now reseeds the default generators from fresh entropy before every call. Here the
fixed CUDA seed is played by a fixed CPU seed, in-process: the draws a call sees must not be the
fixed sequence, and the broken control (no reseed) shows that the test can see it."""

from __future__ import annotations

import torch

from cacheon_subnet.slots import get_slot
from cacheon_subnet.verify import worker as worker_mod


def _draws(calls: int) -> list[float]:
    spec = get_slot("norm.rmsnorm")
    w = worker_mod.Worker(-1, "/nonexistent-bundle-root", "bundle", "cpu")
    seen: list[float] = []

    def kernel(x, weight, out, eps):  # what the attack reads: its draw, call after call
        seen.append(float(torch.rand_like(x[:1, :1], dtype=torch.float32)))
        out.copy_(x)

    torch.manual_seed(1234)  # the fixed seed a CUDA default generator starts from
    for _ in range(calls):
        args = {"x": torch.ones(2, 4), "weight": torch.ones(4), "out": torch.empty(2, 4)}
        assert w._invoke(spec, kernel, args, {"eps": 1e-6}, watch_sync=False)["ok"]
    return seen


def _fixed_sequence(calls: int) -> list[float]:
    g = torch.Generator().manual_seed(1234)
    return [float(torch.rand(1, generator=g)) for _ in range(calls)]


def test_every_call_draws_from_a_fresh_seed_so_no_call_count_can_be_read():
    seen = _draws(8)
    assert not set(seen) & set(_fixed_sequence(64)), seen
    assert len(set(seen)) == len(seen)  # and still noise: a kernel that needs randomness gets it


def test_broken_control_without_the_reseed_the_sequence_is_readable(monkeypatch):
    monkeypatch.setattr(worker_mod.torch, "seed", lambda: 0)
    assert _draws(8) == _fixed_sequence(8)
