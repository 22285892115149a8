"""Why bench's stock moe.fused_experts call costs ~12x what the MoE arena's profile says (issue 34
item 1, hypothesis H1 in docs/benchmarks.md): the same stock call at the arena's window shape timed
four ways on one GPU. (a) bench's way: one eager call between CUDA events after an L2 flush;
(b) host dispatch alone (perf_counter around eager calls, no sync); (c) eager calls back to back,
events around the batch; (d) one call captured in a CUDA graph and replayed, as the engine runs
it; (e) the torch profiler's sum of the call's GPU kernel times. If (a) >> (d) ~ (e), bench times
the host, not the GPU work the engine replays."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=256, help="T: the MoE arena's decode window (bs 256)")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", help="write the figures as JSON here too")
    a = ap.parse_args()

    import torch

    from cacheon_subnet.bench_timing import capture_graph
    from seams.stock.moe import STOCK

    T, H, I, E, K = a.tokens, 1024, 512, 16, 4  # configs/arena/moe.toml's model (qwen3-moe-mini)
    dev, dt = torch.device("cuda"), torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn((T, H), generator=g, device=dev, dtype=dt)
    w13 = torch.randn((E, 2 * I, H), generator=g, device=dev, dtype=dt) / H**0.5
    w2 = torch.randn((E, H, I), generator=g, device=dev, dtype=dt) / I**0.5
    logits = torch.randn((T, E), generator=g, device=dev)
    wts, ids = torch.softmax(logits, -1).topk(K, -1)
    wts, ids = (wts / wts.sum(-1, keepdim=True)).contiguous(), ids.to(torch.int32).contiguous()
    out = torch.empty_like(x)
    run = STOCK["moe.fused_experts"]()
    call = lambda: run(x, w13, w2, wts, ids, out)  # noqa: E731
    for _ in range(3):  # Triton compile, config lookup
        call()
    torch.cuda.synchronize()
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    sink = torch.empty((), dtype=torch.uint8, device=dev)

    def timed_after(prep, fn):  # noqa: ANN001, ANN202 - one event-timed call after prep(), a.reps times (µs)
        out = []
        for _ in range(a.reps):
            prep()
            s, e = ev(), ev()
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            out.append(s.elapsed_time(e) * 1e3)
        return out

    bench_way = timed_after(flush.zero_, call)  # (a)
    host = []
    for _ in range(a.reps):  # (b)
        torch.cuda.synchronize()
        t = time.perf_counter()
        call()
        host.append((time.perf_counter() - t) * 1e6)
    torch.cuda.synchronize()
    s, e = ev(), ev()
    s.record()
    for _ in range(a.reps):  # (c)
        call()
    e.record()
    torch.cuda.synchronize()
    back_to_back = s.elapsed_time(e) * 1e3 / a.reps

    replay = capture_graph(call)  # (d): bench's own capture
    replay()
    torch.cuda.synchronize()
    s, e = ev(), ev()
    s.record()
    for _ in range(a.reps):
        replay()
    e.record()
    torch.cuda.synchronize()
    replay_us = s.elapsed_time(e) * 1e3 / a.reps
    replay_flushed = timed_after(flush.zero_, replay)
    # the L2 emptied by a read (clean lines): what bench_timing.flush_l2 does
    replay_swept = timed_after(lambda: torch.amax(flush, dim=0, out=sink), replay)

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:  # (e)
        for _ in range(10):
            call()
        torch.cuda.synchronize()
    kernels = {}
    for ev_ in prof.events():
        if ev_.device_type == torch.autograd.DeviceType.CUDA:
            kernels[ev_.name] = kernels.get(ev_.name, 0.0) + ev_.device_time / 10
    figures = {
        "shape": {"T": T, "H": H, "I": I, "E": E, "K": K, "dtype": "bfloat16"},
        "card": torch.cuda.get_device_name(),
        "a_bench_way_us_median": statistics.median(bench_way),
        "b_host_dispatch_us_median": statistics.median(host),
        "c_eager_back_to_back_us": back_to_back,
        "d_graph_replay_us": replay_us,
        "d_graph_replay_after_flush_us_median": statistics.median(replay_flushed),
        "d_graph_replay_after_read_sweep_us_median": statistics.median(replay_swept),
        "e_profiler_kernel_sum_us": sum(kernels.values()),
        "e_profiler_kernels_us": {k[:80]: round(v, 2) for k, v in sorted(kernels.items(), key=lambda kv: -kv[1])},
    }
    text = json.dumps(figures, indent=1)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
