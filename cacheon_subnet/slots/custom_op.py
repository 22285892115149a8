"""Expose a slot kernel as a torch custom op with a fake implementation.

SGLang's piecewise CUDA graphs trace the model with Dynamo (fullgraph=True, no fallback), and
CUDA graphs capture whatever the wrapper launches. Registering each candidate as an opaque
custom op with a schema derived from the slot (mutated args annotated, returns nothing) makes
both work without tracing into miner code. Names are unique per (slot, variant, digest):
SGLang silently skips re-registration of an existing name, so reuse would run stale code.

Collective slots get one more schema argument, `str group`: the caller passes a ProcessGroup or
its name, the op carries the name and the body hands the kernel the resolved group (groups.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch

from cacheon_subnet.slots.groups import group_name, resolve_group
from cacheon_subnet.slots.spec import GROUP_ARG, SlotSpec

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
    if spec.collective:
        parts.append(f"str {GROUP_ARG}")
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
    names = [a.name for a in spec.args] + [p.name for p in spec.params] + ([GROUP_ARG] if spec.collective else [])

    def impl(*args: Any) -> None:
        kw = dict(zip(names, args))
        if spec.collective:
            kw[GROUP_ARG] = resolve_group(kw[GROUP_ARG])
        result = fn(**kw)
        if result is not None:
            raise TypeError(
                f"{spec.id} kernels write into their out/inout args and return None, got {type(result).__name__}"
            )

    def fake(*args: Any) -> None:
        return None

    lib.impl(name, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(qualname, fake, lib=lib)
    op = getattr(getattr(torch.ops, namespace), name).default

    def call(**kwargs: Any) -> None:
        if spec.collective:
            kwargs[GROUP_ARG] = group_name(kwargs[GROUP_ARG])
        op(*(kwargs[n] for n in names))

    return call
