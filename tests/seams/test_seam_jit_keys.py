"""One engine, one Triton cache: a challenger must not choose the binary the incumbent runs.

Triton hashes a kernel's text, def line, callees and *constexpr* globals only; a module constant
`ACC = tl.float32` (policy-clean; `tl.constexpr(...)` is not) is read by the code generator but
not hashed. A challenger that copies the incumbent's kernel line for line with `ACC = tl.float64`
got the same cache key, and whichever compiled first in the engine's shared cache dir was the
binary both ran: the incumbent's B windows ran the challenger's fp64 build (red team 2026-12-04).
cacheon_subnet/bundle/jitkeys.py salts every sealed kernel's key with its module's qualified name at activation.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

pytest.importorskip("triton")

from cacheon_subnet.bundle.archive import bundle_from_files  # noqa: E402
from cacheon_subnet.bundle.engine_tree import build_tree  # noqa: E402
from seams import activate, hooks  # noqa: E402
from seams.dispatch import Registry  # noqa: E402
from seams.table import seam_environment  # noqa: E402

KERNEL = '''"""RMSNorm accumulating in a module-level dtype."""

import torch
import triton
import triton.language as tl

ACC = tl.{acc}


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, out_ptr, H, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < H
    x = tl.load(x_ptr + row * H + cols, mask=mask, other=0.0).to(ACC)
    var = tl.sum(x * x, axis=0) / H
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(ACC)
    tl.store(out_ptr + row * H + cols, (x / tl.sqrt(var + eps) * w).to(out_ptr.dtype.element_ty), mask=mask)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    T, H = x.shape
    _rmsnorm_kernel[(T,)](x, weight, out, H, eps, BLOCK=triton.next_power_of_2(H))
'''
SIGNATURE = {"x_ptr": "*fp32", "w_ptr": "*fp32", "out_ptr": "*fp32", "H": "i32", "eps": "fp32", "BLOCK": "constexpr"}


def _bundle(acc: str, salt: str):  # noqa: ANN202
    manifest = (f'schema = "cacheon.bundle/2"\n\n[bundle]\nname = "acc-{acc}-{salt}"\n\n'
                '[[ops]]\nslot = "norm.rmsnorm"\nentry = "rmsnorm:rmsnorm"\ndtypes = ["float32"]\n')
    return bundle_from_files({"manifest.toml": manifest.encode(), "rmsnorm.py": KERNEL.format(acc=acc).encode()})


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """Activate a head-to-head tree (challenger fp64 copy, incumbent fp32) in this process."""
    monkeypatch.setattr(activate, "_state", {})
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(activate, "adapter_hooks", lambda adapter: {})  # no SGLang here: nothing to hook
    monkeypatch.setattr(hooks, "install_hooks", lambda hs: None)
    salt = uuid.uuid4().hex  # custom-op names derive from digests and must be new in this process
    challenger, incumbent = _bundle("float64", salt), _bundle("float32", salt)
    tree = build_tree(tmp_path / "tree", [(challenger, challenger.manifest.ops)],
                      incumbents=[(incumbent, incumbent.manifest.ops)])  # both policy-clean: sealed
    (tmp_path / "receipts").mkdir()
    env = {**seam_environment(("norm",)), "CACHEON_ENGINE_TREE": str(tree.root),
           "CACHEON_ENGINE_TREE_DIGEST": tree.digest, "CACHEON_RECEIPT_DIR": str(tmp_path / "receipts")}
    assert activate.activate_scheduler(0, Registry(), env) is True
    pkgs = {op.role: op.package for op in tree.ops}
    yield {role: sys.modules[f"{pkg}.rmsnorm"]._rmsnorm_kernel for role, pkg in pkgs.items()}
    for name in [m for m in sys.modules if m.startswith("cacheon_c_")]:
        del sys.modules[name]


def test_a_copied_kernel_with_another_dtype_constant_gets_its_own_cache_key(engine: dict) -> None:
    from triton.compiler import ASTSource

    keys = {role: ASTSource(k, SIGNATURE, {"BLOCK": 64}).hash() for role, k in engine.items()}
    assert keys["challenger"] != keys["incumbent"], "one Triton cache key for two different kernels"


def test_the_incumbent_compiled_after_the_copy_runs_its_own_binary(engine: dict, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))  # the engine's one cache copy
    target = GPUTarget("cuda", 90, 32)  # compiling needs no GPU (ptxas ships with Triton)
    ttir = {}
    for role in ("challenger", "incumbent"):  # the engine starts on the candidate route: the copy first
        try:
            compiled = triton.compile(ASTSource(engine[role], SIGNATURE, {"BLOCK": 64}), target=target)
        except Exception as e:  # noqa: BLE001 - a Triton without the CUDA toolchain
            pytest.skip(f"Triton cannot compile for {target} here: {e!r}"[:200])
        ttir[role] = compiled.asm["ttir"]
    assert "f64" in ttir["challenger"]
    assert "f64" not in ttir["incumbent"], "the incumbent ran the challenger's fp64 binary from the shared cache"
