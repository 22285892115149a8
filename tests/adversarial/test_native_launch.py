"""Launch-time attacks on the validator's launcher that a CPU box can judge (issue 32, item 6).

First the launcher's checks one by one (the kernel named only from the op's own artifact, the
argument table, grid/block/shared-memory limits, the call scope, the driver stubbed; the example's
wrapper in a dry-run scope for trial shapes of its slot); then each attack as a CUDA op's wrapper
run through verify's worker call path, with a recording driver in place of the GPU
(tests/native/native_bundles.py): each ends refused with its reason, as the op's FAIL, and nothing
reaches the driver. The GPU-only attacks (trap, hang, out-of-bounds, capture): native_gpu/.
(Moved here from tests/native/test_native_launch.py.)
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from conftest import EXAMPLES

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "native"))
from native_bundles import RecordingDriver, call_op, fake_artifact, worker_with  # noqa: E402

import native  # noqa: E402
from cacheon_subnet.verify import protocol as P  # noqa: E402
from native.argcheck import LaunchRefused, shared_limit  # noqa: E402
from native.launcher import MAX_LAUNCHES, op_call  # noqa: E402

DECL = {"scale": ["ptr", "ptr", "i32", "f32"], "wide": ["ptr", "u32", "i64", "u64", "f64"]}
CPU = torch.device("cpu")


class Recorder:
    def __init__(self) -> None:
        self.calls: list = []

    def launch(self, art, entry, checked) -> None:
        self.calls.append((art.digest, entry.symbol, checked))


def scope(*tensors, driver=None, arch="sm_90a"):
    return op_call(fake_artifact(DECL, arch), CPU, tensors, driver)


def test_a_good_launch_reaches_the_driver_with_pointers_and_typed_scalars():
    o, i = torch.empty(64), torch.randn(64)
    rec = Recorder()
    with scope(o, i, driver=rec) as s:
        native.launch("scale", grid=(2,), block=32, args=(o, i[8:], 56, 0.5))
    [(digest, sym, c)] = rec.calls
    assert digest == "f" * 64 and sym == "scale" and c.grid == (2, 1, 1) and c.block == (32, 1, 1)
    assert c.values == (o.data_ptr(), i.data_ptr() + 8 * 4, 56, 0.5) and s.launches == [c]


def test_scratch_is_this_calls_and_launchable():
    o = torch.empty(4)
    with scope(o) as s:
        w = native.scratch((16,), torch.float32)
        native.launch("scale", 1, 1, (o, w, 1, 1.0))
    assert s.scratch == [w] and s.scratch_bytes == 64


@pytest.mark.parametrize(
    ("kernel", "grid", "block", "args", "shmem", "why"),
    [
        ("nope", 1, 1, (), 0, "not a kernel of this op's artifact (it has: scale, wide)"),
        ("scale", 1, 1, ("O", "I", 1), 0, "3 arguments for 4 parameters"),
        ("scale", 1, 1, ["O", "I", 1, 1.0, 2], 0, "5 arguments for 4 parameters"),
        ("scale", 1, 1, ("O", 12345678, 1, 1.0), 0, "parameter 1: ptr takes a tensor of this call"),
        ("scale", 1, 1, ("O", "I", 2**31, 1.0), 0, "parameter 2: 2147483648 does not fit i32"),
        ("scale", 1, 1, ("O", "I", True, 1.0), 0, "parameter 2: i32 takes a Python int, got bool"),
        ("scale", 1, 1, ("O", "I", 1.5, 1.0), 0, "parameter 2: i32 takes a Python int, got float"),
        ("scale", 1, 1, ("O", "I", 1, "x"), 0, "parameter 3: f32 takes a Python float"),
        ("scale", 1, 1, ("O", "I", 1, 1e39), 0, "parameter 3: 1e+39 overflows f32"),
        ("wide", 1, 1, ("O", -1, 1, 1, 1.0), 0, "parameter 1: -1 does not fit u32"),
        ("wide", 1, 1, ("O", 1, 2**63, 1, 1.0), 0, "parameter 2: 9223372036854775808 does not fit i64"),
        ("wide", 1, 1, ("O", 1, 1, 2**64, 1.0), 0, "parameter 3: 18446744073709551616 does not fit u64"),
        ("scale", 1, (1025,), ("O", "I", 1, 1.0), 0, "block.x = 1025 is outside 1..1024"),
        ("scale", 1, (32, 32, 2), ("O", "I", 1, 1.0), 0, "has 2048 threads > 1024"),
        ("scale", 1, (1, 1, 65), ("O", "I", 1, 1.0), 0, "block.z = 65 is outside 1..64"),
        ("scale", (1, 65536), 1, ("O", "I", 1, 1.0), 0, "grid.y = 65536 is outside 1..65535"),
        ("scale", 2**31, 1, ("O", "I", 1, 1.0), 0, "grid.x = 2147483648 is outside 1..2147483647"),
        ("scale", 0, 1, ("O", "I", 1, 1.0), 0, "grid.x = 0 is outside"),
        ("scale", (1, 1, 1, 1), 1, ("O", "I", 1, 1.0), 0, "grid must be an int or a tuple of 1 to 3 ints"),
        ("scale", 1.0, 1, ("O", "I", 1, 1.0), 0, "grid must be an int or a tuple"),
        ("scale", 1, 1, ("O", "I", 1, 1.0), 227 * 1024 + 1, "dynamic shared memory is 0..232448 bytes on sm_90a"),
        ("scale", 1, 1, ("O", "I", 1, 1.0), -1, "shared_mem = int -1"),
    ],
)
def test_each_bad_launch_is_refused_by_kernel_parameter_and_why(kernel, grid, block, args, shmem, why):
    o, i = torch.empty(8), torch.empty(8)
    rec = Recorder()
    real = tuple(o if a == "O" else i if a == "I" else a for a in args)
    with scope(o, i, driver=rec), pytest.raises(LaunchRefused) as e:
        native.launch(kernel, grid, block, real, shared_mem=shmem)
    assert why in str(e.value) and f"kernel '{kernel}'" in str(e.value), str(e.value)
    assert rec.calls == []  # nothing reached the driver


def test_pointers_only_inside_this_calls_tensors():
    o, i, other = torch.empty(8), torch.empty(8), torch.empty(8)
    with scope(o, i):
        native.launch("scale", 1, 1, (o[2:6], i.view(2, 4)[1], 1, 1.0))  # views inside: fine
        for bad in (other, torch.empty(8), o.new_empty(8)):
            with pytest.raises(LaunchRefused, match="parameter 0: the tensor is not one of this call's"):
                native.launch("scale", 1, 1, (bad, i, 1, 1.0))
        with pytest.raises(LaunchRefused, match="parameter 0: the tensor is on meta, the call runs on cpu"):
            native.launch("scale", 1, 1, (torch.empty(8, device="meta"), i, 1, 1.0))


def test_a_strided_view_running_past_its_base_is_refused():
    base = torch.empty(16)
    o = base[:8]  # the call's argument: a view of a larger storage
    with scope(o):
        native.launch("scale", 1, 1, (base.as_strided((3,), (3,), 0), o, 1, 1.0))  # elements 0, 3, 6: inside
        with pytest.raises(LaunchRefused, match="parameter 0: the tensor is not one of"):
            native.launch("scale", 1, 1, (base.as_strided((4,), (3,), 0), o, 1, 1.0))  # ... 9: past its end


def test_no_scope_no_launch_and_no_scratch():
    with pytest.raises(LaunchRefused, match="no CUDA op call in progress"):
        native.launch("scale", 1, 1, ())
    with pytest.raises(LaunchRefused, match="no CUDA op call in progress"):
        native.scratch(4, torch.float32)


def test_launches_per_call_and_scratch_are_bounded():
    o = torch.empty(1)
    with scope(o) as s:
        for _ in range(MAX_LAUNCHES):
            native.launch("scale", 1, 1, (o, o, 1, 1.0))
        with pytest.raises(LaunchRefused, match=f"more than {MAX_LAUNCHES} launches"):
            native.launch("scale", 1, 1, (o, o, 1, 1.0))
        with pytest.raises(LaunchRefused, match="bytes of scratch >"):
            native.scratch((2**31, 4), torch.float32)
        with pytest.raises(LaunchRefused, match="must be non-negative and dtype a torch.dtype"):
            native.scratch(4, "float32")
    assert len(s.launches) == MAX_LAUNCHES


def test_shared_memory_limits_by_arch():
    assert shared_limit("sm_90a") == shared_limit("sm_90") == 227 * 1024
    assert shared_limit("sm_89") == 99 * 1024 and shared_limit("sm_75") == 48 * 1024
    o = torch.empty(1)
    with scope(o, arch="sm_89"), pytest.raises(LaunchRefused, match="0..101376 bytes on sm_89"):
        native.launch("scale", 1, 1, (o, o, 1, 1.0), shared_mem=100 * 1024)


def _example_wrapper():
    spec = importlib.util.spec_from_file_location("cuda_rmsnorm_example", EXAMPLES / "cuda" / "norm.rmsnorm" / "rmsnorm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.rmsnorm


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize(("T", "H"), [(1, 64), (7, 4096), (129, 5120), (0, 128)])
def test_the_example_wrapper_passes_the_argument_table_for_trial_shapes(dtype, T, H):
    from cacheon_subnet.bundle import load_bundle

    decl = {
        k.name: [p.value for p in k.params]
        for k in load_bundle(EXAMPLES / "cuda" / "norm.rmsnorm").manifest.ops[0].cuda.kernels
    }
    x, w, out = torch.randn(T, H, dtype=dtype), torch.randn(H, dtype=dtype), torch.empty(T, H, dtype=dtype)
    with op_call(fake_artifact(decl), CPU, (x, w, out), None) as s:
        _example_wrapper()(x, w, out, 1e-6)
    if T == 0:
        assert s.launches == []
        return
    [c] = s.launches
    suffix = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}[dtype]
    assert c.kernel == f"rmsnorm_{suffix}" and c.grid == (T, 1, 1) and c.block == (256, 1, 1)
    assert c.values == (out.data_ptr(), x.data_ptr(), w.data_ptr(), H, H, H, 1e-6)


def test_the_driver_is_imported_only_for_a_launch():
    """CPU boxes verify and compile without cuda-python: a launch there says what to install."""
    import native.driver as d

    try:
        import cuda.bindings.driver  # noqa: F401
    except ImportError:
        with pytest.raises(d.DriverMissing, match="cuda-python"):
            d._driver()
    else:
        pytest.skip("cuda-python is installed here")


# -- the attacks through verify's worker call path ---------------------------------------------
HEAD = "import native\nimport torch\nKEPT = [torch.empty(64)]\n\n\ndef rmsnorm(x, weight, out, eps):\n"
OK_ARGS = "(out, x, weight, x.shape[1], x.stride(0), out.stride(0), eps)"
ATTACKS = {
    "too_few_args": ("native.launch('rmsnorm_f32', x.shape[0], 256, (out, x, weight))", "3 arguments for 7 parameters"),
    "too_many_args": (f"native.launch('rmsnorm_f32', x.shape[0], 256, {OK_ARGS} + (1,))", "8 arguments for 7 parameters"),
    "float_for_int": (
        "native.launch('rmsnorm_f32', 1, 256, (out, x, weight, 64.0, 64, 64, eps))",
        "parameter 3: i32 takes a Python int",
    ),
    "oversized_grid": (f"native.launch('rmsnorm_f32', (1, 70000), 256, {OK_ARGS})", "grid.y = 70000 is outside 1..65535"),
    "oversized_block": (f"native.launch('rmsnorm_f32', 1, 2048, {OK_ARGS})", "block.x = 2048 is outside 1..1024"),
    "oversized_shared": (
        f"native.launch('rmsnorm_f32', 1, 256, {OK_ARGS}, shared_mem=1 << 20)",
        "dynamic shared memory is 0..232448 bytes",
    ),
    "tensor_not_this_calls": (
        "native.launch('rmsnorm_f32', 1, 256, (KEPT[0], x, weight, 64, 64, 64, eps))",
        "not one of this call's argument tensors",
    ),
    "fresh_tensor": (
        "native.launch('rmsnorm_f32', 1, 256, (torch.empty_like(out), x, weight, 64, 64, 64, eps))",
        "not one of this call's argument tensors",
    ),
    "tensor_on_another_device": (
        "native.launch('rmsnorm_f32', 1, 256, (out.to('meta'), x, weight, 64, 64, 64, eps))",
        "parameter 0: the tensor is on meta, the call runs on cpu",
    ),
    "host_int_as_pointer": (
        "native.launch('rmsnorm_f32', 1, 256, (out.data_ptr() + 4096, x, weight, 64, 64, 64, eps))",
        "parameter 0: ptr takes a tensor of this call",
    ),
    "another_ops_kernel": (f"native.launch('silu_and_mul_f32', 1, 256, {OK_ARGS})", "not a kernel of this op's artifact"),
    "kernel_named_by_object": (f"native.launch(b'rmsnorm_f32', 1, 256, {OK_ARGS})", "the kernel is named by a str"),
    "launch_cap": (
        f"for _ in range({MAX_LAUNCHES} + 1):\n        native.launch('rmsnorm_f32', 1, 32, {OK_ARGS})",
        f"more than {MAX_LAUNCHES} launches in one call",
    ),
    "scratch_balloon": ("native.scratch((1 << 40,), torch.float32)", "bytes of scratch >"),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_each_launch_attack_is_refused_with_its_reason_and_nothing_launches(tmp_path, name):
    body, why = ATTACKS[name]
    rec = RecordingDriver()
    w, host, child, loaded = worker_with(tmp_path, HEAD + "    " + body + "\n", rec)
    try:
        assert loaded.results["norm.rmsnorm@1:default"].ok
        res = call_op(w, host, T=4, H=64)
        assert not res.ok and res.reason is P.Reason.EXCEPTION, res
        assert "LaunchRefused" in res.error and why in res.error, res.error
        limit = MAX_LAUNCHES if name == "launch_cap" else 0  # the cap's loop: its first 4096 were fine
        assert len(rec.calls) == limit
    finally:
        host.close()
        child.close()


def test_a_launch_outside_the_call_scope_is_refused(tmp_path):
    """At import, from a closure kept past its call, or from an op the host gave no artifact."""
    rec = RecordingDriver()
    at_import = "import native\nnative.launch('rmsnorm_f32', 1, 32, ())\n\n\ndef rmsnorm(x, weight, out, eps):\n    pass\n"
    w, host, child, loaded = worker_with(tmp_path, at_import, rec)
    host.close(), child.close()
    assert (
        not loaded.results["norm.rmsnorm@1:default"].ok
        and "no CUDA op call in progress" in loaded.results["norm.rmsnorm@1:default"].error
    )
    honest = HEAD + f"    native.launch('rmsnorm_f32', x.shape[0], 256, {OK_ARGS})\n"
    w, host, child, _ = worker_with(tmp_path, honest, rec, natives=False)
    try:
        res = call_op(w, host)
        assert not res.ok and "no CUDA op call in progress" in res.error and rec.calls == []
    finally:
        host.close()
        child.close()
