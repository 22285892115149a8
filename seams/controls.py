"""The arena's host-set controls: SGLang's own kernel placed in the routes, no contribution code.

  CACHEON_STOCK_AS_CANDIDATE=slot[,slot]   role bias: the stock kernel is the challenger (C) and
                                           B runs plain stock; same kernels in both roles.
  CACHEON_HANDICAP=slot:microseconds       known speedup: the baseline (B, B′) runs the stock
                                           kernel and then spins the GPU that long per call (an
                                           "incumbent"); C runs the stock kernel alone. C is
                                           faster by a known amount, so the run shows whether
                                           the arena crowns a gain of that size.
  CACHEON_SLOWDOWN=slot:microseconds       known loss: the challenger (C) runs the stock kernel
                                           and then spins that long per call; B, B′ plain stock.
                                           How fast a verdict ends on a clear loser (the SPRT).

Host-set only (the fixed launch environment); a bundle cannot name them. Nothing here is ever
a crown: the validator never passes these variables.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

from cacheon_subnet.env import HANDICAP, SLOWDOWN, STOCK_AS_CANDIDATE
from cacheon_subnet.slots import get_slot
from cacheon_subnet.slots.custom_op import register_slot_op
from cacheon_subnet.slots.spec import dtype_of
from seams.dispatch import Candidate, Registry, guarded

HANDICAP_ENV = HANDICAP.name
SLOWDOWN_ENV = SLOWDOWN.name
# torch.cuda._sleep counts SM cycles; the H200's SM clock sat at 1955-1980 MHz in the arena's
# windows (scripts/box_monitor.py, 2026-11-29), so one microsecond is ~1980 cycles (nominal)
SPIN_CYCLES_PER_US = 1980


def stock_controls(env: dict[str, str]) -> tuple[str, ...]:
    """CACHEON_STOCK_AS_CANDIDATE=slot[,slot]."""
    return STOCK_AS_CANDIDATE.get(env)


def handicap(env: dict[str, str], name: str = HANDICAP_ENV) -> tuple[str, float] | None:
    """CACHEON_HANDICAP=slot:microseconds -> (slot, µs); malformed values raise (fail closed)."""
    raw = env.get(name, "")
    if not raw:
        return None
    slot, _, us = raw.rpartition(":")
    try:
        value = float(us)
    except ValueError:
        value = -1.0
    if not slot or not 0 < value <= 100_000:
        raise RuntimeError(f"{name}={raw!r}: expected SLOT:MICROSECONDS with 0 < µs <= 100000")
    return slot, value


def slowdown(env: dict[str, str]) -> tuple[str, float] | None:
    """CACHEON_SLOWDOWN=slot:microseconds -> (slot, µs), as strict as the handicap."""
    return handicap(env, SLOWDOWN_ENV)


def spin(us: float) -> Callable[[], None]:
    """A fixed delay on the device the kernels run on: a GPU spin (captured into CUDA graphs like
    any kernel), or a host busy-wait where there is no CUDA (the CPU stand-in engine)."""
    import torch

    if torch.cuda.is_available():
        cycles = int(us * SPIN_CYCLES_PER_US)
        return lambda: torch.cuda._sleep(cycles)

    def busy() -> None:
        end = time.perf_counter() + us / 1e6
        while time.perf_counter() < end:
            pass

    return busy


def _stock(slot_id: str, why: str) -> Callable[..., None]:
    from seams.stock import stock_kernel

    fn, reason = stock_kernel(slot_id)
    if fn is None:
        raise RuntimeError(f"{why} {slot_id}: {reason}")
    return fn


_op_ids = itertools.count(1)  # custom-op names must be unique per process (tests register controls repeatedly)


def _add(registry: Registry, slot_id: str, fn: Callable[..., Any], variant: str, role: str) -> None:
    spec = get_slot(slot_id)
    call = register_slot_op(
        spec, guarded(spec, fn, registry, None, role), f"cacheon_{variant.replace('-', '_')}", f"n{next(_op_ids)}"
    )
    registry.add(spec, Candidate(slot_id, variant, "stock", tuple(dtype_of(d) for d in spec.dtypes), (), call, role))


def register_stock_controls(controls: tuple[str, ...], slots: list[str], registry: Registry) -> None:
    for slot_id in controls:
        if slot_id not in slots:
            raise RuntimeError(f"stock-as-candidate {slot_id}: no armed adapter serves this slot ({slots})")
        _add(registry, slot_id, _stock(slot_id, "stock-as-candidate"), "stock-control", "challenger")


def _spun(control: tuple[str, float], slots: list[str], what: str) -> tuple[str, Callable[..., None], Callable[..., None]]:
    """(slot, the stock kernel, the stock kernel followed by the control's GPU spin)."""
    slot_id, us = control
    if slot_id not in slots:
        raise RuntimeError(f"{what} {slot_id}: no armed adapter serves this slot ({slots})")
    stock = _stock(slot_id, what)
    delay = spin(us)

    def spun(**kw: Any) -> None:
        stock(**kw)
        delay()

    return slot_id, stock, spun


def register_handicap(control: tuple[str, float], slots: list[str], registry: Registry) -> None:
    """Challenger: the stock kernel. Incumbent (the baseline route): the stock kernel + a spin."""
    slot_id, stock, handicapped = _spun(control, slots, "handicap")
    _add(registry, slot_id, stock, "stock-control", "challenger")
    _add(registry, slot_id, handicapped, "stock-handicap", "incumbent")


def register_slowdown(control: tuple[str, float], slots: list[str], registry: Registry) -> None:
    """Challenger: the stock kernel + a spin; the baseline route stays plain stock."""
    slot_id, _, slowed = _spun(control, slots, "slowdown")
    _add(registry, slot_id, slowed, "stock-slowdown", "challenger")
