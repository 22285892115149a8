"""Installing adapters through SGLang's released HookRegistry (AROUND hooks).

The registry patches the defining symbol and propagates the patch to every module holding a
`from x import name` copy (by-value bindings, chokepoints §12.1). Its `apply_hooks` logs and
swallows failures, so we verify each target afterwards and fail closed.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable, Mapping

Around = Callable[..., Any]


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
        originals[point] = owner.__dict__.get(attr, getattr(owner, attr)) if isinstance(owner, type) else getattr(owner, attr)
        reg.HookRegistry.register(_dotted(point), hooks[point], reg.HookType.AROUND)
    reg.HookRegistry.apply_hooks()
    for point, original in originals.items():
        path, attr = _dotted(point).rsplit(".", 1)
        owner = pkgutil.resolve_name(path)
        now = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr)
        if now is original or getattr(now, "__wrapped__", None) is None:
            raise RuntimeError(f"seam hook on {point} was not applied (HookRegistry logged the reason)")
