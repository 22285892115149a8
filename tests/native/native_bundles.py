"""Shared by the compile lane's tests: CUDA bundles in memory, and the skip when nvcc is absent."""

from __future__ import annotations

import pytest

from cacheon_subnet.bundle import Bundle, bundle_from_files

WRAPPER = b"def rmsnorm(x, weight, out, eps):\n    raise NotImplementedError('launcher: issue 32 part 2')\n"
SCALE = 'extern "C" __global__ void scale(float* o, const float* i, int n, float a) { if (threadIdx.x < n) o[threadIdx.x] = i[threadIdx.x] * a; }\n'
SCALE_DECL = 'scale = ["ptr", "ptr", "i32", "f32"]'


def manifest(kernels: str = SCALE_DECL, sources: str = '["k.cu"]', schema: str = "cacheon.bundle/3") -> bytes:
    return (
        f'schema = "{schema}"\n[[ops]]\nslot = "norm.rmsnorm"\nentry = "w:rmsnorm"\n'
        f"[ops.cuda]\nsources = {sources}\nkernels = {{ {kernels} }}\n"
    ).encode()


def cuda_bundle(
    cu: str = SCALE, kernels: str = SCALE_DECL, extra: dict[str, bytes] | None = None, sources: str = '["k.cu"]'
) -> Bundle:
    files = {"manifest.toml": manifest(kernels, sources), "w.py": WRAPPER, "k.cu": cu.encode(), **(extra or {})}
    return bundle_from_files(files)


def _toolchain_why() -> str | None:
    from native.toolchain import ToolchainMissing, locate

    try:
        locate()
    except ToolchainMissing as e:
        return str(e)
    return None


_WHY = _toolchain_why()
needs_nvcc = pytest.mark.skipif(
    _WHY is not None, reason=f"the pinned CUDA toolchain is not installed ({_WHY}); CI installs it (make install)"
)


def fake_artifact(decl: dict[str, list[str]], arch: str = "sm_90a"):
    """An Artifact whose descriptor declares `decl` (kernel -> param types) and holds no cubin:
    the launcher's checks read only the descriptor, so they run on a CPU box without nvcc."""
    from pathlib import Path

    from cacheon_subnet.bundle.cuda import ParamType
    from native.artifact import Artifact, Descriptor, KernelEntry
    from native.toolchain import ToolchainId

    kernels = tuple(
        KernelEntry(name, tuple(ParamType(p) for p in ps), tuple(ParamType(p).ptx_class for p in ps), "k.cu", "unit0.cubin")
        for name, ps in sorted(decl.items())
    )
    tc = ToolchainId("-", "-", "-", ())
    desc = Descriptor("cacheon.native/1", "norm.rmsnorm", "default", arch, "0" * 64, "0" * 64, tc, (), kernels)
    return Artifact(Path("/nonexistent"), "f" * 64, desc, cached=False)
