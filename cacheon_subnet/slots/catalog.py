"""The slot catalog: every module in `slots/defs/` contributes its `SLOTS` tuple.

Adding a slot is one file in `defs/` (plus its tests); nothing else keeps a list.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from functools import lru_cache
from types import MappingProxyType

from cacheon_subnet.errors import SlotError
from cacheon_subnet.slots.spec import SlotSpec


@lru_cache(maxsize=1)
def catalog() -> Mapping[str, SlotSpec]:
    from cacheon_subnet.slots import defs

    found: dict[str, SlotSpec] = {}
    for info in sorted(pkgutil.iter_modules(defs.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{defs.__name__}.{info.name}")
        for spec in getattr(module, "SLOTS", ()):
            if spec.id in found:
                raise SlotError(f"slot {spec.id} defined twice (second in defs/{info.name}.py)")
            found[spec.id] = spec
    return MappingProxyType(dict(sorted(found.items())))


def get_slot(slot_id: str, version: int | None = None) -> SlotSpec:
    """Look a slot up by id (and optionally check its ABI version)."""
    specs = catalog()
    if slot_id not in specs:
        raise SlotError(f"unknown slot {slot_id!r} (known: {', '.join(specs)})")
    spec = specs[slot_id]
    if version is not None and version != spec.version:
        raise SlotError(f"slot {slot_id} is at ABI version {spec.version}, not {version}")
    return spec


def all_slots() -> tuple[SlotSpec, ...]:
    return tuple(catalog().values())
