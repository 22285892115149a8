"""slots/gen.randn: large CPU draws in fixed chunks on threads, values fixed by the generator alone."""

from __future__ import annotations

import pytest
import torch

from cacheon_subnet.slots import gen
from cacheon_subnet.slots.gen import seed_generator


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gen, "PARALLEL_MIN_ELEMENTS", 10_000)
    monkeypatch.setattr(gen, "_CHUNK_ELEMENTS", 4_096)


def test_values_depend_on_the_generator_not_the_thread_count(small_chunks, monkeypatch: pytest.MonkeyPatch) -> None:
    draws = []
    for workers in (1, 3, 8):
        monkeypatch.setattr(gen, "usable_cpus", lambda w=workers: w)
        draws.append(gen.randn((50, 7, 64), torch.bfloat16, seed_generator(5)))
    assert all(torch.equal(draws[0], d) for d in draws[1:])
    other = gen.randn((50, 7, 64), torch.bfloat16, seed_generator(6))
    assert not torch.equal(draws[0], other)
    x = gen.randn((200, 1000), torch.float32, seed_generator(7))
    assert abs(float(x.mean())) < 0.01 and abs(float(x.std()) - 1.0) < 0.01  # standard normals
    chunks = x.view(-1)[: 4 * 4096].view(4, 4096)  # chunks are independent draws, not one repeated
    assert len({round(float(c.sum()), 3) for c in chunks}) == 4


def test_small_draws_are_the_plain_draw(small_chunks) -> None:
    """Below the threshold nothing changes: small cases keep the values they had."""
    g1, g2 = seed_generator(3), seed_generator(3)
    assert torch.equal(gen.randn((10, 100), torch.float32, g1), torch.randn((10, 100), generator=g2))
    assert torch.equal(torch.rand(3, generator=g1), torch.rand(3, generator=g2))  # same state after
