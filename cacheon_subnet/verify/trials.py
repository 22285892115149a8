"""The trial schedule: how many calls each (shape, dtype) gets, in which order, on which inputs.

Everything here is drawn from the host's secret seed, so a kernel cannot count its way past the
checks: a stale-output replay after call N, a "wrong only on the k-th call", or a memo keyed on
part of its input all need a schedule the kernel can predict.

- Calls per (case, dtype): uniform in CPU 3..5 / CUDA 4..16. 3 is the least that holds the
  identical-input pair (partial writes, determinism) and one twin; 5 keeps the CPU suite (Triton
  interpreter, ~4 ms per row-program) within about 2x of the old fixed 3 calls. On CUDA a call
  costs milliseconds (the host's reference and the transfer dominate), so 16 is affordable.
- One soak case per op (uniform over its cases and dtypes): CPU 10..14, CUDA 24..64 calls, so a
  per-shape counter that turns stale after N calls is caught for N up to 9 on CPU and 23 on CUDA
  at least (longer with luck), and the attacker cannot tell which shape gets it. Beyond that
  the arena's graded windows are the backstop (a verify budget is finite by construction).
- Order: all calls of all cases and dtypes of an op shuffled together (interleaved); the pair's
  two calls land at independent random positions, its poisons 0/1 in random order; half of the
  soak runs back to back at a random position (the engine calls one shape in long runs, so a
  kernel that turns stale only in a run of same-shape calls meets one).
- Output fill: poison 0 (NaN / int pattern) and 1 (-31337 / other pattern) for the pair; other
  calls 1 or 2: data-like noise from a secret seed, so "the output buffer holds poison" does not
  tell a verify call from an engine call (the host regenerates the noise to name unwritten
  elements of a failed call; NaN is left to the pair, where it cannot hide an unwritten one).
- Inputs: fresh from the slot's generators for every call, except the pair (identical inputs,
  the only repeat) and twins: inputs that agree with the pair's inputs on a random leading (or
  trailing) block of rows and differ elsewhere, so a memo keyed on the first element or first row
  (or the last) returns the stale answer and mismatches.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from cacheon_subnet.tensor_views import rebase

CPU_CALLS, CUDA_CALLS = (3, 5), (4, 16)
CPU_SOAK, CUDA_SOAK = (10, 14), (24, 64)


@dataclass(frozen=True)
class Budget:
    """Call counts per (case, dtype) and for the one soak case; `compile_per_dtype` compile-mode
    calls and `graph_cases` CUDA-graph trials (plus every decode case of an arena) per dtype."""

    calls: tuple[int, int]
    soak: tuple[int, int]
    compile_per_dtype: int = 1
    graph_cases: int = 2

    @classmethod
    def for_device(cls, device: str) -> Budget:
        cuda = device.startswith("cuda")
        return cls(CUDA_CALLS if cuda else CPU_CALLS, CUDA_SOAK if cuda else CPU_SOAK)

    def __post_init__(self) -> None:
        lo, hi = self.calls
        if lo < 3 or hi < lo or self.soak[0] < lo or self.soak[1] < self.soak[0]:
            raise ValueError(f"budget {self}: calls need 3 <= lo <= hi and a soak at least as long")


@dataclass(frozen=True)
class Trial:
    """One request to the worker for (case index, dtype). kind: pair (the two calls on identical
    inputs), fresh, twin (rows shared with the pair's inputs), compile, graph."""

    kind: str
    case: int
    dtype: str
    poison: int = 0
    watch: bool = True
    mode: str = "prefix"  # twins: share the leading ("prefix") or trailing ("suffix") rows


def schedule(
    cases: Sequence[tuple[int, Sequence[str]]],
    rng: random.Random,
    budget: Budget,
    *,
    compile_check: bool,
    graph_cases: Sequence[int] = (),
    pair_only: Sequence[int] = (),
    short: Sequence[int] = (),
) -> list[Trial]:
    """Every trial of one op, shuffled. cases: (case index, dtypes to run it in); graph_cases: case
    indices that get a CUDA-graph trial in each of their dtypes; pair_only: indices that get only
    the identical-input pair (the CPU tier's largest size: its cost is the whole budget); short:
    indices that get the pair and, at random, one twin (heavy GPU cases: a kernel that turns wrong
    at such a shape after its pair cannot know whether a third call is judged)."""
    slots = [(i, d) for i, dts in cases for d in dts]
    if not slots:
        return []
    soak = rng.choice([s for s in slots if s[0] not in pair_only and s[0] not in short] or slots)
    trials: list[Trial] = []
    soak_run: list[Trial] = []
    for i, d in slots:
        if i in pair_only:
            n = 2
        elif i in short:
            n = rng.randint(2, 3)
        else:
            n = rng.randint(*(budget.soak if (i, d) == soak else budget.calls))
        first = rng.randint(0, 1)
        trials.append(Trial("pair", i, d, poison=first, watch=rng.random() < 0.5))
        trials.append(Trial("pair", i, d, poison=1 - first, watch=True))
        extra = []
        for k in range(n - 2):
            kind = "twin" if k == 0 or rng.random() < 0.4 else "fresh"
            extra.append(
                Trial(kind, i, d, poison=rng.randint(1, 2), watch=rng.random() < 0.75, mode=rng.choice(("prefix", "suffix")))
            )
        if (i, d) == soak:
            run = extra[: len(extra) // 2]  # half the soak back to back: the engine calls one shape in long runs
            soak_run, extra = run, extra[len(run) :]
        trials.extend(extra)
    if compile_check:
        by_dtype: dict[str, list[int]] = {}
        for i, d in slots:
            by_dtype.setdefault(d, []).append(i)
        for d, idx in by_dtype.items():
            for i in rng.sample(idx, min(len(idx), budget_compile(budget))):
                trials.append(Trial("compile", i, d, watch=False))
    for i, d in slots:
        if i in graph_cases:
            trials.append(Trial("graph", i, d, watch=False))
    rng.shuffle(trials)
    at = rng.randint(0, len(trials))
    return trials[:at] + soak_run + trials[at:]


def budget_compile(budget: Budget) -> int:
    return max(0, budget.compile_per_dtype)


def graph_picks(
    n_cases: int, decode_cases: Sequence[int], rng: random.Random, budget: Budget, skip: Sequence[int] = ()
) -> list[int]:
    """Every arena decode case (the engine captures each) plus `graph_cases` random others, none
    of them from `skip` (heavy cases: every replay draws their inputs again)."""
    rest = [i for i in range(n_cases) if i not in decode_cases and i not in skip]
    return sorted(set(decode_cases) | set(rng.sample(rest, min(len(rest), budget.graph_cases))))


# -- twins ----------------------------------------------------------------------------------
Rows = tuple[tuple[int, ...], bool]  # an input's logical shape and whether it is floating


def twin_rows(inputs: Sequence[tuple[str, Rows]], rng: random.Random) -> dict[str, int] | None:
    """The secret half of a twin (see `twin`), drawn from shapes alone, in argument order: the row
    at which each floating input of at least two rows splits between the pair's rows and fresh
    ones. None when the mixture would equal the pair's inputs (no such input and at most one
    single-row floating input). Drawn before any input exists, in the order the trial schedule
    runs, so the inputs can be made ahead on other threads (verify/draws.py)."""
    rows: dict[str, int] = {}
    singles = 0
    for name, (shape, floating) in inputs:
        if not floating:
            continue
        if len(shape) >= 1 and shape[0] >= 2:
            rows[name] = rng.randint(1, shape[0] - 1)
        else:
            singles += 1
    return rows if rows or singles > 1 else None


def mix(
    source: Mapping[str, torch.Tensor], fresh: Mapping[str, torch.Tensor], rows: Mapping[str, int], mode: str = "prefix"
) -> dict[str, torch.Tensor]:
    """A copy of `fresh` (views kept) that equals `source` on `rows[name]` leading ("prefix") or
    trailing ("suffix") rows of each named floating tensor; integer/bool tensors (index sets,
    positions, lengths) whole from `source`, so index structure stays valid; of the single-row
    floating tensors the first (argument order) from `source`, the rest fresh. Rows are kept whole
    (one token's vector: topk margins and norms stay those of a real draw)."""
    out = rebase(fresh)
    kept_single = False
    for name, src in source.items():
        dst = out[name]
        if not src.is_floating_point():
            dst.copy_(src)
        elif name in rows:
            if src.dim() < 1 or not 1 <= rows[name] < src.shape[0]:
                raise ValueError(f"twin rows {rows[name]} do not fit {name}{tuple(src.shape)}")
            k = rows[name]
            if mode == "suffix":
                dst[k:].copy_(src[k:])
            else:
                dst[:k].copy_(src[:k])
        elif src.dim() >= 1 and src.shape[0] >= 2:
            raise ValueError(f"twin rows were drawn for other shapes: {name}{tuple(src.shape)} has none")
        elif not kept_single:
            dst.copy_(src)
            kept_single = True
    return out


def input_rows(source: Mapping[str, torch.Tensor]) -> list[tuple[str, Rows]]:
    return [(k, (tuple(v.shape), v.is_floating_point())) for k, v in source.items()]


def twin(
    source: Mapping[str, torch.Tensor], fresh: Mapping[str, torch.Tensor], rng: random.Random, mode: str = "prefix"
) -> dict[str, torch.Tensor] | None:
    """A copy of `fresh` (views kept) that equals `source` on a random block of leading ("prefix")
    or trailing ("suffix") rows along dim 0 (tokens, requests, pool slots) of every floating
    tensor with at least two rows, and on its integer tensors and first single-row floating
    tensor (`mix`). None when the mixture would equal `source`."""
    rows = twin_rows(input_rows(source), rng)
    return None if rows is None else mix(source, fresh, rows, mode)
