"""Static inputs stay as the engine made them: a watch on the engine state a candidate is handed.

A slot's `in` argument that is not graph-dynamic (the norm gain, the RoPE cos/sin cache, expert
weights) is not the call's data but the engine's own state: the same tensor is handed to stock,
to the incumbent and to the challenger, every call, for the life of the engine. The allowlist
lets a kernel write values into its arguments (in-place methods, item stores, `tl.store`), and
verify's `input_mutated` check sees only verify's fresh tensors, so a kernel that recognises the
engine (its public checkpoint's values) could write there and reach every later call: B, B′ and a
rival sharing the engine. Red team 2026-12-01: an incumbent that flips the gain's sign after each
of its own calls (and decodes it back for itself) made an honest challenger FAIL quality
(tests/adversarial/test_arena_state.py).

The custom-op body (seams.dispatch.guarded) calls `watch` before every candidate call: the first
time a static input is seen (by storage address, shape, strides, dtype) a pristine copy is kept;
a tensor first seen during a CUDA-graph capture is copied at the next check (no kernel of a
capture runs before its replay, and replays run only in generate windows, after the route
answer that ran the check). `report()` runs on every nonce-bound answer (seams.answers.snapshot,
outside the timed region) and names every watched input whose values now differ from its copy;
the host attributes the change to the route in force since the previous answer
(arena.verdict.evidence.tampering). Copies beyond MAX_BYTES are not made: such inputs are named
`unwatched` and the host cannot establish the baseline (NO_DECISION). Raw-pointer writes into
tensors the kernel was never handed stay under "Kernel memory access" (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from cacheon_subnet.tensor_views import same_bits  # bit-for-bit (-0.0 and NaN payloads): see its docstring

MAX_BYTES = 8 << 30


def _capturing() -> bool:
    return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


def _key(t: torch.Tensor) -> tuple[Any, ...]:
    return (str(t.device), t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)


class StaticInputs:
    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.copies: dict[tuple[Any, ...], tuple[str, torch.Tensor, torch.Tensor | None]] = {}
        self.bytes = 0
        self.unwatched: set[str] = set()
        self.tampered: set[str] = set()

    def watch(self, spec: Any, args: Mapping[str, Any]) -> None:
        """Before a candidate call: keep a copy of each static input seen for the first time."""
        for a in spec.args:
            t = args.get(a.name)
            if a.role != "in" or a.graph_dynamic or not isinstance(t, torch.Tensor):
                continue
            key = _key(t)
            if key in self.copies:
                continue
            name = f"{spec.id}:{a.name}"
            size = t.numel() * t.element_size()
            if self.bytes + size > self.max_bytes:
                self.unwatched.add(name)
                continue
            self.bytes += size
            self.copies[key] = (name, t, None if _capturing() else t.detach().clone())

    def reset(self) -> None:
        """A resident timed engine removed its contribution (seams/resident.py): the next one's
        watch starts afresh, so nothing the last one changed is ever charged to it (what it
        changed is the weights digest's business: the host then restarts the engine)."""
        self.copies.clear()
        self.bytes = 0
        self.unwatched.clear()
        self.tampered.clear()

    def report(self) -> dict[str, Any]:
        """Every watched input whose values differ from its first-seen copy (sticky), and what
        could not be watched. Syncs the device: call it outside timed regions only."""
        for key, (name, t, ref) in list(self.copies.items()):
            if ref is None:
                self.copies[key] = (name, t, t.detach().clone())
            elif name not in self.tampered and not same_bits(t, ref):
                self.tampered.add(name)
        return {"watched": len(self.copies), "tampered": sorted(self.tampered), "unwatched": sorted(self.unwatched)}


WATCH = StaticInputs()
