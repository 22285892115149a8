"""Installing adapters through SGLang's released HookRegistry (AROUND hooks).

The registry patches the defining symbol and propagates the patch to every module holding a
`from x import name` copy (by-value bindings, chokepoints §12.1). Its `apply_hooks` logs and
swallows failures, so we verify each target afterwards and fail closed.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

Around = Callable[..., Any]
# point -> (original, wrapped) for every hook this process installed
INSTALLED: dict[str, tuple[Any, Any]] = {}
# (holder, attr, wrapped, original) bindings that detach() put back to the original
_DETACHED: list[tuple[Any, str, Any, Any]] = []


def _dotted(point: str) -> str:
    return point.replace(":", ".")


def registry_module() -> Any:
    return importlib.import_module("sglang.srt.plugins.hook_registry")


def install_hooks(hooks: Mapping[str, Around]) -> None:
    reg = registry_module()
    originals = {}
    for point in hooks:
        path, attr = _dotted(point).rsplit(".", 1)
        owner = pkgutil.resolve_name(path)
        originals[point] = (
            owner.__dict__.get(attr, getattr(owner, attr)) if isinstance(owner, type) else getattr(owner, attr)
        )
        reg.HookRegistry.register(_dotted(point), hooks[point], reg.HookType.AROUND)
    reg.HookRegistry.apply_hooks()
    for point, original in originals.items():
        path, attr = _dotted(point).rsplit(".", 1)
        owner = pkgutil.resolve_name(path)
        now = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr)
        if now is original or getattr(now, "__wrapped__", None) is None:
            raise RuntimeError(f"seam hook on {point} was not applied (HookRegistry logged the reason)")
        INSTALLED[point] = (original, now)


def detached() -> bool:
    return bool(_DETACHED)


def detach(instances: Iterable[Any] = ()) -> int:
    """Put every hooked binding back to SGLang's original (the owner's attribute and each module's
    by-value copy that HookRegistry propagated). Benchmark-only: the seam-overhead measurement
    times the pristine engine against the seam-installed one inside one resident engine.
    Returns how many bindings were restored; reattach() undoes exactly those."""
    if _DETACHED:
        return 0
    originals = {id(w): (w, o) for o, w in INSTALLED.values()}
    for inst in instances:  # layers bind forward_cuda at construction (CustomOp._forward_method)
        for name, value in list(vars(inst).items()):
            func = getattr(value, "__func__", None)
            if isinstance(value, types.MethodType) and id(func) in originals and func is originals[id(func)][0]:
                _DETACHED.append((inst, name, value, types.MethodType(originals[id(func)][1], inst)))
    for point, (original, wrapped) in INSTALLED.items():
        path, attr = _dotted(point).rsplit(".", 1)
        owner = pkgutil.resolve_name(path)
        if isinstance(owner, type) and owner.__dict__.get(attr) is wrapped:
            _DETACHED.append((owner, attr, wrapped, original))
        for mod in list(sys.modules.values()):
            d = getattr(mod, "__dict__", None)
            if not isinstance(d, dict):
                continue
            for name, value in list(d.items()):
                if value is wrapped:
                    _DETACHED.append((mod, name, wrapped, original))
    for holder, name, _wrapped, original in _DETACHED:
        setattr(holder, name, original)
    return len(_DETACHED)


def reattach() -> int:
    n = len(_DETACHED)
    for holder, name, wrapped, _original in _DETACHED:
        setattr(holder, name, wrapped)
    _DETACHED.clear()
    return n
