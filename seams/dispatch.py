"""Typed live dispatch: from SGLang's tensors to a registered candidate and back.

The adapter (SGLang-specific) builds the slot's argument set from live tensors and calls
`run`. Here: resolve an eligible candidate (registry enabled, dtype declared, constraints and
the full ABI check on ranks/extents/dtypes/layouts hold), allocate the typed outputs the adapter
did not supply, and call the candidate through its custom op. Ineligible -> None: the adapter
runs stock code (normal routing before selection).

This function is traced by Dynamo inside SGLang's piecewise graphs (fullgraph=True), so it does
no I/O, keeps no per-call Python state and calls the candidate only through an opaque custom op.
Everything that must run per call — receipts, output revalidation, strict failure — lives in the
op body (`guarded`), which runs eagerly at warm-up, graph capture and eager batches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from cacheon_subnet.bundle.manifest import DimConstraint
from cacheon_subnet.slots.spec import SlotSpec
from seams.integrity import WATCH


class SeamError(RuntimeError):
    """A selected candidate failed in strict mode: the engine must stop, not fall back."""


@dataclass(frozen=True)
class Candidate:
    slot: str
    variant: str
    package: str
    dtypes: tuple[torch.dtype, ...]
    constraints: tuple[tuple[str, Mapping[str, Any]], ...]
    call: Callable[..., None]  # slot keyword args -> the registered custom op
    role: str = "challenger"  # "incumbent": the crowned kernel the arena's baseline windows run
    # the same rows as the manifest's own DimConstraint, so the live check is the one the bundle
    # was validated and documented with (bundle/manifest.py), never a second copy of it
    limits: tuple[DimConstraint, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "limits", tuple(dim_constraint(d, rule) for d, rule in self.constraints))

    def eligible(self, dims: Mapping[str, int], dtype: torch.dtype) -> bool:
        if dtype not in self.dtypes:
            return False
        for c in self.limits:
            v = dims.get(c.dim)
            if v is not None and not c.allows(v):
                return False
        return True


def dim_constraint(dim: str, rule: Mapping[str, Any]) -> DimConstraint:
    """A sealed tree's constraint row (bundle/engine_tree.py: dim -> {min, max, multiple_of, in})
    as the manifest's DimConstraint. An empty `in` (engine_tree never writes one) allows nothing,
    as the seam's own copy of the check did."""
    one_of = rule.get("in")
    return DimConstraint(
        dim, rule.get("min"), rule.get("max"), rule.get("multiple_of"), None if one_of is None else tuple(one_of)
    )


@dataclass
class Registry:
    """Per-process candidate table: disabled everywhere but a positively identified scheduler."""

    enabled: bool = False
    # the arena's B/C swap (seams/route.py): "candidate" = every candidate, challengers first;
    # "incumbent" = only crowned incumbents (the B windows of a head-to-head); "stock" = none
    route: str = "candidate"
    strict: bool = True
    specs: dict[str, SlotSpec] = field(default_factory=dict)
    candidates: dict[str, list[Candidate]] = field(default_factory=dict)
    receipts: Any = None

    @property
    def route_on(self) -> bool:
        return self.route != "stock"

    def add(self, spec: SlotSpec, cand: Candidate) -> None:
        self.specs[spec.id] = spec
        cands = self.candidates.setdefault(spec.id, [])
        cands.append(cand)
        cands.sort(key=lambda c: c.role != "challenger")  # stable: challengers before incumbents

    def routed(self, slot_id: str) -> list[Candidate]:
        """The candidates the current route lets through for this slot."""
        if not self.enabled or self.route == "stock":
            return []
        cands = self.candidates.get(slot_id, [])
        return cands if self.route == "candidate" else [c for c in cands if c.role == "incumbent"]

    def disable(self) -> None:
        """A failed activation or swap clears everything: nothing half-installed is measured."""
        self.enabled = False
        self.candidates.clear()


REGISTRY = Registry()


def _bind(spec: SlotSpec, args: Mapping[str, torch.Tensor], explain: bool) -> tuple[dict[str, int] | None, str]:
    """Symbolic dims from the tensors that are present, or None and (when asked) why not. The
    reason is built only when a declined call is counted, never on the dispatch path."""
    dims: dict[str, int] = {}
    for a in spec.args:
        t = args.get(a.name)
        if t is None:
            continue
        if t.dim() != len(a.shape):
            return None, f"abi: {a.name} has {t.dim()} dims, the slot {len(a.shape)} {a.shape}" if explain else ""
        for expr, extent in zip(a.dims, t.shape):
            v = expr.solve(int(extent))
            if v is None or dims.setdefault(expr.name, v) != v:
                return None, f"abi: {a.name} extent {int(extent)} does not fit {expr.name} in {a.shape}" if explain else ""
    return dims, ""


def bind_present(spec: SlotSpec, args: Mapping[str, torch.Tensor]) -> dict[str, int] | None:
    """Symbolic dims from the tensors that are present; None if they do not fit the slot."""
    return _bind(spec, args, False)[0]


def _layout(spec: SlotSpec, args: Mapping[str, torch.Tensor], act: torch.dtype, explain: bool) -> str | None:
    """None when every argument has the slot's dtype and layout, else (when asked) why not."""
    for a in spec.args:
        t = args[a.name]
        if t.dtype != a.torch_dtype(act):  # e.g. an fp32 norm weight: a call the slot does not cover
            return f"slot: {a.name} dtype {str(t.dtype).replace('torch.', '')}, the slot's {a.dtype}" if explain else ""
        if a.layout == "contiguous" and not t.is_contiguous():
            return f"abi: {a.name} not contiguous (strides {tuple(t.stride())})" if explain else ""
        if a.layout == "rows" and t.dim() and t.stride(-1) != 1:
            return f"abi: {a.name} last dim not unit-stride (strides {tuple(t.stride())})" if explain else ""
    return None


def abi_mismatch(spec: SlotSpec, args: Mapping[str, torch.Tensor]) -> str:
    """Why live tensors do not fit the slot's ABI (the slow path, only when a call is declined).
    "abi:" reasons (rank, extent, layout) mean the seam handed the slot what its contract does not
    describe: arena/verdict/evidence.py makes that NO_DECISION. "slot:" reasons (a dtype the slot does not
    cover) and "manifest:" ones (the bundle's own choice) are stock's calls by design."""
    return _bind(spec, args, True)[1] or "slot: no activation-dtype tensor"


def _ineligible(c: Candidate, spec: SlotSpec, dims: Mapping[str, int], dtype: torch.dtype) -> str:
    name = str(dtype).replace("torch.", "")
    if name not in spec.dtypes:
        return f"slot: dtype {name} outside the slot's {'/'.join(spec.dtypes)}"
    if dtype not in c.dtypes:
        return f"manifest: dtype {name} not declared"
    return "manifest: constraints exclude " + ", ".join(f"{d}={dims.get(d)}" for d, _ in c.constraints)


def _declined(registry: Registry, cands: list[Candidate], reason: str) -> None:
    """Count a routed call that runs stock, so evidence can show where the candidate never ran.
    Eager only (warm-up, capture, eager batches): under Dynamo the branch folds away."""
    receipts = registry.receipts
    if receipts is None or torch.compiler.is_compiling():
        return
    for c in cands:
        receipts.decline(receipt_key(c.slot, c.role), reason)


def run(
    slot_id: str, tensors: Mapping[str, torch.Tensor], params: Mapping[str, Any], registry: Registry = REGISTRY
) -> dict[str, torch.Tensor] | None:
    """Dispatch one call; returns every argument (allocated outputs included) or None for stock."""
    cands = registry.routed(slot_id)
    if not cands:
        return None
    spec = registry.specs[slot_id]
    act = next((tensors[a.name].dtype for a in spec.args if a.dtype == "act" and a.name in tensors), None)
    dims = bind_present(spec, tensors)
    if act is None or dims is None:
        _declined(registry, cands, abi_mismatch(spec, tensors))
        return None
    chosen = None
    for c in cands:
        if c.eligible(dims, act):
            chosen = c
            break
        _declined(registry, [c], _ineligible(c, spec, dims, act))  # e.g. a challenger the incumbent stands in for
    if chosen is None:
        return None
    args = dict(tensors)
    device = next(iter(tensors.values())).device
    for a in spec.args:
        if a.name not in args:
            if any(d.name not in dims for d in a.dims):
                _declined(registry, cands, f"abi: {a.name} not given and its shape {a.shape} is not bound")
                return None
            args[a.name] = torch.empty(a.concrete_shape(dims), dtype=a.torch_dtype(act), device=device)
    if _layout(spec, args, act, False) is not None:
        _declined(registry, cands, _layout(spec, args, act, True) or "abi: layout")
        return None
    chosen.call(**args, **params)
    return args


def receipt_key(slot_id: str, role: str) -> str:
    """Receipts count an incumbent apart from the challenger of the same slot."""
    return slot_id if role == "challenger" else f"{slot_id}@{role}"


def guarded(
    spec: SlotSpec, fn: Callable[..., Any], registry: Registry, stock: Callable[..., None] | None, role: str = "challenger"
) -> Callable[..., None]:
    """The custom-op body: receipts, revalidation of every written tensor, strict failure."""
    written = [a.name for a in spec.args if a.written]
    key = receipt_key(spec.id, role)

    def body(**kw: Any) -> None:
        receipts = registry.receipts
        if receipts is not None:
            receipts.note(key, "fired")
        WATCH.watch(spec, kw)  # engine state it is handed: any write is seen at the next answer
        before = {n: (kw[n].data_ptr(), tuple(kw[n].shape), kw[n].dtype, tuple(kw[n].stride())) for n in written}
        # non-strict: a failed candidate may have re-pointed/resized an output; stock must write
        # where SGLang reads, so keep each written tensor's storage view to restore it
        keep = (
            None
            if registry.strict or stock is None
            else {n: (kw[n].untyped_storage(), kw[n].storage_offset(), kw[n].size(), kw[n].stride()) for n in written}
        )
        try:
            result = fn(**kw)
            if result is not None:
                raise SeamError(f"{key}: candidate returned {type(result).__name__}; it must write its outputs")
            for n, sig in before.items():
                now = (kw[n].data_ptr(), tuple(kw[n].shape), kw[n].dtype, tuple(kw[n].stride()))
                if now != sig:
                    raise SeamError(f"{key}: output {n} changed identity/layout {sig} -> {now}")
        except Exception as e:  # noqa: BLE001
            if registry.strict or stock is None:
                if receipts is not None:
                    receipts.error(key, repr(e))
                raise SeamError(f"{key}: selected candidate failed in strict mode: {e!r}") from e
            if receipts is not None:
                receipts.note(key, "fallback", repr(e))
            for n, (st, off, size, stride) in (keep or {}).items():
                kw[n].set_(st, off, size, stride)
            stock(**kw)
            return
        if receipts is not None:
            receipts.note(key, "completed")

    return body
