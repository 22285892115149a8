#!/usr/bin/env python3
"""Launch-configuration sweep of examples/attention.decode against stock SGLang at the arena's decode shapes.

    python scripts/sweep_attention_decode.py --config configs/arena/dense.toml --out attnsweep.json
    python scripts/sweep_attention_decode.py --shapes 256x1088,256x1152 --block-n 32,64 --warps 4 --stages 2,3
    python scripts/sweep_attention_decode.py --configs bn32-w4-s3-hint,bn64-w8-s2-sp2 --control

A development tool: it runs the repo's own example kernel and stock SGLang in this process, outside
the sandbox, and decides nothing (the arena decides crowns; docs/benchmarks.md records what was
measured). Why it exists: in the dense arena decode attention is 87 % of the decode step's GPU time
(bs 256, ~1024-1152 tokens a request), and the example was only ever timed at bs 32 / ctx 4096.

What it does, per shape BSxCTX (default: the arena's window batch at its mean decode context, the
next three captured batches below it at that context, and the window batch at the shortest and the
longest context of the window; the first shape is "the window shape"):
  * inputs: one K/V pool, q and paging made by the slot's own case generator
    (cacheon_subnet.slots.defs.attention via bench_timing.build_args) at the largest shape; each
    shape then pages it as the arena does: every request holds exactly CTX tokens (all prompts of a
    window start together; --lengths slot keeps the generator's varied lengths), at pool slots drawn
    by a random permutation (slot 0 is SGLang's padding slot), and num_kv_splits as SGLang's
    TritonAttnBackend sets it (sglang_split_hint below);
  * stock: decode_attention_fwd exactly as TritonAttnBackend.forward_decode calls it
    (triton_backend.py:1383-1402: k/v scale 1.0, use_pdl = is_arch_support_pdl());
  * the example under each (BLOCK_N, num_warps, num_stages, splits) of the grid, injected by
    replacing its `_launch_config` (the shipped defaults stay as they are); splits "hint" is the
    example's default (SGLang's per-request hint), spK forces K splits per request;
  * correctness: every config's output against stock (max |d|) and against the slot's fp32
    reference under the slot's tolerance; a config outside it is marked "wrong" and never "best".
    --control adds one row that is wrong on purpose (each request's last token replaced by its
    first token's row) to show the check bites at these shapes;
  * timing (CUDA only): each side captured in a CUDA graph (as the arena replays decode), the L2
    flushed before every replay, stock and the config interleaved in alternating order, median of
    --reps; GB/s counts K and V rows, their int64 slot ids, q and o (not the split scratch), and %
    is of a measured device-to-device copy (bench_timing.measure_copy_bandwidth).
The full grid is timed at the window shape only; the other shapes time the --top best correct
configs plus the example's default. --budget-s stops early (what was measured is reported). Before
timing, --jobs worker processes compile every config once on a tiny input of the same head shape,
filling Triton's cache (compilation, ~1 s a config, would otherwise dominate).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import os
import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

EXAMPLE = REPO / "examples" / "attention.decode" / "decode.py"
DEFAULT_CONFIG = REPO / "configs" / "arena" / "dense.toml"
GRID = {"block_n": (16, 32, 64, 128), "warps": (2, 4, 8), "stages": (1, 2, 3, 4), "splits": (1, 2, 4, 0)}
# --triton-attention-num-kv-splits, server_args.py:775 (8 on CUDA; the arena does not set it): the
# backend's max_kv_splits, attn_logits.shape[2] and the largest hint
SGLANG_MAX_KV_SPLITS = 8
H200_SMS = 132  # device_core_count when no GPU answers (cacheon_subnet.slots.defs.attention.H200_SMS)
CONTROL = "control-wrong"


@dataclass(frozen=True)
class Config:
    block_n: int
    warps: int
    stages: int
    splits: int  # 0: SGLang's per-request hint (the example's default); k: k splits for every request

    @property
    def name(self) -> str:
        return f"bn{self.block_n}-w{self.warps}-s{self.stages}-" + ("hint" if self.splits <= 0 else f"sp{self.splits}")

    @classmethod
    def parse(cls, text: str) -> "Config":
        """bn32-w4-s3-hint / bn64-w8-s2-sp2"""
        try:
            bn, w, s, sp = text.strip().split("-")
            assert bn.startswith("bn") and w.startswith("w") and s.startswith("s")
            splits = 0 if sp in ("hint", "sgl", "sp0") else int(sp.removeprefix("sp"))
            return cls(int(bn[2:]), int(w[1:]), int(s[1:]), splits)
        except (AssertionError, ValueError):
            raise SystemExit(f"bad config {text!r}: want bnN-wW-sS-(hint|spK), e.g. bn32-w4-s3-hint") from None


@dataclass(frozen=True)
class Shape:
    batch: int
    ctx: int

    @property
    def label(self) -> str:
        return f"bs{self.batch}-ctx{self.ctx}"


@dataclass
class Row:
    shape: str
    config: str
    block_n: int | None = None
    warps: int | None = None
    stages: int | None = None
    splits: int | None = None
    default: bool = False  # the example's own launch config at this shape
    status: str = "skipped"  # ok | wrong | error | skipped
    detail: str = ""
    us: float | None = None
    stock_us: float | None = None  # the paired stock median (same reps, interleaved)
    speedup: float | None = None
    gbps: float | None = None
    pct_copy: float | None = None
    rel_stderr: float | None = None
    max_abs_vs_stock: float | None = None
    max_abs_vs_ref: float | None = None
    rel_l2_vs_ref: float | None = None


# -- SGLang's split policy ----------------------------------------------------------------------
def sglang_split_hint(lens: Any, num_head: int, num_kv_head: int, max_kv_splits: int, cores: int) -> Any:
    """num_kv_splits as TritonAttnBackend.get_num_kv_splits fills it in SGLang 0.5.13.post1
    (triton_backend.py:258-307; dynamic mode: SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS unset, no
    deterministic inference, device_core_count = the SM count, triton_backend.py:164) through
    get_num_kv_splits_triton (triton_ops/metadata.py:11-60), which the slot restates as
    attention.backend_split_hint: chunk = the smaller of longest/ceil(longest/shortest) (when
    lengths differ by >= 25 %) and longest/ceil(cores * max(log2(longest/64), 1) / grid), grid =
    batch x ceil(HQ / min(16, HQ/HK)); each request ceil(len / chunk) splits, at most max_kv_splits.
    On CUDA, `check_hint_against_sglang` runs SGLang's own kernel and compares."""
    from cacheon_subnet.slots.defs.attention import backend_split_hint

    return backend_split_hint(lens, num_head, num_kv_head, max_kv_splits, cores)


def check_hint_against_sglang(lens: Any, hint: Any, num_head: int, num_kv_head: int, max_kv_splits: int,
                              cores: int) -> str:
    """SGLang's get_num_kv_splits_triton launched exactly as get_num_kv_splits does (num_group 1,
    MAX_NUM_SEQ = 256 below 256 sequences, else next_power_of_2): '' when it agrees, else why not."""
    import torch
    import triton

    try:
        from sglang.srt.layers.attention.triton_ops.metadata import get_num_kv_splits_triton
    except Exception as e:  # noqa: BLE001 - SGLang absent or unimportable: the restatement stands
        return f"not checked ({type(e).__name__}: {e})"
    n = lens.numel()
    out = torch.empty(n, dtype=torch.int32, device="cuda")
    get_num_kv_splits_triton[(1,)](out, lens.to("cuda", torch.int32), n, 1, num_head, num_kv_head, max_kv_splits,
                                   cores, MAX_NUM_SEQ=256 if n < 256 else triton.next_power_of_2(n))
    got = out.cpu()
    if torch.equal(got, hint.cpu().to(torch.int32)):
        return ""
    return f"SGLang's kernel says {dict(Counter(got.tolist()))}, the restatement {dict(Counter(hint.tolist()))}"


# -- inputs -------------------------------------------------------------------------------------
def make_pool(spec: Any, profile: str, shapes: list[Shape], max_splits: int, act: Any, seed: int, device: Any
              ) -> dict[str, Any]:
    """The slot generator's inputs at the largest batch and context (q, K/V pool, params)."""
    from cacheon_subnet.bench_timing import build_args
    from cacheon_subnet.verify.shapes import resize, templates

    temps = templates(spec, spec.cases("bench"), profile)
    big = resize(spec, temps[0], "decode", max(s.batch for s in shapes), max(s.ctx for s in shapes))
    big = dataclasses.replace(big, dims={**big.dims, "MAXS": max_splits})
    args = build_args(spec, big, act, seed, device)
    return {"q": args["q"], "k_buffer": args["k_buffer"], "v_buffer": args["v_buffer"], "case": big,
            "sm_scale": float(big.params["sm_scale"])}


def shape_inputs(pool: dict[str, Any], shape: Shape, max_splits: int, cores: int, lengths: str, layout: str,
                 seed: int) -> dict[str, Any]:
    """The pool paged for `shape` as the arena's engine pages it (see the module doc)."""
    import torch

    from cacheon_subnet.slots.defs import attention
    from cacheon_subnet.slots.gen import seed_generator

    g = seed_generator(seed)
    dev = pool["q"].device
    B, HQ, _ = pool["q"].shape
    S, HK, _ = pool["k_buffer"].shape
    if shape.batch > B:
        raise SystemExit(f"{shape.label}: the pool holds {B} requests")
    lens = (attention.seq_lens(shape.batch, shape.ctx, g) if lengths == "slot"
            else torch.full((shape.batch,), shape.ctx, dtype=torch.int64))
    total = int(lens.sum())
    if total > S - 1:
        raise SystemExit(f"{shape.label}: {total} tokens do not fit the pool's {S - 1} slots")
    indptr = torch.zeros(shape.batch + 1, dtype=torch.int32)
    indptr[1:] = torch.cumsum(lens, 0)
    indices = (torch.randperm(S - 1, generator=g)[:total] + 1 if layout == "permuted"
               else torch.arange(1, total + 1)).to(torch.int64)
    hint = sglang_split_hint(lens, HQ, HK, max_splits, cores)
    return {"q": pool["q"][: shape.batch].contiguous(), "k_buffer": pool["k_buffer"], "v_buffer": pool["v_buffer"],
            "kv_indptr": indptr.to(dev), "kv_indices": indices.to(dev), "num_kv_splits": hint.to(dev),
            "lens": lens, "max_splits": max_splits}


def scratch(t: dict[str, Any]) -> dict[str, Any]:
    import torch

    B, HQ, D = t["q"].shape
    dev = t["q"].device
    nan = float("nan")
    return {"o": torch.full((B, HQ, D), nan, dtype=t["q"].dtype, device=dev),
            "attn_logits": torch.full((B, HQ, t["max_splits"], D), nan, dtype=torch.float32, device=dev),
            "attn_lse": torch.full((B, HQ, t["max_splits"]), nan, dtype=torch.float32, device=dev)}


def kv_bytes(t: dict[str, Any]) -> int:
    """K and V rows of every token and kv head, their int64 slot ids, q and o, indptr and hints."""
    q, kb = t["q"], t["k_buffer"]
    tokens = int(t["lens"].sum())
    es = q.element_size()
    return (tokens * kb.shape[1] * kb.shape[2] * es * 2 + tokens * 8 + 2 * q.numel() * es
            + (q.shape[0] + 1) * 4 + q.shape[0] * 4)


# -- kernels ------------------------------------------------------------------------------------
def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("cacheon_sweep_attention_decode_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if not hasattr(mod, "_launch_config"):
        raise SystemExit(f"{EXAMPLE}: no _launch_config to replace")
    return mod


def default_config(mod: Any, batch: int, kv_heads: int) -> Config:
    return Config(*mod._launch_config(batch, kv_heads))


class Candidate:
    """The example under `cfg`: `_launch_config` is replaced for the duration of each call and
    counts its calls, so a wrapper that stopped consulting it shows up as an error."""

    def __init__(self, mod: Any, cfg: Config, t: dict[str, Any], sm_scale: float, bad_indices: Any = None) -> None:
        self.mod, self.cfg, self.t, self.sm_scale, self.calls = mod, cfg, t, sm_scale, 0
        self.s = scratch(t)
        self.indices = t["kv_indices"] if bad_indices is None else bad_indices
        self._orig = mod._launch_config

    def _picked(self, batch: int, kv_heads: int) -> tuple[int, int, int, int]:
        self.calls += 1
        c = self.cfg
        return c.block_n, c.warps, c.stages, c.splits

    def __call__(self) -> None:
        t, s = self.t, self.s
        self.mod._launch_config = self._picked
        try:
            self.mod.decode_attention(t["q"], t["k_buffer"], t["v_buffer"], s["o"], t["kv_indptr"], self.indices,
                                      t["num_kv_splits"], s["attn_logits"], s["attn_lse"], self.sm_scale)
        finally:
            self.mod._launch_config = self._orig

    @property
    def out(self) -> Any:
        return self.s["o"]


def load_stock() -> tuple[Callable[..., None] | None, str]:
    try:
        from sglang.srt.layers.attention.triton_ops.decode_attention import decode_attention_fwd
    except Exception as e:  # noqa: BLE001 - SGLang absent (CPU box) or unimportable
        return None, f"stock SGLang unavailable: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return decode_attention_fwd, "sglang triton_ops.decode_attention.decode_attention_fwd"


def backend_use_pdl() -> bool:
    """TritonAttnBackend.use_pdl (triton_backend.py:185): is_arch_support_pdl() on CUDA, sm >= 90."""
    import torch

    if not torch.cuda.is_available():
        return False
    try:
        from sglang.jit_kernel.utils import is_arch_support_pdl

        return bool(is_arch_support_pdl())
    except Exception:  # noqa: BLE001 - the same rule, restated
        return torch.cuda.get_device_capability()[0] >= 9


class Stock:
    def __init__(self, fwd: Callable[..., None], t: dict[str, Any], sm_scale: float, use_pdl: bool) -> None:
        self.fwd, self.t, self.sm_scale, self.use_pdl = fwd, t, sm_scale, use_pdl
        self.s = scratch(t)

    def __call__(self) -> None:
        t, s = self.t, self.s
        self.fwd(t["q"], t["k_buffer"], t["v_buffer"], s["o"], t["kv_indptr"], t["kv_indices"], s["attn_logits"],
                 s["attn_lse"], t["num_kv_splits"], s["attn_logits"].shape[2], self.sm_scale, 1.0, 1.0,
                 logit_cap=0.0, sinks=None, xai_temperature_len=-1, has_mla=False, use_pdl=self.use_pdl)

    @property
    def out(self) -> Any:
        return self.s["o"]


def wrong_indices(t: dict[str, Any]) -> Any:
    """The control: each request's last token read from its first token's pool row."""
    import torch

    idx = t["kv_indices"].clone()
    ptr = t["kv_indptr"].to(torch.int64)
    idx[ptr[1:] - 1] = t["kv_indices"][ptr[:-1]]
    return idx


# -- correctness and timing ---------------------------------------------------------------------
def check(fn: Any, ref: Any, stock_out: Any, tol: Any, device: Any) -> tuple[str, str, dict[str, float | None]]:
    """(status, detail, numbers): one eager call on NaN-filled outputs and scratch."""
    import torch

    from cacheon_subnet.slots.compare import compare

    for v in fn.s.values():
        v.fill_(float("nan"))
    try:
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - a config the compiler or the GPU refuses
        msg = str(e).strip().splitlines()
        return "error", f"{type(e).__name__}: {msg[-1] if msg else ''}"[:240], {}
    if isinstance(fn, Candidate) and fn.calls == 0:
        return "error", "the example did not consult _launch_config: the sweep cannot set its config", {}
    out = fn.out.detach().float().cpu()
    c = compare(out, ref, tol)
    nums = {"max_abs_vs_ref": c.max_abs, "rel_l2_vs_ref": c.rel_l2,
            "max_abs_vs_stock": (float((out - stock_out).abs().max()) if stock_out is not None else None)}
    return ("ok" if c.ok else "wrong"), ("" if c.ok else c.detail), nums


def graphed(fn: Callable[[], None]) -> tuple[Callable[[], None], Any]:
    """fn captured in a CUDA graph (warmed on a side stream first), as the arena replays decode."""
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize()
    return g.replay, g


def time_sides(sides: dict[str, Callable[[], None]], reps: int, timer: Any) -> dict[str, dict[str, float]]:
    """Alternating order (every side takes every position equally often), the L2 flushed before each
    replay (bench_timing._Timer), one sample per side per round; medians with a robust stderr."""
    from cacheon_subnet.bench_timing import _stats

    for fn in sides.values():
        fn()
    names = list(sides)
    samples: dict[str, list[float]] = {k: [] for k in names}
    for r in range(reps):
        k = r % len(names)
        toks = [(n, timer.time_once(sides[n])) for n in names[k:] + names[:k]]
        for n, tok in toks:
            samples[n].append(timer.read(tok))
    return {k: _stats(v) for k, v in samples.items()}


# -- parallel compile ---------------------------------------------------------------------------
_WARM: dict[str, Any] = {}


def _warm_init(hq: int, hk: int, d: int, max_splits: int, dtype: str) -> None:
    import torch

    g = torch.Generator().manual_seed(0)
    act = getattr(torch, dtype)
    B, ctx, S = 2, 64, 2 * 64 + 2
    t = {"q": torch.randn(B, hq, d, generator=g).to(act).cuda(),
         "k_buffer": torch.randn(S, hk, d, generator=g).to(act).cuda(),
         "v_buffer": torch.randn(S, hk, d, generator=g).to(act).cuda(),
         "kv_indptr": torch.tensor([0, ctx, 2 * ctx], dtype=torch.int32, device="cuda"),
         "kv_indices": torch.randperm(S - 1, generator=g)[: B * ctx].add(1).cuda(),
         "num_kv_splits": torch.full((B,), 2, dtype=torch.int32, device="cuda"),
         "lens": torch.full((B,), ctx), "max_splits": max_splits}
    _WARM.update(mod=load_example(), t=t)


def _warm_one(cfg: Config) -> tuple[Config, str]:
    import torch

    try:
        Candidate(_WARM["mod"], cfg, _WARM["t"], 0.088)()
        torch.cuda.synchronize()
        return cfg, ""
    except Exception as e:  # noqa: BLE001 - reported; the timed shape fails the same way
        msg = str(e).strip().splitlines()
        return cfg, f"{type(e).__name__}: {msg[-1] if msg else ''}"[:200]


def precompile(configs: list[Config], hq: int, hk: int, d: int, max_splits: int, dtype: str, jobs: int,
               deadline: float) -> tuple[dict[Config, str], float]:
    """Every config compiled once in `jobs` processes (tiny input, same head shape, so the same
    Triton specialisation and cache key): the timed process then loads cubins from the cache."""
    import concurrent.futures as cf
    import multiprocessing as mp

    t = time.monotonic()
    errors: dict[Config, str] = {}
    if jobs < 1 or not configs:
        return errors, 0.0
    ex = cf.ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"), initializer=_warm_init,
                                initargs=(hq, hk, d, max_splits, dtype))
    futs = [ex.submit(_warm_one, c) for c in configs]
    finished = False
    try:
        for f in cf.as_completed(futs, timeout=max(1.0, deadline - time.monotonic())):
            cfg, err = f.result()
            if err:
                errors[cfg] = err
        finished = True
    except cf.TimeoutError:
        print(f"precompile: stopped at the budget, {sum(f.done() for f in futs)}/{len(futs)} compiled", flush=True)
    except Exception as e:  # noqa: BLE001 - a broken pool: the timed process compiles on demand
        print(f"precompile: {type(e).__name__}: {e}", flush=True)
    ex.shutdown(wait=finished, cancel_futures=True)  # done: the workers exit now and free their GPU contexts
    return errors, time.monotonic() - t


# -- the sweep ----------------------------------------------------------------------------------
def grid_configs(args: argparse.Namespace) -> list[Config]:
    if args.configs:
        return [Config.parse(x) for x in args.configs.split(",") if x.strip()]
    ints = lambda text: tuple(int(x) for x in text.split(","))  # noqa: E731
    out = [Config(bn, w, s, sp) for bn in ints(args.block_n) for w in ints(args.warps) for s in ints(args.stages)
           for sp in ints(args.splits)]
    return out


def default_shapes(cfg: Any, arena: Any) -> list[Shape]:
    """The window's batch at the mean decode context, the next three captured batches below it
    at that context, the window's batch at its shortest and longest context."""
    w = cfg.workload
    window = next((n for k, n in arena.window if k == "decode"), arena.decode_batches[-1])
    ctx = arena.decode_context or w.input_len
    below = [b for b in sorted(arena.decode_batches, reverse=True) if b < window][:3]
    out = [Shape(window, ctx)] + [Shape(b, ctx) for b in below]
    out += [Shape(window, c) for c in (w.input_len, w.input_len + w.output_len) if c != ctx]
    return list(dict.fromkeys(out))


def parse_shapes(text: str) -> list[Shape]:
    out = []
    for part in text.split(","):
        try:
            b, c = part.lower().strip().split("x")
            out.append(Shape(int(b), int(c)))
        except ValueError:
            raise SystemExit(f"bad shape {part!r}: want BSxCTX, e.g. 256x1088") from None
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.monotonic()
    deadline = t0 + args.budget_s
    import torch

    use_cuda = args.device != "cpu" and torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
    if not use_cuda:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: the example runs in the interpreter
        from cacheon_subnet.verify import interp_fix

        interp_fix.apply()  # bf16 dots and casts as on the GPU (what CPU verify does)
    device = torch.device("cuda" if use_cuda else "cpu")

    from arena.config import load_config
    from cacheon_subnet.slots import get_slot, profiles
    from cacheon_subnet.slots.spec import dtype_of
    from cacheon_subnet.verify.shapes import from_arena_config

    cfg = load_config(args.config)
    arena = from_arena_config(cfg)
    prof = arena.model or profiles.get(arena.profile)
    dtype = args.dtype or cfg.model.dtype
    act = dtype_of(dtype)
    spec = get_slot("attention.decode")
    tol = spec.tolerances[dtype]
    shapes = parse_shapes(args.shapes) if args.shapes else default_shapes(cfg, arena)
    window = shapes[0]
    cores = torch.cuda.get_device_properties(device).multi_processor_count if use_cuda else H200_SMS
    configs = grid_configs(args)
    mod = load_example()
    doc: dict[str, Any] = {
        "tool": "scripts/sweep_attention_decode.py", "arena": cfg.name, "config": str(args.config),
        "profile": prof.name, "dtype": dtype, "heads": [prof.n_heads, prof.n_kv_heads, prof.head_dim],
        "device": torch.cuda.get_device_name(device) if use_cuda else "cpu (TRITON_INTERPRET=1)",
        "sm_count": cores, "max_kv_splits": args.max_splits, "lengths": args.lengths, "layout": args.layout,
        "window": window.label, "reps": args.reps, "grid": [c.name for c in configs], "shapes": [], "rows": [],
        "best": {}, "stopped": None, "timing": "", "control": bool(args.control),
    }
    print(f"sweep attention.decode: {doc['device']}, arena {cfg.name} ({prof.name}, HQ {prof.n_heads} HK "
          f"{prof.n_kv_heads} D {prof.head_dim}, {dtype}), shapes {', '.join(s.label for s in shapes)}, "
          f"{len(configs)} configs", flush=True)

    fwd, stock_why = load_stock()
    use_pdl = backend_use_pdl() if fwd is not None else False
    doc["stock"] = stock_why + (f" (use_pdl={use_pdl}, as TritonAttnBackend on this GPU)" if fwd is not None else "")
    if fwd is None:
        print(f"stock: {stock_why}; rows compare against the fp32 reference only", flush=True)
    timer = None
    if use_cuda:
        from cacheon_subnet.bench_timing import _Timer, measure_copy_bandwidth

        doc["copy_gbps"] = measure_copy_bandwidth(device)
        timer = _Timer(device)
        doc["timing"] = "cuda graphs, L2 flushed before each replay, stock and config interleaved"
        print(f"copy bandwidth {doc['copy_gbps']:,.0f} GB/s (= 100 %)", flush=True)
    else:
        doc["copy_gbps"] = None
        doc["timing"] = "skipped: no CUDA device (correctness only, Triton interpreter)"
        print("timing skipped: no CUDA device; correctness only (Triton interpreter)", flush=True)

    # compile every config once, in parallel (CUDA only)
    if use_cuda and args.jobs > 0:
        warm = list(dict.fromkeys(configs + [default_config(mod, s.batch, prof.n_kv_heads) for s in shapes]))
        errs, secs = precompile(warm, prof.n_heads, prof.n_kv_heads, prof.head_dim, args.max_splits, dtype,
                                args.jobs, t0 + 0.45 * args.budget_s)
        doc["precompile_s"] = round(secs, 1)
        doc["precompile_errors"] = {c.name: e for c, e in errs.items()}
        print(f"precompile: {len(warm)} configs in {secs:.1f} s with {args.jobs} processes"
              + (f", {len(errs)} refused" if errs else ""), flush=True)

    pool = make_pool(spec, prof.name, shapes, args.max_splits, act, args.seed, device)
    sm_scale = pool["sm_scale"]
    print(f"pool: {pool['k_buffer'].shape[0]} slots from the slot's generator ({time.monotonic() - t0:.1f} s)",
          flush=True)

    top: list[Config] = []
    per_config_s = 0.5
    for si, shape in enumerate(shapes):
        if time.monotonic() > deadline:
            doc["stopped"] = f"budget {args.budget_s:.0f} s spent before {shape.label}"
            break
        t = shape_inputs(pool, shape, args.max_splits, cores, args.lengths, args.layout, args.seed + 17 + si)
        hint = t["num_kv_splits"].cpu()
        hint_check = check_hint_against_sglang(t["lens"], hint, prof.n_heads, prof.n_kv_heads, args.max_splits,
                                               cores) if use_cuda else "not checked (no CUDA)"
        if hint_check and not hint_check.startswith("not checked"):
            print(f"{shape.label}: hint mismatch: {hint_check}", flush=True)
        ref = spec.reference({k: t[k] for k in ("q", "k_buffer", "v_buffer", "kv_indptr", "kv_indices")},
                             {"sm_scale": sm_scale})["o"]
        nbytes = kv_bytes(t)
        info = {"label": shape.label, "batch": shape.batch, "ctx": shape.ctx, "tokens": int(t["lens"].sum()),
                "bytes": nbytes, "hint": {str(k): v for k, v in sorted(Counter(hint.tolist()).items())},
                "hint_vs_sglang": hint_check or "agrees", "stock": None}
        doc["shapes"].append(info)

        stock = stock_out = None
        if fwd is not None:
            stock = Stock(fwd, t, sm_scale, use_pdl)
            st, detail, nums = check(stock, ref, None, tol, device)
            stock_out = stock.out.detach().float().cpu() if st != "error" else None
            info["stock"] = {"status": st, "detail": detail, **nums}
            if st != "ok":
                print(f"{shape.label}: stock {st}: {detail}", flush=True)
                stock = None if st == "error" else stock
        stock_replay = None
        if use_cuda and stock is not None:
            stock_replay, stock_graph = graphed(stock)
            sides = {"stock": stock_replay}
            if use_pdl:
                nopdl = Stock(fwd, t, sm_scale, False)
                sides["stock_nopdl"] = graphed(nopdl)[0]
            tm = time_sides(sides, 2 * args.reps, timer)
            info["stock"].update(us=tm["stock"]["median_us"], rel_stderr=tm["stock"]["rel_stderr"],
                                 gbps=nbytes / tm["stock"]["median_us"] / 1e3,
                                 nopdl_us=tm.get("stock_nopdl", {}).get("median_us"))
            info["stock"]["pct_copy"] = 100 * info["stock"]["gbps"] / doc["copy_gbps"]
            print(f"{shape.label}: stock {info['stock']['us']:.1f} µs, {info['stock']['gbps']:,.0f} GB/s "
                  f"({info['stock']['pct_copy']:.1f} %), hint {info['hint']}"
                  + (f", without PDL {info['stock']['nopdl_us']:.1f} µs" if info["stock"]["nopdl_us"] else ""),
                  flush=True)

        dflt = default_config(mod, shape.batch, prof.n_kv_heads)
        todo = list(configs) if si == 0 else list(dict.fromkeys(top[: args.top]))
        if si == 0:
            rest = [c for c in todo if c != dflt]
            random.Random(args.seed).shuffle(rest)  # a budget stop leaves an even spread, not one corner
            todo = [dflt] + rest
        elif dflt not in todo:
            todo.append(dflt)
        entries: list[tuple[str, Config, Any]] = [(c.name, c, None) for c in todo]
        if args.control and si == 0:
            entries.append((CONTROL, dflt, wrong_indices(t)))
        later = len(shapes) - si - 1
        for name, c, bad in entries:
            now = time.monotonic()
            reserve = (later * (args.top + 1) * per_config_s + later * 3.0) if si == 0 else 0.0
            if now + per_config_s + reserve > deadline:
                doc["stopped"] = doc["stopped"] or f"budget {args.budget_s:.0f} s: {shape.label} stopped before {name}"
                break
            row = Row(shape=shape.label, config=name, block_n=c.block_n, warps=c.warps, stages=c.stages,
                      splits=c.splits, default=(c == dflt and bad is None))
            cand = Candidate(mod, c, t, sm_scale, bad)
            row.status, row.detail, nums = check(cand, ref, stock_out, tol, device)
            for k, v in nums.items():
                setattr(row, k, v)
            if use_cuda and row.status != "error":
                try:
                    replay, graph = graphed(cand)
                    sides = {"cand": replay, **({"stock": stock_replay} if stock_replay else {})}
                    tm = time_sides(sides, args.reps, timer)
                    row.us, row.rel_stderr = tm["cand"]["median_us"], tm["cand"]["rel_stderr"]
                    row.gbps = nbytes / row.us / 1e3
                    row.pct_copy = 100 * row.gbps / doc["copy_gbps"]
                    if "stock" in tm:
                        row.stock_us = tm["stock"]["median_us"]
                        row.speedup = row.stock_us / row.us
                    del graph
                except Exception as e:  # noqa: BLE001 - e.g. capture refused: the row says so
                    row.status, row.detail = "error", f"timing: {type(e).__name__}: {e}"[:240]
            doc["rows"].append(asdict(row))
            per_config_s = 0.8 * per_config_s + 0.2 * (time.monotonic() - now) if si == 0 else per_config_s
            if args.verbose:
                print(f"  {shape.label} {name}: {row.status} {row.us or 0:.1f} µs {row.speedup or 0:.3f}x", flush=True)
        if si == 0:
            good = [r for r in doc["rows"] if r["shape"] == shape.label and r["status"] == "ok"
                    and r["config"] != CONTROL]
            good.sort(key=lambda r: -(r["speedup"] or (1.0 / r["us"] if r["us"] else 0.0)))
            top = [Config(r["block_n"], r["warps"], r["stages"], r["splits"]) for r in good]
        best = best_row(doc["rows"], shape.label)
        if best is not None:
            doc["best"][shape.label] = best
    doc["duration_s"] = round(time.monotonic() - t0, 1)
    return doc


def best_row(rows: list[dict[str, Any]], label: str) -> dict[str, Any] | None:
    good = [r for r in rows if r["shape"] == label and r["status"] == "ok" and r["config"] != CONTROL and r["us"]]
    return min(good, key=lambda r: r["us"]) if good else None


# -- output -------------------------------------------------------------------------------------
def _f(x: Any, fmt: str, width: int) -> str:
    return format(x, fmt).rjust(width) if x is not None else "-".rjust(width)


def render(doc: dict[str, Any], limit: int) -> str:
    """The summary first (shapes, stock, best per shape: what a truncated device log must keep),
    then the window shape's rows by speedup, what failed, and the other shapes' rows."""
    lines = [f"attention.decode sweep: {doc['device']}, {doc['profile']} {doc['dtype']}, timing: {doc['timing']}",
             f"stock: {doc['stock']}"]
    if doc.get("copy_gbps"):
        lines.append(f"measured copy bandwidth {doc['copy_gbps']:,.0f} GB/s = 100 %")
    for s in doc["shapes"]:
        st = s["stock"] or {}
        lines.append(f"  {s['label']}: {s['tokens']} tokens, {s['bytes'] / 1e9:.3f} GB, SGLang hint {s['hint']} "
                     f"({s['hint_vs_sglang']}); stock "
                     + (f"{st['us']:.1f} µs {st['pct_copy']:.1f} %" if st.get("us") else st.get("status", "n/a")))
    lines.append("best per shape (correct configs only, lowest µs; the example's default for comparison):")
    for s in doc["shapes"]:
        b = doc["best"].get(s["label"])
        d = next((r for r in doc["rows"] if r["shape"] == s["label"] and r["default"]), None)
        text = "none timed"
        if b:
            text = f"{b['config']:20} {b['us']:8.1f} µs" + (f" {b['speedup']:.3f}x vs stock" if b["speedup"] else "")
        if d and d["us"]:
            text += f"   (default {d['config']} {d['us']:.1f} µs" + (f" {d['speedup']:.3f}x)" if d["speedup"] else ")")
        lines.append(f"  {s['label']:16} {text}")
    if doc["stopped"]:
        lines.append(f"stopped early: {doc['stopped']}")
    win = [r for r in doc["rows"] if r["shape"] == doc["window"]]
    win.sort(key=lambda r: (r["status"] == "error", -(r["speedup"] or 0.0), r["us"] or 0.0))
    hdr = (f"{'config':20} {'status':6} {'µs':>8} {'stock µs':>9} {'speedup':>8} {'GB/s':>7} {'%copy':>6} "
           f"{'±':>6} {'max|d| stock':>12} {'rel_l2 ref':>10}")
    lines += ["", f"window shape {doc['window']} (sorted by speedup; * = the example's default)", hdr]
    lines += [_row_line(r) for r in (win[:limit] if limit else win)]
    if limit and len(win) > limit:
        lines.append(f"... {len(win) - limit} more rows in the JSON")
    bad = [r for r in doc["rows"] if r["status"] in ("wrong", "error")]
    for r in bad[:10]:
        lines.append(f"{r['status'].upper()}: {r['shape']} {r['config']}: {r['detail']}")
    if len(bad) > 10:
        lines.append(f"... {len(bad) - 10} more wrong or failed rows in the JSON")
    for s in doc["shapes"][1:]:
        rows = sorted((r for r in doc["rows"] if r["shape"] == s["label"]), key=lambda r: -(r["speedup"] or 0.0))
        lines += ["", f"shape {s['label']}", hdr] + [_row_line(r) for r in rows]
    lines.append(f"({doc['duration_s']} s)")
    return "\n".join(lines)


def _row_line(r: dict[str, Any]) -> str:
    name = r["config"] + ("*" if r["default"] else "")
    return (f"{name:20} {r['status']:6} {_f(r['us'], '.1f', 8)} {_f(r['stock_us'], '.1f', 9)} "
            f"{_f(r['speedup'], '.3f', 7)}x {_f(r['gbps'], ',.0f', 7)} {_f(r['pct_copy'], '.1f', 6)} "
            f"{_f(100 * r['rel_stderr'] if r['rel_stderr'] is not None else None, '.2f', 5)}% "
            f"{_f(r['max_abs_vs_stock'], '.2e', 12)} {_f(r['rel_l2_vs_ref'], '.2e', 10)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(DEFAULT_CONFIG), help="arena config (shapes, profile, dtype)")
    ap.add_argument("--shapes", default="", help="BSxCTX,... (first: the window shape); default: from the arena")
    ap.add_argument("--block-n", default=",".join(map(str, GRID["block_n"])))
    ap.add_argument("--warps", default=",".join(map(str, GRID["warps"])))
    ap.add_argument("--stages", default=",".join(map(str, GRID["stages"])))
    ap.add_argument("--splits", default=",".join(map(str, GRID["splits"])), help="0: SGLang's hint (the default)")
    ap.add_argument("--configs", default="", help="explicit list bnN-wW-sS-(hint|spK),... instead of the grid")
    ap.add_argument("--top", type=int, default=5, help="configs timed at the other shapes (best at the window)")
    ap.add_argument("--reps", type=int, default=100, help="timed replays per side and config")
    ap.add_argument("--budget-s", type=float, default=330.0, help="stop starting new measurements after this")
    ap.add_argument("--jobs", type=int, default=max(1, min(16, (os.cpu_count() or 2) - 2)),
                    help="compile processes (0: compile in the timed process)")
    ap.add_argument("--max-splits", type=int, default=SGLANG_MAX_KV_SPLITS, help="SGLang's max_kv_splits")
    ap.add_argument("--lengths", choices=("arena", "slot"), default="arena",
                    help="arena: every request at CTX tokens; slot: the slot generator's lengths in [1, CTX]")
    ap.add_argument("--layout", choices=("permuted", "contiguous"), default="permuted", help="pool slots of the tokens")
    ap.add_argument("--dtype", default="", help="default: the arena model's dtype")
    ap.add_argument("--device", choices=("auto", "cpu"), default="auto")
    ap.add_argument("--control", action="store_true", help="add a row that is wrong on purpose (the check must catch it)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rows", type=int, default=25, help="window rows printed (0: all; the JSON has all)")
    ap.add_argument("--out", default="", help="JSON with every row")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    doc = run(args)
    print(render(doc, args.rows), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(_finite(doc), indent=1, default=str))
    return 0


def _finite(x: Any) -> Any:
    """NaN / inf (a NaN output's max |d|) as null: the JSON stays standard."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


if __name__ == "__main__":
    sys.exit(main())
