"""The policy scan allows the launcher (`import native`; native.launch / native.scratch calls)
exactly in the entry module of an op with [ops.cuda], and nothing else of native/ anywhere."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES
from native_bundles import SCALE, manifest

from cacheon_subnet.bundle import bundle_from_files, load_bundle
from cacheon_subnet.bundle.engine_tree import policy_gate
from cacheon_subnet.errors import BundleError
from cacheon_subnet.policy.scan import scan_files
from cacheon_subnet.verify.static import bound

GOOD = b"import native\n\ndef rmsnorm(x, weight, out, eps):\n    native.launch('scale', 1, 32, (out, x, 1, eps))\n"
TRITON_OP = '[[ops]]\nslot = "activation.silu_and_mul"\nentry = "t:silu_and_mul"\n'


def findings(files: dict[str, bytes], extra_ops: str = "") -> list[str]:
    files = {"manifest.toml": manifest() + extra_ops.encode(), "k.cu": SCALE.encode(), **files}
    b = bundle_from_files(files)
    return [str(f) for f in scan_files(dict(b.files), cuda_modules=b.manifest.cuda_modules(b.files))]


def test_the_cuda_example_is_clean_through_the_bounded_child_and_the_engine_tree():
    b = load_bundle(EXAMPLES / "cuda" / "norm.rmsnorm")
    bound.forget()
    assert bound.static_check(b, identity=True).findings == ()
    policy_gate("pkg", dict(b.files))  # raises on a finding
    assert findings({"w.py": GOOD}) == []


def test_without_the_cuda_op_the_same_import_is_refused_everywhere():
    b = load_bundle(EXAMPLES / "cuda" / "norm.rmsnorm")
    assert any("P003" in f and "import of 'native'" in f for f in map(str, scan_files(dict(b.files))))
    files = dict(b.files)
    files["manifest.toml"] = files["manifest.toml"].replace(b"[ops.cuda]", b"[ops.cuda_gone]")
    with pytest.raises(BundleError):
        policy_gate("pkg", files)


@pytest.mark.parametrize(
    ("files", "extra", "want"),
    [
        ({"w.py": GOOD, "t.py": b"import native\ndef silu_and_mul(x, out):\n    pass\n"}, TRITON_OP, "t.py:1: P003"),
        ({"w.py": GOOD, "h.py": b"import native\ndef f():\n    pass\n"}, "", "h.py:1: P003"),
        ({"w.py": GOOD.replace(b"import native\n", b"import native as n\n")}, "", "w.py:1: P003"),
        ({"w.py": GOOD + b"def g():\n    return native.build\n"}, "", "native.build is not on the allowlist"),
        ({"w.py": GOOD + b"def g(a):\n    native.driver.driver()\n"}, "", "native.driver.driver is not on the allowlist"),
        ({"w.py": GOOD + b"def g():\n    f = native.launch\n"}, "", "native.launch (call) used as a value"),
        ({"w.py": GOOD + b"def g(a):\n    native.launcher.op_call(a)\n"}, "", "is not on the allowlist"),
        (
            {"w.py": GOOD + b"import triton\n@triton.jit\ndef k(x):\n    native.launch('scale', 1, 1, ())\n"},
            "",
            "native.launch inside a Triton kernel",
        ),
        (
            {"w.py": GOOD, "t.py": b"from .w import rmsnorm\ndef silu_and_mul(x, out):\n    rmsnorm(x, x, out, 1.0)\n"},
            TRITON_OP,
            "w.py is a CUDA op's entry module",
        ),
        ({"w.py": GOOD + b"import ctypes\n"}, "", "P003"),
        ({"w.py": GOOD + b"def g():\n    torch.cuda.cudart()\n"}, "", "torch.cuda.cudart is not on the allowlist"),
    ],
)
def test_everything_else_of_native_cuda_and_ctypes_is_refused(files, extra, want):
    if b"torch.cuda" in files["w.py"]:
        files = {"w.py": b"import torch\n" + files["w.py"]}
    got = findings(files, extra)
    assert any(want in f for f in got), got


def test_a_module_shared_by_a_cuda_op_and_a_triton_op_may_not_import_native():
    shared = GOOD + b"def silu_and_mul(x, out):\n    pass\n"
    extra = '[[ops]]\nslot = "activation.silu_and_mul"\nentry = "w:silu_and_mul"\n'
    assert any("w.py:1: P003" in f for f in findings({"w.py": shared}, extra))
