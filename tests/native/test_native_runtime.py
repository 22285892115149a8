"""A CUDA op through verify's worker on CPU (issue 32 part 3): the host's sealed artifact opened in
the worker, every call of the op inside its call scope, the launches reaching the driver (here a
recorder passed as a Python argument: never reachable from bundle code). The eager, compiled and
bench paths launch alike; a launch outside the scope or of a kernel not the op's is refused; on a
CPU worker the real default is a refusal that says the trials need a GPU."""

from __future__ import annotations

import pytest
import torch
from conftest import EXAMPLES
from native_bundles import RMS_DECL, RMS_KEY, RecordingDriver, call_op, fake_artifact, worker_with

from cacheon_subnet.bench_timing import run_calls
from cacheon_subnet.verify import protocol as P
from native import launcher
from native.argcheck import LaunchRefused
from native.runtime import NO_GPU, NoGpu, call_tensors, driver_for, wrap

EXAMPLE = EXAMPLES / "cuda" / "norm.rmsnorm" / "rmsnorm.py"
KEY, DECL, Recorder = RMS_KEY, RMS_DECL, RecordingDriver
_worker = worker_with


def _call(w, host, T=4, H=64, mode=P.CallMode.EAGER):
    return call_op(w, host, T, H, mode.value)


def test_the_examples_wrapper_through_the_workers_call_path_reaches_the_driver(tmp_path):
    rec = Recorder()
    w, host, child, loaded = _worker(tmp_path, EXAMPLE.read_text(), rec)
    try:
        assert loaded.results[KEY].ok and w.kernels[KEY][1].__cacheon_native__ == "f" * 64
        res = _call(w, host, T=4, H=64)
        assert res.ok, res
        [(digest, sym, c, tensors)] = rec.calls
        assert digest == "f" * 64 and sym == "rmsnorm_f32" and c.grid == (4, 1, 1) and c.block == (256, 1, 1)
        assert c.values[3:] == (64, 64, 64, 1e-6)
        ptrs = {t.data_ptr() for t in tensors}  # out, x, weight: each a tensor of this call
        assert set(c.values[:3]) <= ptrs and len(set(c.values[:3])) == 3
    finally:
        host.close(), child.close()


def test_the_compiled_dispatch_path_and_the_bench_batch_launch_the_same_way(tmp_path):
    rec = Recorder()
    w, host, child, _ = _worker(tmp_path, EXAMPLE.read_text(), rec)
    try:
        assert _call(w, host, T=3, H=32, mode=P.CallMode.COMPILE).ok
        assert [(s, c.grid) for _, s, c, _ in rec.calls] == [("rmsnorm_f32", (3, 1, 1))]
        calls = [{"x": torch.randn(2, 16), "weight": torch.randn(16), "out": torch.empty(2, 16)} for _ in range(3)]
        run_calls(w.kernels[KEY][1], calls, {"eps": 1e-5}, 3)  # bench_timing's timed batch
        assert [c.grid for _, _, c, _ in rec.calls[1:]] == [(2, 1, 1)] * 3
        assert [c.values[0] for _, _, c, _ in rec.calls[1:]] == [k["out"].data_ptr() for k in calls]
    finally:
        host.close(), child.close()


def test_a_launch_at_import_time_is_outside_any_call_and_fails_the_load(tmp_path):
    bad = "import native\nnative.launch('rmsnorm_f32', 1, 32, ())\ndef rmsnorm(x, weight, out, eps):\n    pass\n"
    w, host, child, loaded = _worker(tmp_path, bad, Recorder())
    try:
        assert not loaded.results[KEY].ok and "no CUDA op call in progress" in loaded.results[KEY].error
    finally:
        host.close(), child.close()


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("native.launch('other_op_kernel', 1, 32, (out, x, weight, 1, 1, 1, eps))", "not a kernel of this op's artifact"),
        ("native.launch('rmsnorm_f32', 1, 32, (KEPT[0], x, weight, 1, 1, 1, eps))", "not one of this call's argument"),
        ("native.launch('rmsnorm_f32', 1, 32, (x.data_ptr(), x, weight, 1, 1, 1, eps))", "ptr takes a tensor of this call"),
    ],
)
def test_a_wrapper_reaching_past_its_call_is_refused_and_nothing_launches(tmp_path, body, why):
    src = f"import native\nimport torch\nKEPT = [torch.empty(4)]\ndef rmsnorm(x, weight, out, eps):\n    {body}\n"
    rec = Recorder()
    w, host, child, _ = _worker(tmp_path, src, rec)
    try:
        res = _call(w, host)
        assert not res.ok and res.reason is P.Reason.EXCEPTION and why in res.error, res.error
        assert rec.calls == []
    finally:
        host.close(), child.close()


def test_a_cuda_op_the_host_gave_no_artifact_runs_without_a_scope_and_is_refused(tmp_path):
    rec = Recorder()
    w, host, child, _ = _worker(tmp_path, EXAMPLE.read_text(), rec, natives=False)
    try:
        res = _call(w, host)
        assert not res.ok and "no CUDA op call in progress" in res.error and rec.calls == []
    finally:
        host.close(), child.close()


def test_a_cpu_worker_refuses_the_launch_saying_the_trials_need_a_gpu(tmp_path):
    assert isinstance(driver_for(torch.device("cpu")), NoGpu)
    w, host, child, _ = _worker(tmp_path, EXAMPLE.read_text(), driver=None)  # the worker's own default
    try:
        res = _call(w, host)
        assert not res.ok and NO_GPU in res.error
    finally:
        host.close(), child.close()


def test_the_scope_admits_exactly_the_calls_tensors():
    a, b, c = torch.empty(2), torch.empty(3), torch.empty(4)
    assert call_tensors((a, 1), {"k": [b, "x"], "v": (c,), "s": 2.0}) == (a, b, c)
    seen = []

    def body(x, pools):
        seen.append(launcher._SCOPE.get())

    wrap(body, fake_artifact(DECL), NoGpu())(a, pools=[b])
    assert seen[0].tensors == (a, b) and seen[0].device == torch.device("cpu")
    assert launcher._SCOPE.get() is None  # closed after the call
    with pytest.raises(LaunchRefused, match="no CUDA op call in progress"):
        launcher.launch("rmsnorm_f32", 1, 1, ())
