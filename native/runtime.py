"""Where the validator's runtimes meet the launcher: a sealed artifact opened in the process that
runs the op (verify's worker, bench's worker, a scheduler rank), and the op's entry wrapped so
every call runs inside its own call scope (launcher.op_call).

Why one wrap for all three: verify, bench and the engine must run a CUDA op exactly alike, so
the scope, the tensors it admits and the driver are chosen here once. The host compiles (the
lane runs behind the wall, never in these processes) and hands over the artifact's directory
read-only; `open_sealed` re-digests it before any byte is used, so a swapped or edited cubin is
refused, not loaded. The driver: the real one on a CUDA device, `NoGpu` (a refusal naming why)
elsewhere, or a test's recorder passed as a Python argument (never reachable from bundle code).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from native.argcheck import Checked, LaunchRefused
from native.artifact import Artifact, KernelEntry, load
from native.diag import NativeError
from native.launcher import Launches, op_call

if TYPE_CHECKING:
    import torch

NO_GPU = "CUDA trials need a GPU: this process runs on the CPU, so no kernel was launched"


class NoGpu:
    """The driver of a process without a CUDA device: every launch refused, with the reason."""

    def launch(self, art: Artifact, entry: KernelEntry, c: Checked) -> None:
        raise LaunchRefused(c.kernel, None, NO_GPU)


def driver_for(device: torch.device) -> Launches:
    """The real driver (cuda-python, current stream) on a CUDA device; NoGpu anywhere else."""
    if device.type != "cuda":
        return NoGpu()
    from native.driver import driver

    return driver()


def open_sealed(root: Path, digest: str) -> Artifact:
    """The artifact `root/digest`, re-digested: NativeError when absent or not what its name says."""
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise NativeError(f"native artifact {digest[:80]!r}: not a sha256 digest")
    art = load(Path(root) / digest, cached=True)
    if art is None:
        raise NativeError(f"native artifact {digest[:16]}… under {root}: missing, or its files do not digest to its name")
    return art


def preload(art: Artifact, driver: Launches) -> int:
    """Load every kernel's module now (cuModuleLoadData), not inside a timed or captured call.
    Returns how many kernels were loaded (0 for a driver that loads nothing: NoGpu, a recorder)."""
    from native.driver import Driver

    if not isinstance(driver, Driver):
        return 0
    import torch

    device = torch.cuda.current_device()
    for k in art.descriptor.kernels:
        driver.function(art, k, device)
    return len(art.descriptor.kernels)


def open_for_process(root: str | None, items: Sequence[str], device: torch.device) -> tuple[dict[str, Artifact], Launches]:
    """A worker's CUDA ops (`OPKEY=DIGEST` items under `root`), opened and preloaded, and its
    driver. NativeError when one is missing or altered: the host's trouble, never a verdict."""
    driver = driver_for(device)
    natives: dict[str, Artifact] = {}
    for item in items:
        key, sep, digest = item.partition("=")
        if not sep or not key or root is None:
            raise NativeError(f"--native {item[:120]!r}: expected OPKEY=DIGEST with --native-root")
        natives[key] = art = open_sealed(Path(root), digest)
        preload(art, driver)
    return natives, driver


def call_tensors(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[torch.Tensor, ...]:
    """The tensors one call was handed (positional and keyword, and inside a list or tuple of
    them: a slot's paged pools): the only memory its launches may point into."""
    import torch

    out: list[torch.Tensor] = []
    for v in (*args, *kwargs.values()):
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out += [t for t in v if isinstance(t, torch.Tensor)]
    return tuple(out)


def resolved(device: torch.device | None) -> torch.device | None:
    """`cuda` as the device it means here (cuda:N, the current one): `--device cuda` gives a bare
    torch.device("cuda"), which never equals the cuda:0 every tensor reports, so argcheck's device
    check refused every honest launch of verify's worker (red team, session 16)."""
    if device is not None and device.type == "cuda" and device.index is None:
        import torch

        return torch.device("cuda", torch.cuda.current_device())
    return device


def wrap(
    fn: Callable[..., Any], art: Artifact, driver: Launches | None, device: torch.device | None = None
) -> Callable[..., Any]:
    """`fn` (a CUDA op's entry) with every call inside `op_call(art, device, its tensors, driver)`.
    `device`: the process's (verify's worker); None takes the first tensor's (a scheduler rank)."""
    device = resolved(device)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        import torch

        tensors = call_tensors(args, kwargs)
        dev = device if device is not None else (tensors[0].device if tensors else torch.device("cpu"))
        with op_call(art, dev, tensors, driver):
            return fn(*args, **kwargs)

    call.__cacheon_native__ = art.digest  # type: ignore[attr-defined]  # seen by tests and receipts, not by bundles
    return call
