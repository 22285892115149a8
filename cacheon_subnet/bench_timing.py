"""Worker-side timing for `cacheon bench` (runs inside the sandboxed worker, next to the kernel).

Method (GPU MODE / KernelBench practice): CUDA events around the call only, the L2 emptied by
a large read before every timed iteration (`flush_l2`), inout args restored from a pristine copy before
every iteration (outside the timed region), warm-up excluded, candidate and baseline
interleaved in rotating order so drift and position effects hit all sides alike, adaptive stop once stderr/mean falls under
the target for both sides (or the time budget runs out). On a GPU each side's call is captured in
a CUDA graph and the replay is what is timed: the engine replays every slot call in its decode
graphs, so host dispatch is not part of what it pays (a Python-heavy stock wrapper measured 216 µs
of host time around 42 µs of GPU work, docs/benchmarks.md session 18). If any side cannot be
captured, every side runs eager and the reply's clock says why. The result is advisory for miners (it
is measured in the contribution's own process); the validator's authority is the arena's clock.
`map_arena` / `run_calls` at the end are the worker's half of the CPU arena's host-clocked
timing: they time nothing.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from cacheon_subnet.slots.gen import seed_generator
from cacheon_subnet.slots.spec import ShapeCase, SlotSpec, dtype_of
from cacheon_subnet.tensor_views import rebase
from cacheon_subnet.verify.protocol import GRAPH_CLOCK

_flush_cache: dict[str, torch.Tensor] = {}
_hbm_gbps: dict[str, float | None] = {}


def device_inputs(
    spec: SlotSpec, case: ShapeCase, act: torch.dtype, seed: int, device: torch.device | str
) -> dict[str, torch.Tensor]:
    """The slot's inputs for `seed`, drawn on `device` itself by a generator of that device: a
    K/V pool (1.4 GB at the dense arena's bs 256) is made where it is used, instead of drawn on
    the host (4.5-9 s of one CPU core, each time) and copied over. The same seed on the same
    device type and torch build gives the same values in any process, so the bench host draws the
    re-check's inputs again itself (tests/test_bench_progress.py checks two processes agree).
    On CPU this is `spec.make_inputs` with `seed_generator(seed)`, as verify draws them."""
    device = torch.device(device)
    gen = seed_generator(seed) if device.type == "cpu" else torch.Generator(device=device).manual_seed(seed)
    with torch.device(device):
        inputs = spec.make_inputs(case, act, gen)
    stray = {k: v for k, v in inputs.items() if v.device.type != device.type}  # e.g. a table cached on the host
    return {**inputs, **rebase(stray, device)}


def build_args(
    spec: SlotSpec, case: ShapeCase, act: torch.dtype, seed: int, device: torch.device
) -> dict[str, torch.Tensor]:
    inputs = device_inputs(spec, case, act, seed, device)
    args = {k: v for k, v in inputs.items() if spec.arg(k).role in ("in", "inout")}
    for a in spec.args:
        if a.role in ("out", "scratch"):
            args[a.name] = torch.full(
                a.concrete_shape(case.dims),
                float("nan") if a.torch_dtype(act).is_floating_point else -1,
                dtype=a.torch_dtype(act),
                device=device,
            )
    return args


def reference_kernel(spec: SlotSpec) -> Callable[..., None]:
    """The fp32 reference behind the slot calling convention (baseline when SGLang is absent)."""
    reference = spec.reference

    def run(**kw: Any) -> None:  # as lean as a candidate's call: no per-call dict building
        for name, val in reference(kw, kw).items():
            kw[name].copy_(val)

    return run


def flush_l2(buf: torch.Tensor, sink: torch.Tensor) -> None:
    """Empty the L2 by reading `buf` (twice its size): a read leaves clean lines, so the timed call
    pays no write-back of the flush's own data. A write (`zero_`) left the L2 full of dirty lines:
    the stock MoE call's replay read 55.7 µs after it, 44.0 µs warm, and the engine's profile
    40.7 µs a call (H100, docs/benchmarks.md session 18): the engine's other kernels between two
    calls of a slot mostly read (weights, the KV cache). Only `sink` (one element) is written."""
    torch.amax(buf, dim=0, out=sink)


class _Timer:
    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        if self.cuda:
            l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20)
            key = str(device)
            if key not in _flush_cache:
                _flush_cache[key] = torch.zeros(max(2 * l2, 256 << 20) // 4, dtype=torch.int32, device=device)
            self.flush_buf = _flush_cache[key]
            self.sink = torch.empty((), dtype=self.flush_buf.dtype, device=device)

    def time_once(self, fn: Callable[[], None]) -> Any:
        if not self.cuda:
            t0 = time.perf_counter_ns()
            fn()
            return (time.perf_counter_ns() - t0) / 1e3
        flush_l2(self.flush_buf, self.sink)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        return (start, end)

    def read(self, token: Any) -> float:
        if not self.cuda:
            return float(token)
        start, end = token
        end.synchronize()
        return start.elapsed_time(end) * 1e3  # microseconds


def _stats(xs: list[float]) -> dict[str, float]:
    """Median with a robust standard error (1.2533 * 1.4826 * MAD / sqrt(n)): a few windows
    stalled by the OS or a co-tenant move neither the estimate nor the noise band much."""
    med = statistics.median(xs)
    mad = statistics.median(abs(x - med) for x in xs)
    se = 1.2533 * 1.4826 * mad / math.sqrt(len(xs))
    return {
        "median_us": med,
        "mean_us": statistics.fmean(xs),
        "rel_stderr": se / med if med else 0.0,
        "min_us": min(xs),
        "n": len(xs),
    }


def capture_graph(fn: Callable[[], None], restore: Callable[[], None] = lambda: None) -> Callable[[], None]:
    """fn captured in a CUDA graph (after one call on a side stream, as torch asks); its replay,
    which holds the graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        restore()
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    restore()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph.replay


def graph_sides(
    sides: dict[str, Callable[[], None]],
    restore: Callable[[], None],
    capture: Callable[[Callable[[], None], Callable[[], None]], Callable[[], None]] | None = None,
) -> tuple[dict[str, Callable[[], None]], str]:
    """Every side as a graph replay, or every side eager with the reason: a comparison of one
    side's GPU time with the other's host time would be no comparison at all."""
    replays = {}
    for name, fn in sides.items():
        try:
            replays[name] = (capture or capture_graph)(fn, restore)
        except Exception as e:  # noqa: BLE001 - reported in the clock; the sides run eager
            why = " ".join(f"{type(e).__name__}: {e}".split())[:200]
            return (
                sides,
                f"eager ({name} could not be captured in a CUDA graph: {why}; host dispatch is in every side's time)",
            )
    return replays, GRAPH_CLOCK


def time_pair(
    sides: dict[str, Callable[[], None]],
    restore: Callable[[], None],
    device: torch.device,
    budget_s: float,
    target: float,
    min_iters: int = 20,
    max_iters: int = 100_000,
) -> tuple[dict[str, dict[str, float]], str]:
    """Each side's figures, and the clock they were read on."""
    timer = _Timer(device)
    for fn in sides.values():  # warm-up: compile, autotune, first-touch; excluded
        t_warm = time.monotonic() + min(0.25, budget_s / 4)
        n = 0
        while n < 3 or (time.monotonic() < t_warm and n < 200):
            restore()
            fn()
            n += 1
    clock = "host clock"
    if device.type == "cuda":
        torch.cuda.synchronize()
        sides, clock = graph_sides(sides, restore)
    samples: dict[str, list[float]] = {k: [] for k in sides}
    names = list(sides)
    t_end = time.monotonic() + budget_s
    rounds = 0
    while True:
        k = rounds % len(names)  # rotate: every side takes every position equally often
        order = names[k:] + names[:k]
        tokens = []
        for name in order:
            restore()
            tokens.append((name, timer.time_once(sides[name])))
        for name, tok in tokens:
            samples[name].append(timer.read(tok))
        rounds += 1
        if rounds >= max_iters:
            break
        if rounds >= min_iters and rounds % 10 == 0:
            done = all(_stats(v)["rel_stderr"] < target for v in samples.values())
            if done or time.monotonic() > t_end:
                break
    return {k: _stats(v) for k, v in samples.items()}, clock


def measure_copy_bandwidth(device: torch.device) -> float | None:
    """Device-to-device copy GB/s counting bytes read + written: the roofline for % of HBM."""
    if device.type != "cuda":
        return None
    src = torch.empty(1 << 28, dtype=torch.int32, device=device)  # 1 GiB
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        dst.copy_(src)
    end.record()
    end.synchronize()
    secs = start.elapsed_time(end) / 1e3
    return 10 * 2 * src.numel() * 4 / secs / 1e9


def warm_stock(calls: list[dict[str, Any]], device: torch.device, on_done: Callable[[int], None] | None = None) -> list[str]:
    """Call each stock kernel once on every (slot, dtype, case) the bench will time, before the
    audit guard is armed: SGLang's JIT kernels build per template instance on first call (nvcc,
    then dlopen from SGLang's frames), which the armed guard refuses (H200, 2026-12-02: every
    bench row failed on `nvcc`). Returns what failed (the bench then reports it per row).
    `on_done(i)`: after the i-th call (1-based) that reached a stock kernel."""
    from cacheon_subnet.slots import get_slot
    from seams.stock import stock_kernel

    failed = []
    for i, c in enumerate(calls, 1):
        fn, why = stock_kernel(str(c["slot"]))
        if fn is None:
            failed.append(f"{c['slot']}: {why}")
            continue
        spec, case = get_slot(str(c["slot"])), ShapeCase(**c["case"])
        try:
            fn(**build_args(spec, case, dtype_of(str(c["dtype"])), 0, device), **dict(case.params))
            if device.type == "cuda":
                torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - reported; the timed call will fail the same way
            failed.append(f"{c['slot']} {case.label}: {type(e).__name__}: {e}")
        if on_done is not None:
            on_done(i)
    return failed


def run_bench_request(
    spec: SlotSpec, fn: Callable[..., None], msg: dict[str, Any], device: torch.device
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Time candidate vs baseline on one case; return timings plus the written args of one call
    on fresh inputs (seed + 1), which the host checks against the reference."""
    from seams.stock import stock_kernel

    case = ShapeCase(**msg["case"])
    act = dtype_of(msg["dtype"])
    params = dict(case.params)
    args = build_args(spec, case, act, int(msg["seed"]), device)
    pristine = rebase({a.name: args[a.name] for a in spec.args if a.role == "inout"})
    base, why = stock_kernel(spec.id) if msg.get("stock", True) else (None, "stock disabled")
    baseline = f"stock: {why.splitlines()[0]}" if base is not None else f"reference fp32 ({why})"
    base = base or reference_kernel(spec)
    sets = [args, rebase(args)]  # each side its own copy of the inputs
    sides = {"candidate": lambda: fn(**args, **params), "baseline": lambda: base(**sets[1], **params)}
    if msg.get("bprime"):  # B' = the baseline timed again: its distance from B is the noise band
        sets.append(rebase(args))
        sides["baseline2"] = lambda: base(**sets[2], **params)

    def restore() -> None:
        for k, v in pristine.items():
            for s in sets:
                s[k].copy_(v)

    timings, clock = time_pair(
        sides, restore, device, float(msg["budget_s"]), float(msg["target_rel_err"]), min_iters=int(msg.get("min_iters", 20))
    )
    # The re-check: fresh inputs from seed + 1. Only the written args go back: the host draws
    # the same inputs itself (device_inputs) for the reference, so GBs of K/V never cross the wire.
    check = build_args(spec, case, act, int(msg["seed"]) + 1, device)
    fn(**check, **params)
    if device.type == "cuda":
        torch.cuda.synchronize()
    tensors = {f"out.{a.name}": check[a.name].detach().cpu() for a in spec.args if a.written}
    if str(device) not in _hbm_gbps:
        _hbm_gbps[str(device)] = measure_copy_bandwidth(device)
    reply = {
        "type": "bench",
        "ok": True,
        "timings": timings,
        "baseline": baseline,
        "hbm_gbps": _hbm_gbps[str(device)],
        "clock": clock,
    }
    return reply, tensors


# -- host-clocked timing (the CPU arena): this side only maps the host's memory and runs calls --


def map_arena(fd: int, call_bytes: int, calls: list[dict[str, Any]]) -> list[dict[str, torch.Tensor]]:
    """Views of the host's shared memory, one argument set per call, each call its own mapping
    (its own storage: a kernel cannot reach another call's inputs through `untyped_storage()`).
    The host writes inputs while this process is stopped and reads outputs after it stops again."""
    import mmap

    out = []
    for i, call in enumerate(calls):
        raw = torch.frombuffer(mmap.mmap(fd, call_bytes, offset=i * call_bytes), dtype=torch.uint8)
        args = {}
        for name, v in call.items():
            dt = dtype_of(v["dtype"])
            args[name] = torch.empty(0, dtype=dt).set_(
                raw.untyped_storage(),
                int(v["offset"]) // dt.itemsize,
                [int(s) for s in v["shape"]],
                [int(s) for s in v["stride"]],
            )
        out.append(args)
    return out


def run_calls(fn: Callable[..., Any], calls: list[dict[str, torch.Tensor]], params: dict[str, Any], n: int) -> None:
    """The timed batch: n calls back to back, each on its own inputs. No clock here: the host's
    clock brackets this whole batch and the host judges every output."""
    for i in range(n):
        fn(**calls[i], **params)
