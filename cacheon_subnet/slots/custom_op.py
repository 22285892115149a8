"""Expose a slot kernel as a torch custom op with a fake implementation.

SGLang's piecewise CUDA graphs trace the model with Dynamo (fullgraph=True, no fallback), and
CUDA graphs capture whatever the wrapper launches. Registering each candidate as an opaque
custom op with a schema derived from the slot (mutated args annotated, returns nothing) makes
both work without tracing into miner code. Names are unique per (slot, variant, digest):
SGLang silently skips re-registration of an existing name, so reuse would run stale code.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import torch

from cacheon_subnet.slots.spec import SlotSpec

_SCALAR = {"float": "float", "int": "int", "bool": "bool"}
_libs: dict[str, torch.library.Library] = {}


def op_schema(spec: SlotSpec) -> str:
    parts = []
    alias = iter("abcdefghijklmnopqrstuvwxyz")
    for a in spec.args:
        if a.role == "in":
            parts.append(f"Tensor {a.name}")
        else:
            parts.append(f"Tensor({next(alias)}!) {a.name}")
    parts += [f"{_SCALAR[p.kind]} {p.name}" for p in spec.params]
    return f"({', '.join(parts)}) -> ()"


def op_name(spec: SlotSpec, tag: str) -> str:
    raw = f"{spec.id.replace('.', '_')}_{tag}"
    return re.sub(r"[^A-Za-z0-9_]", "_", raw)


def register_slot_op(spec: SlotSpec, fn: Callable[..., Any], namespace: str, tag: str) -> Callable[..., None]:
    """Register `fn` (called with keyword args named as in the slot) as `namespace::name`.

    Returns a callable taking the slot's keyword arguments that dispatches through the op.
    """
    name = op_name(spec, tag)
    lib = _libs.get(namespace)
    if lib is None:
        lib = _libs[namespace] = torch.library.Library(namespace, "FRAGMENT")
    qualname = f"{namespace}::{name}"
    if hasattr(getattr(torch.ops, namespace), name):
        raise RuntimeError(f"custom op {qualname} is already registered; names must be unique")
    lib.define(f"{name}{op_schema(spec)}")
    names = [a.name for a in spec.args] + [p.name for p in spec.params]

    def impl(*args: Any) -> None:
        result = fn(**dict(zip(names, args)))
        if result is not None:
            raise TypeError(f"{spec.id} kernels write into their out/inout args and return None, got {type(result).__name__}")

    def fake(*args: Any) -> None:
        return None

    lib.impl(name, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(qualname, fake, lib=lib)
    op = getattr(getattr(torch.ops, namespace), name).default

    def call(**kwargs: Any) -> None:
        op(*(kwargs[n] for n in names))

    return call
