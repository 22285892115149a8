"""Stock SGLang 0.5.13.post1 kernels behind the slot calling convention (keyword args, writes
into out/inout, returns None). `cacheon bench` times candidates against these.

Each module in this package exports `STOCK = {slot_id: factory}`; a factory imports SGLang
lazily and returns the callable, so importing this package never needs a GPU or SGLang.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from functools import cache, lru_cache
from typing import Any

StockFactory = Callable[[], Callable[..., None]]


@lru_cache(maxsize=1)
def stock_table() -> Mapping[str, StockFactory]:
    table: dict[str, StockFactory] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for slot_id, factory in getattr(module, "STOCK", {}).items():
            if slot_id in table:
                raise RuntimeError(f"stock kernel for {slot_id} defined twice")
            table[slot_id] = factory
    return table


@cache
def stock_kernel(slot_id: str) -> tuple[Callable[..., Any] | None, str]:
    """(callable, description) or (None, why not) when SGLang is not importable here. Memoized:
    the bench worker loads it before its audit guard is armed (verify/worker.py --preload-stock)."""
    factory = stock_table().get(slot_id)
    if factory is None:
        return None, "no stock binding for this slot"
    try:
        return factory(), getattr(factory, "__doc__", "") or slot_id
    except Exception as e:  # noqa: BLE001 - ImportError, missing CUDA ops, JIT failures
        return None, f"stock kernel unavailable: {type(e).__name__}: {e}"
