#!/usr/bin/env python3
"""Where an arena's engine spends its GPU time, per slot (issue 17, item 1): a pristine engine with
the arena's own kwargs and window shape, profiled through SGLang's released profiler interface
(`Engine.start_profile(profile_by_stage=True, num_steps=K)`: one torch-profiler trace for K
prefill steps, one for K decode steps, CUDA-graph-replayed kernels included), then every GPU
kernel of each trace summed into the slot it belongs to.

    python scripts/profile_decode.py --config configs/arena/dense.toml --out profile.json [--steps 16]
    python scripts/profile_decode.py --table TRACE.json.gz [...]   # re-read saved traces, no GPU

A development tool: it runs no contribution code and decides nothing (the arena decides crowns),
so it runs outside the sandbox. Kernel names are matched by the patterns in SLOT_PATTERNS; what
matches none is listed under "other" with its name, so the table shows what it does not know.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# (category, regex on the kernel name), first match wins: slot ids where a slot covers the kernel
SLOT_PATTERNS: tuple[tuple[str, str], ...] = (
    ("norm.fused_add_rmsnorm", r"(?i)fused_?add_?rms_?norm"),
    ("norm.rmsnorm", r"(?i)rms_?norm"),
    ("activation.silu_and_mul", r"(?i)(silu|act)_?and_?mul|act_and_mul"),
    ("rope.neox", r"(?i)rotary|rope"),
    ("moe.topk_softmax", r"(?i)topk_?softmax|topkgating"),
    ("moe.fused_experts", r"(?i)fused_moe|moe_align|moe_sum|expert"),
    # the Triton backend's GQA decode: _fwd_grouped_kernel_stage1 + _fwd_kernel_stage2 (H200, 2026-12-02)
    ("attention.decode", r"(?i)decode_att|_fwd_(grouped_)?kernel_stage[12]|decode.*attention|flash_?decod"),
    ("attention.extend", r"(?i)extend_att|_fwd_kernel\b|_fwd_kernel_|prefill.*attention|flash_?fwd|fmha"),
    ("collective.all_reduce", r"(?i)allreduce|all_reduce|nccl"),
    ("qk-norm (no slot)", r"(?i)qk_?norm"),  # Qwen3's per-head q/k RMSNorm (fused_qknorm_warp)
    ("attention metadata (no slot)", r"(?i)kv_indices|num_kv_splits|clamp_position|compute_position|scan::"),
    ("gemm (no slot)", r"(?i)gemm|nvjet|cutlass|xmma|cublas|matmul|splitk"),
    ("sampling/logits (no slot)", r"(?i)softmax|argmax|topk|sampl|log_?prob|gumbel"),
    ("kv-cache/index (no slot)", r"(?i)store_?kv|set_?kv|kv_?buffer|index_?select|indexselect|gather|scatter|embedding"),
    ("elementwise/copy (no slot)", r"(?i)elementwise|memcpy|memset|copy|fill|cat_|reduce|unrolled"),
)


# A slot call that launches several kernels: the kernels from the first to the last (same stream,
# in time order) are that call's, whatever their own names match (fused_experts' act_and_mul and
# copy are not activation.silu_and_mul or elementwise calls; H100, 2026-12-05).
SLOT_SPANS: dict[str, tuple[str, str]] = {
    "moe.fused_experts": (r"(?i)moe_align_block_size", r"(?i)moe_sum_reduce"),
}
# The kernel that runs once per call of a multi-kernel slot: `calls` counts it, not every kernel
# (a fixture read 20 fused_experts "calls" a decode step for 4, so 7.8 us a call for ~40).
CALL_ANCHORS: dict[str, str] = {
    "moe.fused_experts": r"(?i)moe_sum_reduce",
    "attention.decode": r"(?i)_fwd_kernel_stage2|decode_att",
}


@dataclass(frozen=True)
class Share:
    category: str
    us: float
    calls: int  # slot calls (CALL_ANCHORS), else kernels
    share: float  # of the stage's summed kernel time
    kernels: int = 0


@dataclass(frozen=True)
class StageProfile:
    stage: str  # EXTEND (prefill) or DECODE
    trace: str
    kernel_us: float
    steps: int
    shares: tuple[Share, ...]
    top_other: tuple[tuple[str, float], ...]  # unmatched kernel names by time: what the patterns miss


def categorize(name: str) -> str:
    for cat, pat in SLOT_PATTERNS:
        if re.search(pat, name):
            return cat
    return "other"


def kernel_events(doc: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """GPU kernel events of a chrome trace from torch.profiler (cat "kernel", complete events)."""
    for ev in doc.get("traceEvents", []):
        if ev.get("ph") == "X" and str(ev.get("cat", "")).lower() == "kernel" and "dur" in ev:
            yield ev


def _stream(ev: dict[str, Any]) -> str:
    args = ev.get("args") or {}
    return str(args.get("stream", ev.get("tid", "")))


def attribute(events: Iterable[dict[str, Any]]) -> Iterable[tuple[str, dict[str, Any]]]:
    """(category, event) in time order per stream, the kernels inside a SLOT_SPANS call booked to it."""
    open_span: dict[str, str] = {}
    for ev in sorted(events, key=lambda e: (_stream(e), float(e.get("ts", 0.0)))):
        name, stream = str(ev.get("name", "")), _stream(ev)
        slot = open_span.get(stream)
        if slot is None:
            slot = next((s for s, (first, _) in SLOT_SPANS.items() if re.search(first, name)), None)
            if slot is not None:
                open_span[stream] = slot
        if slot is None:
            yield categorize(name), ev
            continue
        yield slot, ev
        if re.search(SLOT_SPANS[slot][1], name):
            del open_span[stream]


def stage_profile(doc: dict[str, Any], stage: str, trace: str, steps: int) -> StageProfile:
    by: dict[str, list[float]] = {}
    anchors: dict[str, int] = {}
    other: dict[str, float] = {}
    for cat, ev in attribute(kernel_events(doc)):
        name, dur = str(ev.get("name", "")), float(ev["dur"])
        by.setdefault(cat, []).append(dur)
        if cat in CALL_ANCHORS and re.search(CALL_ANCHORS[cat], name):
            anchors[cat] = anchors.get(cat, 0) + 1
        if cat == "other":
            other[name] = other.get(name, 0.0) + dur
    total = sum(sum(v) for v in by.values())
    shares = tuple(
        sorted(
            (
                Share(c, round(sum(v), 1), anchors.get(c) or len(v), sum(v) / total if total else 0.0, len(v))
                for c, v in by.items()
            ),
            key=lambda s: -s.us,
        )
    )
    top = tuple(sorted(((n[:120], round(us, 1)) for n, us in other.items()), key=lambda x: -x[1])[:12])
    return StageProfile(stage, trace, round(total, 1), steps, shares, top)


def read_trace(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def stage_of(path: Path) -> str:
    m = re.search(r"-(EXTEND|DECODE|MIXED)\.trace\.json", path.name)
    return m.group(1) if m else "ALL"


def render(stages: list[StageProfile]) -> str:
    lines = []
    for s in stages:
        lines.append(f"== {s.stage}: {s.kernel_us / 1e3:.2f} ms of GPU kernel time over {s.steps} steps ({s.trace})")
        lines.append(f"{'category':30} {'ms':>9} {'calls':>7} {'share':>7}")
        lines += [f"{x.category:30} {x.us / 1e3:9.3f} {x.calls:7d} {100 * x.share:6.2f}%" for x in s.shares]
        if s.top_other:
            lines.append("unmatched kernels (top by time): " + "; ".join(f"{n} {us / 1e3:.3f} ms" for n, us in s.top_other))
    return "\n".join(lines)


def profile_engine(config: str, trace_dir: Path, steps: int) -> dict[str, Any]:
    """Start the arena's engine pristine (no seam gate set: stock kernels), run one untimed window,
    then one profiled window; returns what ran (the traces land in trace_dir)."""
    from sglang.srt.entrypoints.engine import Engine

    from arena.config import hf_config, load_config
    from arena.engine.child import make_prompts
    from arena.engine.home import default_home
    from arena.jobs import checkpoint_job, engine_kwargs
    from arena.model.checkpoint import write_checkpoint

    cfg = load_config(config)
    job = checkpoint_job(cfg, default_home() / "checkpoints")
    if cfg.real:
        model = str(Path(job["dir"])) if Path(job["dir"]).is_dir() else str(cfg.model.path)
    else:
        model = str(write_checkpoint(hf_config(cfg), Path(job["dir"]), int(cfg.model.seed), device="cpu").path)
    w = cfg.workload
    kwargs = {**engine_kwargs(cfg), "model_path": model}
    t = time.perf_counter()
    engine = Engine(**kwargs)
    started = time.perf_counter() - t
    sp = {"max_new_tokens": w.output_len, "ignore_eos": True, "temperature": 0.0}
    try:
        engine.generate(
            input_ids=make_prompts(1, w.prompts_per_window, w.input_len, w.vocab_low, cfg.profile.vocab), sampling_params=sp
        )  # warm-up: graphs captured, autotune done
        trace_dir.mkdir(parents=True, exist_ok=True)
        engine.start_profile(
            output_dir=str(trace_dir),
            num_steps=steps,
            activities=["GPU"],
            profile_by_stage=True,
            with_stack=False,
            record_shapes=False,
        )
        t = time.perf_counter()
        engine.generate(
            input_ids=make_prompts(2, w.prompts_per_window, w.input_len, w.vocab_low, cfg.profile.vocab), sampling_params=sp
        )
        window = time.perf_counter() - t
    finally:
        engine.shutdown()
    return {
        "config": config,
        "arena_id": cfg.arena_id,
        "engine_kwargs": kwargs,
        "engine_start_s": round(started, 1),
        "profiled_window_s": round(window, 2),
        "workload": asdict(w),
        "steps": steps,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(REPO / "configs" / "arena" / "dense.toml"))
    ap.add_argument("--out", required=True, help="the JSON summary (per stage, per slot)")
    ap.add_argument("--trace-dir", default="/tmp/cacheon-profile")
    ap.add_argument("--steps", type=int, default=16, help="profiled steps per stage")
    ap.add_argument("--table", nargs="*", help="saved traces to summarize instead of running an engine")
    a = ap.parse_args(argv)
    ran: dict[str, Any] = {}
    if a.table:
        traces = [Path(p) for p in a.table]
    else:
        ran = profile_engine(a.config, Path(a.trace_dir), a.steps)
        traces = sorted(Path(a.trace_dir).glob("*.trace.json*"))
    if not traces:
        print(f"no traces in {a.trace_dir}", file=sys.stderr)
        return 1
    stages = [stage_profile(read_trace(p), stage_of(p), p.name, a.steps) for p in traces]
    Path(a.out).write_text(json.dumps({**ran, "stages": [asdict(s) for s in stages]}, indent=1))
    print(render(stages))
    return 0


if __name__ == "__main__":
    sys.exit(main())
