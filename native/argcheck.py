"""The launcher's checks of one kernel launch, pure and CPU-testable: the kernel is one of the
op's own artifact, the arguments match its parameter table, the grid, block and dynamic shared
memory are within what the hardware takes.

Why here and not in the driver: a bad launch must be refused before any byte reaches the CUDA
driver (an int read as a pointer is a wild write; a grid past the limits is a sticky launch
error that poisons the validator's context), and every refusal must name the kernel, the
parameter and why, on a CPU box as on the H200. A pointer parameter takes a torch tensor only,
on the call's device, lying wholly inside one of the call's argument tensors or the scratch the
launcher allocated for it (by byte range: a view inside such a tensor is fine); the kernel gets
its data_ptr. Scalars are range-checked by their declared type.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cacheon_subnet.bundle.cuda import ParamType
from cacheon_subnet.errors import BundleError
from native.artifact import Descriptor, KernelEntry

if TYPE_CHECKING:
    import torch

# CUDA's launch limits (compute capability 9.0; the same for 7.0-12.x).
MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS = 1024
MAX_GRID = (2**31 - 1, 65535, 65535)
DEFAULT_SHARED = 48 * 1024  # without the opt-in attribute
# The opt-in maximum of dynamic shared memory per block, by arch (CUDA programming guide, table
# "Technical Specifications per Compute Capability"); an arch not listed gets the default 48 KiB.
OPT_IN_SHARED = {
    "sm_80": 163 * 1024,
    "sm_86": 99 * 1024,
    "sm_87": 163 * 1024,
    "sm_89": 99 * 1024,
    "sm_90": 227 * 1024,
    "sm_100": 227 * 1024,
    "sm_103": 227 * 1024,
    "sm_120": 99 * 1024,
}
INT_RANGE = {
    ParamType.I32: (-(2**31), 2**31 - 1),
    ParamType.U32: (0, 2**32 - 1),
    ParamType.I64: (-(2**63), 2**63 - 1),
    ParamType.U64: (0, 2**64 - 1),
}
F32_MAX = 3.4028234663852886e38


class LaunchRefused(BundleError):
    """A launch the launcher will not make: the bundle's fault (a FAIL), named by kernel and parameter."""

    def __init__(self, kernel: object, index: int | None, why: str) -> None:
        self.kernel, self.index, self.why = str(kernel)[:80], index, why
        where = f"kernel {self.kernel!r}" + (f" parameter {index}" if index is not None else "")
        super().__init__("launch", "native-launch", f"{where}: {why}")


@dataclass(frozen=True)
class Checked:
    """One launch as the driver will make it."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    types: tuple[ParamType, ...]
    values: tuple[int | float, ...]  # pointers as data_ptr ints, scalars as given


def shared_limit(arch: str) -> int:
    """The most dynamic shared memory a block of `arch` (sm_90a -> sm_90) may opt in to."""
    return OPT_IN_SHARED.get(arch.rstrip("af"), DEFAULT_SHARED)


def find_kernel(desc: Descriptor, name: object) -> KernelEntry:
    """The kernel `name` of this op's own artifact; nothing else can be named."""
    if not isinstance(name, str):
        raise LaunchRefused(repr(name)[:40], None, f"the kernel is named by a str, got {type(name).__name__}")
    for k in desc.kernels:
        if k.symbol == name:
            return k
    have = ", ".join(k.symbol for k in desc.kernels)
    raise LaunchRefused(name, None, f"not a kernel of this op's artifact (it has: {have})")


def dims(kernel: str, what: str, raw: object, limits: tuple[int, int, int]) -> tuple[int, int, int]:
    """A grid or block as (x, y, z): an int or a tuple of 1 to 3 ints, each in 1..its limit."""
    items = (raw,) if _is_int(raw) else raw
    if not isinstance(items, (tuple, list)) or not 1 <= len(items) <= 3 or not all(_is_int(d) for d in items):
        raise LaunchRefused(kernel, None, f"{what} must be an int or a tuple of 1 to 3 ints, got {_show(raw)}")
    full = (*(int(d) for d in items), 1, 1)[:3]
    for axis, d, top in zip("xyz", full, limits):
        if not 1 <= d <= top:
            raise LaunchRefused(kernel, None, f"{what}.{axis} = {d} is outside 1..{top}")
    return full[0], full[1], full[2]


def check_launch(
    entry: KernelEntry,
    grid: object,
    block: object,
    args: object,
    shared_mem: object,
    *,
    arch: str,
    device: torch.device,
    allowed: Sequence[torch.Tensor],
) -> Checked:
    """`entry` launched with these: the Checked launch, or LaunchRefused saying what is wrong.
    `allowed`: this call's argument tensors and the launcher's scratch for it."""
    k = entry.symbol
    g = dims(k, "grid", grid, MAX_GRID)
    b = dims(k, "block", block, MAX_BLOCK)
    if b[0] * b[1] * b[2] > MAX_THREADS:
        raise LaunchRefused(k, None, f"block {b} has {b[0] * b[1] * b[2]} threads > {MAX_THREADS}")
    top = shared_limit(arch)
    if not _is_int(shared_mem) or not 0 <= int(shared_mem) <= top:  # type: ignore[call-overload]
        raise LaunchRefused(k, None, f"shared_mem = {_show(shared_mem)}: dynamic shared memory is 0..{top} bytes on {arch}")
    if not isinstance(args, (tuple, list)):
        raise LaunchRefused(k, None, f"args must be a tuple of the kernel's arguments, got {type(args).__name__}")
    if len(args) != len(entry.params):
        want = ", ".join(p.value for p in entry.params)
        raise LaunchRefused(k, None, f"{len(args)} arguments for {len(entry.params)} parameters ({want})")
    spans = [_span(t) for t in allowed]
    values = tuple(_value(k, i, p, a, device, spans) for i, (p, a) in enumerate(zip(entry.params, args)))
    return Checked(k, g, b, int(shared_mem), entry.params, values)  # type: ignore[call-overload]


def _value(k: str, i: int, p: ParamType, a: object, device: torch.device, spans: list[tuple[int, int]]) -> int | float:
    if p is ParamType.PTR:
        return _pointer(k, i, a, device, spans)
    if p in INT_RANGE:
        lo, hi = INT_RANGE[p]
        if not _is_int(a):
            raise LaunchRefused(k, i, f"{p.value} takes a Python int, got {_show(a)}")
        if not lo <= int(a) <= hi:  # type: ignore[call-overload]
            raise LaunchRefused(k, i, f"{a} does not fit {p.value} ({lo}..{hi})")
        return int(a)  # type: ignore[call-overload]
    if isinstance(a, bool) or not isinstance(a, (int, float)):
        raise LaunchRefused(k, i, f"{p.value} takes a Python float, got {_show(a)}")
    v = float(a)
    if p is ParamType.F32 and math.isfinite(v) and abs(v) > F32_MAX:
        raise LaunchRefused(k, i, f"{v!r} overflows f32")
    return v


def _pointer(k: str, i: int, a: object, device: torch.device, spans: list[tuple[int, int]]) -> int:
    import torch

    if not isinstance(a, torch.Tensor):
        raise LaunchRefused(k, i, f"ptr takes a tensor of this call (its data_ptr is passed), got {_show(a)}")
    if a.device != device:
        raise LaunchRefused(k, i, f"the tensor is on {a.device}, the call runs on {device}")
    lo, hi = _span(a)
    if not any(s <= lo and hi <= e for s, e in spans):
        raise LaunchRefused(
            k,
            i,
            "the tensor is not one of this call's argument tensors, a view inside one, or scratch the "
            "launcher allocated for this call",
        )
    return lo


def _span(t: torch.Tensor) -> tuple[int, int]:
    """The bytes [start, end) the tensor's elements occupy (any strides; empty: a point). Plain
    ints: an int subclass from a tensor subclass's data_ptr could compare as inside any span and
    still reach the driver as a wild address (red team, session 16; wall 1 already refuses the class)."""
    start = int(t.data_ptr())
    if t.numel() == 0:
        return start, start
    if any(s < 0 for s in t.stride()):
        raise LaunchRefused("", None, "a tensor with negative strides")
    last = sum((int(n) - 1) * int(s) for n, s in zip(t.shape, t.stride()))
    return start, start + (last + 1) * int(t.element_size())


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _show(v: Any) -> str:
    """A refused value, short (never a tensor's contents)."""
    if type(v).__name__ == "Tensor":
        return f"a tensor of shape {tuple(v.shape)}"
    return f"{type(v).__name__} {str(v)[:40]!r}" if not isinstance(v, (int, float)) else f"{type(v).__name__} {v!r}"
