"""Realistic input distributions. Never zeros: zeros hide unwritten outputs and wrong indexing
and can run faster than real data."""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported by the functions that make or read tensors: loading the catalog needs none
    import torch


def hidden_states(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    """Transformer activations: roughly normal, with a few heavy outlier channels as seen in
    real LLM residual streams (they stress reductions and bf16 rounding)."""
    import torch

    x = torch.randn(shape, generator=gen, dtype=torch.float32) * scale
    h = shape[-1]
    n_out = max(1, h // 256)
    cols = torch.randperm(h, generator=gen)[:n_out]
    x[..., cols] *= 8.0 + 8.0 * torch.rand((n_out,), generator=gen)
    return x.to(dtype)


def norm_weight(h: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Trained RMSNorm gains: positive, spread over about an order of magnitude."""
    import torch

    w = torch.exp(0.5 * torch.randn((h,), generator=gen)) * (0.5 + torch.rand((h,), generator=gen))
    return w.to(dtype)


def uniform(shape: tuple[int, ...], lo: float, hi: float, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    import torch

    return (lo + (hi - lo) * torch.rand(shape, generator=gen)).to(dtype)


def weights(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator, fan_in: int) -> torch.Tensor:
    """Linear weights with the usual 1/sqrt(fan_in) scale so products stay O(1)."""
    import torch

    return (torch.randn(shape, generator=gen) / fan_in**0.5).to(dtype)


# Above this many elements a CPU draw is split into fixed chunks drawn by threads: a host draws
# verify's inputs on one core otherwise (the bs 256 K/V pool, 0.7 G normals: 4-8 s on a CI core).
PARALLEL_MIN_ELEMENTS = 1 << 24
_CHUNK_ELEMENTS = 1 << 22


def usable_cpus() -> int:
    """Cores this thread may run on (its affinity: a validator's screening threads get a slice of
    the host, validator/background.py), not every core the host has."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


_where = threading.local()


@contextmanager
def draw_device(device: str | None) -> Iterator[None]:
    """Large `randn` draws made on this thread go to `device` (a host-owned process's GPU: verify's
    draw threads, opt-in), each from a generator there seeded from the caller's CPU generator, then
    back to host memory: the values depend on the seed and the device, never on threads."""
    before = getattr(_where, "device", None)
    _where.device = device
    try:
        yield
    finally:
        _where.device = before


def randn(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Standard normals of `shape`. On a CPU generator and a large shape, drawn in fixed chunks,
    each from its own generator seeded from `gen`, on up to 8 threads: the values depend on `gen`'s
    state alone (never on the thread count), as a single draw's do. Under `draw_device`, drawn
    there in one go instead (other values, as fixed by `gen`)."""
    import torch

    n = math.prod(shape)
    if gen.device.type != "cpu" or n < PARALLEL_MIN_ELEMENTS:
        return torch.randn(shape, generator=gen, dtype=dtype, device=gen.device)
    device = getattr(_where, "device", None)
    if device is not None:
        seed = int(torch.randint(0, 2**62, (1,), generator=gen))
        there = torch.Generator(device=device).manual_seed(seed)
        return torch.randn(shape, generator=there, dtype=dtype, device=device).cpu()
    out = torch.empty(n, dtype=dtype)
    starts = range(0, n, _CHUNK_ELEMENTS)
    seeds = torch.randint(0, 2**62, (len(starts),), generator=gen).tolist()

    def fill(i: int) -> None:  # torch drops the GIL inside normal_: the chunks run in parallel
        lo = starts[i]
        out[lo : lo + _CHUNK_ELEMENTS].normal_(generator=torch.Generator().manual_seed(seeds[i]))

    with ThreadPoolExecutor(max_workers=min(8, usable_cpus())) as pool:
        list(pool.map(fill, range(len(starts))))
    return out.view(shape)


def seed_generator(seed: int) -> torch.Generator:
    import torch

    g = torch.Generator()
    g.manual_seed(seed)
    return g
