"""`cacheon bench` times against SGLang's own kernel, which loads its libraries with ctypes from
SGLang's frames. Once the worker's audit guard is armed (the bundle imported) that is refused, and
on the H200 every bench row silently fell back to the fp32 reference (speedups of 10x against
the wrong baseline: docs/results/2026-12-01/h200-s4-bench-norm.txt). The worker loads the stock
kernels of the bundle's slots before arming (verify/worker.py --preload-stock)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from cacheon_subnet.verify.client import WorkerClient, WorkerConfig

SCRIPT = textwrap.dedent("""
    import ctypes, ctypes.util, os, sys, tempfile
    from seams import stock
    from cacheon_subnet.guard import install_guard

    def factory():  # stands in for SGLang: dlopen from a frame that is neither triton nor torch
        lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        return lambda **kw: lib
    table = dict(stock.stock_table())
    table["test.preloaded"] = table["test.lazy"] = factory
    stock.stock_table.cache_clear()
    stock.stock_table = lambda: table
    pre = stock.stock_kernel("test.preloaded")          # what the worker does before arming
    root = tempfile.mkdtemp()
    open(os.path.join(root, "kernel.py"), "w").close()
    install_guard(root, [tempfile.gettempdir()])
    open(os.path.join(root, "kernel.py")).close()       # the bundle import arms the guard
    late_pre = stock.stock_kernel("test.preloaded")
    lazy = stock.stock_kernel("test.lazy")
    print(pre[0] is not None, late_pre[0] is not None, lazy[0] is None, "SandboxViolation" in lazy[1])
""")


def test_a_preloaded_stock_kernel_survives_the_armed_guard_and_a_lazy_one_does_not():
    p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["True", "True", "True", "True"], p.stdout + p.stderr[-1000:]


def _worker_config_of_bench(monkeypatch, opts) -> WorkerConfig:
    """The WorkerConfig `bench_bundle` starts its worker with (the worker itself never starts)."""
    from cacheon_subnet import bench
    from cacheon_subnet.bundle import load_bundle
    from tests.conftest import EXAMPLES

    seen = {}

    class Stop(Exception):
        pass

    def fake_start(self):
        seen["config"] = self.config
        raise Stop

    monkeypatch.setattr(WorkerClient, "start", fake_start)
    monkeypatch.setattr(WorkerClient, "close", lambda self: None)
    try:
        bench.bench_bundle(load_bundle(EXAMPLES / "norm.rmsnorm"), opts)
    except Stop:
        pass
    return seen["config"]


def test_bench_asks_the_worker_to_preload_the_bundles_slots(monkeypatch):
    from cacheon_subnet import bench

    assert _worker_config_of_bench(monkeypatch, bench.BenchOptions(device="cpu")).preload_stock == ("norm.rmsnorm",)
    assert WorkerConfig().preload_stock == ()


JIT_SCRIPT = textwrap.dedent("""
    import subprocess, sys, tempfile, os, torch
    from seams import stock
    from cacheon_subnet.bench_timing import warm_stock
    from cacheon_subnet.guard import install_guard
    from cacheon_subnet.slots import get_slot

    built = set()
    def factory():  # stands in for SGLang's JIT kernels: the first call per shape spawns a compiler
        def kernel(**kw):
            key = tuple(kw["x"].shape)
            if key not in built:
                subprocess.run([sys.executable, "-c", "pass"], check=True)  # nvcc
                built.add(key)
        return kernel
    table = dict(stock.stock_table())
    table["norm.rmsnorm"] = factory
    stock.stock_table.cache_clear()
    stock.stock_table = lambda: table
    case = [c for c in get_slot("norm.rmsnorm").cases("verify")][0]
    calls = [{"slot": "norm.rmsnorm", "dtype": "float32", "case": case.to_json()}] if sys.argv[1] == "warm" else []
    print("failed", warm_stock(calls, torch.device("cpu")))
    root = tempfile.mkdtemp()
    open(os.path.join(root, "kernel.py"), "w").close()
    install_guard(root, [tempfile.gettempdir()])
    open(os.path.join(root, "kernel.py")).close()       # the bundle import arms the guard
    fn = stock.stock_kernel("norm.rmsnorm")[0]
    from cacheon_subnet.bench_timing import build_args
    from cacheon_subnet.slots.spec import dtype_of
    try:
        fn(**build_args(get_slot("norm.rmsnorm"), case, dtype_of("float32"), 1, torch.device("cpu")), **dict(case.params))
        print("timed-call ok")
    except Exception as e:
        print("timed-call refused", type(e).__name__)
""")


@pytest.mark.slow
def test_a_warmed_jit_stock_kernel_needs_no_compiler_under_the_guard_and_a_cold_one_is_refused():
    """The H200 bench failed every row on `nvcc` under the armed guard (2026-12-02): the warm-up
    runs each stock kernel once per timed case before arming. Without it, the same call is refused."""
    runs = {
        m: subprocess.run([sys.executable, "-c", JIT_SCRIPT, m], capture_output=True, text=True, timeout=180)
        for m in ("warm", "cold")
    }
    for m, p in runs.items():
        assert p.returncode == 0, (m, p.stderr[-2000:])
    assert "failed []" in runs["warm"].stdout and "timed-call ok" in runs["warm"].stdout, runs["warm"].stdout
    assert "timed-call refused SandboxViolation" in runs["cold"].stdout, runs["cold"].stdout + runs["cold"].stderr[-800:]


def test_bench_hands_the_worker_every_case_the_stock_side_will_time(monkeypatch):
    from cacheon_subnet import bench
    from cacheon_subnet.bundle import load_bundle
    from cacheon_subnet.slots import get_slot
    from tests.conftest import EXAMPLES

    opts = bench.BenchOptions(device="cpu")
    cases = _worker_config_of_bench(monkeypatch, opts).preload_cases
    op = load_bundle(EXAMPLES / "norm.rmsnorm").manifest.ops[0]
    want = {("norm.rmsnorm", op.dtypes[0], c.label) for c, _ in bench._cases(get_slot("norm.rmsnorm"), op, opts)}
    assert want and {(s, d, c["label"]) for s, d, c in cases} == want
