"""The stable semantic ABI miners write kernels against (see spec.py)."""

from cacheon_subnet.slots.catalog import all_slots, catalog, get_slot
from cacheon_subnet.slots.spec import ArgSpec, ParamSpec, ShapeCase, SlotSpec, Tolerance

__all__ = ["ArgSpec", "ParamSpec", "ShapeCase", "SlotSpec", "Tolerance", "all_slots", "catalog", "get_slot"]
