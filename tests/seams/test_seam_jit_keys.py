"""One engine, one Triton cache: a challenger must not choose the binary the incumbent runs.

Triton hashes a kernel's text, def line, callees and *constexpr* globals only; a module constant
`ACC = tl.float32` (policy-clean; `tl.constexpr(...)` is not) is read by the code generator but
not hashed. A challenger that copies the incumbent's kernel line for line with `ACC = tl.float64`
got the same cache key, and whichever compiled first in the engine's shared cache dir was the
binary both ran: the incumbent's B windows ran the challenger's fp64 build (red team 2026-12-04).
cacheon_subnet/bundle/jitkeys.py salts every sealed kernel's key with its module's qualified name at activation.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

# Run in a child without TRITON_INTERPRET: the check needs Triton's compiled-mode JITFunction, and
# importing triton in compiled mode in a test worker would leave triton.language's own @jit
# helpers compiled for every later in-process interpreter test of that worker.
CHILD = r"""
import sys, uuid
from pathlib import Path
import pytest  # noqa: F401
try:
    import triton
except ImportError:
    print("SKIP no triton"); raise SystemExit(0)
from cacheon_subnet.bundle.archive import bundle_from_files
from cacheon_subnet.bundle.engine_tree import build_tree
from seams import activate, hooks
from seams.dispatch import Registry
from seams.table import seam_environment

KERNEL = '''# RMSNorm accumulating in a module-level dtype.

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



tmp = Path(sys.argv[1])
activate._state = {}
activate.adapter_hooks = lambda adapter: {}  # no SGLang here: nothing to hook
hooks.install_hooks = lambda hs: None
salt = uuid.uuid4().hex
challenger, incumbent = _bundle("float64", salt), _bundle("float32", salt)
tree = build_tree(tmp / "tree", [(challenger, challenger.manifest.ops)], incumbents=[(incumbent, incumbent.manifest.ops)])
(tmp / "receipts").mkdir()
env = {**seam_environment(("norm",)), "CACHEON_ENGINE_TREE": str(tree.root),
       "CACHEON_ENGINE_TREE_DIGEST": tree.digest, "CACHEON_RECEIPT_DIR": str(tmp / "receipts")}
if sys.argv[2] == "unsalted":  # the broken control: activation without the salt
    activate.salt_kernel_keys = lambda package: 0
assert activate.activate_scheduler(0, Registry(), env) is True
kernels = {op.role: sys.modules[f"{op.package}.rmsnorm"]._rmsnorm_kernel for op in tree.ops}
from triton.compiler import ASTSource
keys = {role: ASTSource(k, SIGNATURE, {"BLOCK": 64}).hash() for role, k in kernels.items()}
print("KEYS", "distinct" if keys["challenger"] != keys["incumbent"] else "shared")
import os
os.environ["TRITON_CACHE_DIR"] = str(tmp / "triton")  # the engine's one cache copy
from triton.backends.compiler import GPUTarget
target = GPUTarget("cuda", 90, 32)  # compiling needs no GPU (ptxas ships with Triton)
ttir = {}
for role in ("challenger", "incumbent"):  # the engine starts on the candidate route: the copy first
    try:
        ttir[role] = triton.compile(ASTSource(kernels[role], SIGNATURE, {"BLOCK": 64}), target=target).asm["ttir"]
    except Exception as e:  # a Triton without the CUDA toolchain
        print("NOCOMPILE", repr(e)[:200]); raise SystemExit(0)
print("BINARY", "own" if "f64" in ttir["challenger"] and "f64" not in ttir["incumbent"] else "shared")
"""


def _child(tmp_path: Path, mode: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), mode], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    return out.stdout


def test_a_copied_kernel_with_another_dtype_constant_gets_its_own_cache_key_and_binary(tmp_path: Path) -> None:
    got = _child(tmp_path, "salted")
    if "SKIP" in got:
        import pytest

        pytest.skip("no triton")
    assert "KEYS distinct" in got, got
    assert "BINARY own" in got or "NOCOMPILE" in got, got  # NOCOMPILE: no CUDA toolchain in this Triton


def test_broken_control_without_the_salt_the_copy_shares_the_key_and_the_binary(tmp_path: Path) -> None:
    got = _child(tmp_path, "unsalted")
    if "SKIP" in got:
        import pytest

        pytest.skip("no triton")
    assert "KEYS shared" in got, got
    assert "BINARY shared" in got or "NOCOMPILE" in got, got
