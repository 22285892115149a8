"""The CUDA driver side of a launch: a sealed artifact's cubin loaded as a module, a kernel found
in it and launched on torch's current stream, through cuda-python's `cuda.bindings.driver`
(pinned: cacheon_subnet/pins.py CUDA_BINDINGS_PIN, in the `gpu` extra).

Why this binding: it is NVIDIA's own, kept in step with the driver API, so no hand-written ctypes
prototypes guess at the ABI. Why lazily imported: a CPU box (CI, a miner's laptop, the
validator's CPU screen) verifies and compiles CUDA bundles without it; only a launch needs it.
Why torch's current stream: inside a CUDA-graph capture it is the capturing stream, so the
launch is recorded and replays with the graph (a launch on another stream breaks the capture).
Bundle code never sees this module: the launcher (launcher.py) calls it after argcheck passed.
"""

from __future__ import annotations

import threading
from typing import Any

from cacheon_subnet.bundle.cuda import ParamType
from native.argcheck import DEFAULT_SHARED, Checked
from native.artifact import Artifact, KernelEntry
from native.diag import NativeError


class DriverMissing(NativeError):
    """cuda-python is not installed: this host cannot launch CUDA kernels (never the bundle's fault)."""


def _driver() -> Any:
    try:
        from cuda.bindings import driver  # type: ignore[import-not-found,unused-ignore]
    except ImportError as e:
        raise DriverMissing(
            f"launching a CUDA kernel needs cuda-python (pip install -e '.[gpu]': cuda-bindings): {e}"
        ) from None
    return driver


def _check(result: Any, what: str) -> Any:
    """cuda-python returns (CUresult, *values): the values, or NativeError naming the call."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise NativeError(f"{what} failed: {err!r}")
    return rest[0] if len(rest) == 1 else tuple(rest)


class Driver:
    """Loaded modules and functions, per (artifact digest, cubin, device); one per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._functions: dict[tuple[str, str, int], Any] = {}
        self._modules: dict[tuple[str, str, int], Any] = {}
        self._shared: dict[tuple[str, str, int], int] = {}

    def function(self, art: Artifact, entry: KernelEntry, device: int) -> Any:
        drv = _driver()
        key = (art.digest, entry.symbol, device)
        with self._lock:
            fn = self._functions.get(key)
            if fn is not None:
                return fn
            _check(drv.cuInit(0), "cuInit")
            mkey = (art.digest, entry.cubin, device)
            mod = self._modules.get(mkey)
            if mod is None:
                mod = _check(drv.cuModuleLoadData(art.cubin(entry.symbol)), f"cuModuleLoadData({entry.cubin})")
                self._modules[mkey] = mod
            fn = _check(drv.cuModuleGetFunction(mod, entry.symbol.encode()), f"cuModuleGetFunction({entry.symbol})")
            self._functions[key] = fn
            return fn

    def launch(self, art: Artifact, entry: KernelEntry, c: Checked) -> None:
        """`c` (already checked) on the current stream of the current device."""
        import torch

        drv = _driver()
        device = torch.cuda.current_device()
        fn = self.function(art, entry, device)
        key = (art.digest, entry.symbol, device)
        if c.shared_mem > max(DEFAULT_SHARED, self._shared.get(key, 0)):
            attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            _check(drv.cuFuncSetAttribute(fn, attr, c.shared_mem), "cuFuncSetAttribute(max dynamic shared memory)")
            self._shared[key] = c.shared_mem
        params = Packed(c)
        stream = drv.CUstream(torch.cuda.current_stream().cuda_stream)
        _check(
            drv.cuLaunchKernel(fn, *c.grid, *c.block, c.shared_mem, stream, params.pointers, 0),
            f"cuLaunchKernel({c.kernel})",
        )


# numpy types of the parameter types: the kernel reads each argument's bytes as the type it declared
_NP = {
    ParamType.PTR: "u8",
    ParamType.I32: "i4",
    ParamType.U32: "u4",
    ParamType.I64: "i8",
    ParamType.U64: "u8",
    ParamType.F32: "f4",
    ParamType.F64: "f8",
}


class Packed:
    """A launch's `void** kernelParams`, built without ctypes: each value in its own numpy cell
    of its declared type, and an array of their addresses (a buffer cuda-python reads directly).

    Why not cuda-python's (values, ctypes types) form: it falls back to ctypes.addressof, an event
    the worker's audit guard refuses once a bundle is imported (a launch would be refused as
    contribution code on the GPU box, never on a CPU one). Kept alive until the launch returns:
    cuLaunchKernel copies the parameters at the call."""

    def __init__(self, c: Checked) -> None:
        import numpy as np

        self.cells = [np.array([v], dtype=_NP[t]) for t, v in zip(c.types, c.values)]
        self.pointers = np.array([a.__array_interface__["data"][0] for a in self.cells], dtype="u8")

    def read(self, i: int) -> int | float:
        """Parameter i's value as the kernel will read it (tests)."""
        return self.cells[i][0].item()


_DRIVER: Driver | None = None


def driver() -> Driver:
    global _DRIVER
    if _DRIVER is None:
        _DRIVER = Driver()
    return _DRIVER
