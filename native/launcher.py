"""The validator-owned launcher: the only way bundle code runs a CUDA kernel.

A CUDA op's wrapper (its manifest entry) does `import native` and calls

    native.launch("rmsnorm_bf16", grid=(T,), block=(256,), args=(out, x, weight, H, sx, so, eps))
    native.scratch((n,), torch.float32)   # device workspace for this call, usable as a ptr argument

and nothing else of native/ (the policy scan allows exactly these two calls, and only in the
entry module of an op that has `[ops.cuda]`: cacheon_subnet/policy/allowlist.py NATIVE_CALLS).

Why a call scope: the wrapper cannot name an artifact, a file, a symbol of another op or a driver
call. The validator's runtime (verify's worker, the engine seam) opens `op_call(artifact,
tensors)` around each call of the op; `launch` resolves the kernel in that artifact only and
checks every argument against that call's tensors (native/argcheck.py). Outside a scope (a
Triton op, a module-import-time call, a thread the bundle cannot start anyway) a launch is
refused. A scope with no driver is a dry run: the checks run and the launch is recorded, nothing
reaches a GPU (how `cacheon verify` checks the argument tables on a CPU box: native_gate.py).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from native.argcheck import Checked, LaunchRefused, check_launch, find_kernel
from native.artifact import Artifact, KernelEntry

if TYPE_CHECKING:
    import torch

MAX_SCRATCH_BYTES = 8 * 2**30  # one call's scratch, all of it
MAX_LAUNCHES = 4096  # per call: a wrapper that loops launching is refused, not a hang of the host


class Launches(Protocol):
    def launch(self, art: Artifact, entry: KernelEntry, c: Checked) -> None: ...


@dataclass
class CallScope:
    """One call of one CUDA op: its artifact, its tensors, where its launches go."""

    artifact: Artifact
    device: torch.device
    tensors: tuple[torch.Tensor, ...]
    driver: Launches | None  # None: a dry run (checks only)
    scratch: list[torch.Tensor] = field(default_factory=list)
    launches: list[Checked] = field(default_factory=list)
    scratch_bytes: int = 0


_SCOPE: contextvars.ContextVar[CallScope | None] = contextvars.ContextVar("cacheon_native_call", default=None)


@contextlib.contextmanager
def op_call(
    artifact: Artifact, device: torch.device, tensors: Sequence[torch.Tensor], driver: Launches | None
) -> Iterator[CallScope]:
    """The scope of one call of a CUDA op (the validator's runtime opens it, never bundle code)."""
    scope = CallScope(artifact, device, tuple(tensors), driver)
    token = _SCOPE.set(scope)
    try:
        yield scope
    finally:
        _SCOPE.reset(token)


def _scope(kernel: object) -> CallScope:
    scope = _SCOPE.get()
    if scope is None:
        raise LaunchRefused(
            kernel,
            None,
            "no CUDA op call in progress: kernels launch only from a CUDA op's entry while the validator calls it",
        )
    return scope


def launch(kernel: str, grid: object, block: object, args: object, shared_mem: object = 0) -> None:
    """Launch `kernel` of the calling op's own artifact (bundle-facing; every argument is checked)."""
    scope = _scope(kernel)
    if len(scope.launches) >= MAX_LAUNCHES:
        raise LaunchRefused(kernel, None, f"more than {MAX_LAUNCHES} launches in one call")
    entry = find_kernel(scope.artifact.descriptor, kernel)
    allowed = (*scope.tensors, *scope.scratch)
    checked = check_launch(
        entry, grid, block, args, shared_mem, arch=scope.artifact.descriptor.arch, device=scope.device, allowed=allowed
    )
    scope.launches.append(checked)
    if scope.driver is not None:
        scope.driver.launch(scope.artifact, entry, checked)


def scratch(shape: object, dtype: object) -> torch.Tensor:
    """Uninitialised device memory for this call, which `launch` accepts as a ptr argument."""
    import torch

    scope = _scope("scratch")
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise LaunchRefused("scratch", None, f"shape must be an int or a tuple of ints, got {type(shape).__name__}")
    if any(not 0 <= d < 2**63 for d in shape) or not isinstance(dtype, torch.dtype):
        raise LaunchRefused(
            "scratch",
            None,
            f"shape {tuple(shape)[:8]} must be non-negative and dtype a torch.dtype (each dim an int64)",
        )
    if len(scope.scratch) >= MAX_LAUNCHES:  # each launch checks its pointers against every one
        raise LaunchRefused("scratch", None, f"more than {MAX_LAUNCHES} scratch tensors in one call")
    n = 1
    for d in shape:
        n *= d
    size = n * torch.empty((), dtype=dtype, device="meta").element_size()
    if scope.scratch_bytes + size > MAX_SCRATCH_BYTES:
        raise LaunchRefused("scratch", None, f"{scope.scratch_bytes + size} bytes of scratch > {MAX_SCRATCH_BYTES}")
    t = torch.empty(tuple(shape), dtype=dtype, device=scope.device)
    scope.scratch.append(t)
    scope.scratch_bytes += size
    return t
