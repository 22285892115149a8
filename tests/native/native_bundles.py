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


# -- a CUDA op through verify's worker, in process, the driver a recorder (tests only) ---------
RMS_KEY = "norm.rmsnorm@1:default"
RMS_DECL = {f"rmsnorm_{s}": ["ptr", "ptr", "ptr", "i32", "i64", "i64", "f32"] for s in ("bf16", "f16", "f32")}


class RecordingDriver:
    """Stands in for native/driver.py: records each launch with the tensors of its call scope."""

    def __init__(self) -> None:
        self.calls: list = []

    def launch(self, art, entry, checked) -> None:
        from native import launcher

        scope = launcher._SCOPE.get()
        self.calls.append((art.digest, entry.symbol, checked, scope.tensors if scope else None))


def worker_with(tmp_path, wrapper: str, driver=None, natives: bool = True):
    """A Worker on cpu holding `wrapper` as norm.rmsnorm's entry (module rmsnorm, attr rmsnorm),
    its artifact declaring RMS_DECL; returns (worker, host socket, child socket, Loaded)."""
    import socket
    import sys
    import uuid

    from cacheon_subnet.verify import protocol as P
    from cacheon_subnet.verify import wire
    from cacheon_subnet.verify.worker import Worker

    host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pkg = f"cuda_rt_{uuid.uuid4().hex[:8]}"
    (tmp_path / pkg).mkdir()
    (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / pkg / "rmsnorm.py").write_text(wrapper)
    sys.path.insert(0, str(tmp_path))
    try:
        arts = {RMS_KEY: fake_artifact(RMS_DECL)} if natives else {}
        w = Worker(child.fileno(), str(tmp_path / pkg), pkg, "cpu", natives=arts, driver=driver)
        w.on_load(P.Load((P.LoadOp(RMS_KEY, "norm.rmsnorm", "rmsnorm", "rmsnorm"),)), {})
    finally:  # the module is loaded; a temp dir left on sys.path would be handed to every later sandboxed child
        sys.path.remove(str(tmp_path))
    head, _ = wire.recv(host.fileno())
    return w, host, child, P.read_reply(head, P.Loaded)


def call_op(w, host, T: int = 4, H: int = 64, mode: str = "eager"):
    """One P.Call of the op through the worker's on_call; its P.Result."""
    import torch

    from cacheon_subnet.verify import protocol as P
    from cacheon_subnet.verify import wire

    x, weight = torch.randn(T, H), torch.randn(H)
    alloc = {"out": P.Alloc("float32", (T, H), 0)}
    w.on_call(P.Call(RMS_KEY, {"eps": 1e-6}, alloc, False, P.CallMode(mode), "n" * 32), {"x": x, "weight": weight})
    head, _ = wire.recv(host.fileno())
    return P.read_reply(head, P.Result)
