"""The run: the arena's shapes in order, the full grid at the window shape only (the other shapes
time the window's --top best correct configs plus the example's default), and --budget-s checked
before every measurement so a stopped run still reports what it measured."""

from __future__ import annotations

import argparse
import os
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from attnsweep.check import check
from attnsweep.grid import CONTROL, H200_SMS, Config, Row, Shape, default_shapes, grid_configs, parse_shapes
from attnsweep.inputs import check_hint_against_sglang, kv_bytes, make_pool, shape_inputs, wrong_indices
from attnsweep.precompile import precompile
from attnsweep.sides import Candidate, Stock, backend_use_pdl, default_config, load_example, load_stock
from attnsweep.timing import graphed, time_sides


@dataclass(frozen=True)
class Sweep:
    """What every shape's measurements read, fixed once the run is set up."""

    args: argparse.Namespace
    deadline: float
    device: Any
    use_cuda: bool
    spec: Any
    tol: Any
    prof: Any
    act: Any
    shapes: list[Shape]
    cores: int
    configs: list[Config]
    mod: Any
    fwd: Callable[..., None] | None
    use_pdl: bool
    timer: Any
    copy_gbps: float | None


@dataclass(frozen=True)
class Case:
    """One shape's inputs and what every config there is compared with; `stock` is held so the
    scratch its captured graph writes stays allocated while the configs replay beside it."""

    shape: Shape
    t: dict[str, Any]
    ref: Any
    nbytes: int
    sm_scale: float
    default: Config
    stock: Any
    stock_out: Any
    stock_replay: Callable[[], None] | None


def setup(args: argparse.Namespace, t0: float) -> tuple[Sweep, dict[str, Any]]:
    """Device, arena shapes, both sides and the copy bandwidth; on CUDA the precompile. Returns
    the run's fixed state and the document's header (printed as it is learnt)."""
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
        "tool": "scripts/sweep_attention_decode.py",
        "arena": cfg.name,
        "config": str(args.config),
        "profile": prof.name,
        "dtype": dtype,
        "heads": [prof.n_heads, prof.n_kv_heads, prof.head_dim],
        "device": torch.cuda.get_device_name(device) if use_cuda else "cpu (TRITON_INTERPRET=1)",
        "sm_count": cores,
        "max_kv_splits": args.max_splits,
        "lengths": args.lengths,
        "layout": args.layout,
        "window": window.label,
        "reps": args.reps,
        "grid": [c.name for c in configs],
        "shapes": [],
        "rows": [],
        "best": {},
        "stopped": None,
        "timing": "",
        "control": bool(args.control),
    }
    print(
        f"sweep attention.decode: {doc['device']}, arena {cfg.name} ({prof.name}, HQ {prof.n_heads} HK "
        f"{prof.n_kv_heads} D {prof.head_dim}, {dtype}), shapes {', '.join(s.label for s in shapes)}, "
        f"{len(configs)} configs",
        flush=True,
    )

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
        errs, secs = precompile(
            warm, prof.n_heads, prof.n_kv_heads, prof.head_dim, args.max_splits, dtype, args.jobs, t0 + 0.45 * args.budget_s
        )
        doc["precompile_s"] = round(secs, 1)
        doc["precompile_errors"] = {c.name: e for c, e in errs.items()}
        print(
            f"precompile: {len(warm)} configs in {secs:.1f} s with {args.jobs} processes"
            + (f", {len(errs)} refused" if errs else ""),
            flush=True,
        )
    sw = Sweep(
        args=args,
        deadline=deadline,
        device=device,
        use_cuda=use_cuda,
        spec=spec,
        tol=tol,
        prof=prof,
        act=act,
        shapes=shapes,
        cores=cores,
        configs=configs,
        mod=mod,
        fwd=fwd,
        use_pdl=use_pdl,
        timer=timer,
        copy_gbps=doc["copy_gbps"],
    )
    return sw, doc


def prepare(sw: Sweep, pool: dict[str, Any], shape: Shape, si: int, doc: dict[str, Any]) -> Case:
    """The shape paged from the pool, its fp32 reference, SGLang's hint (checked against SGLang's
    own kernel on CUDA) and stock: checked, and on CUDA graphed and timed (also without PDL)."""
    args, prof, sm_scale = sw.args, sw.prof, pool["sm_scale"]
    t = shape_inputs(pool, shape, args.max_splits, sw.cores, args.lengths, args.layout, args.seed + 17 + si)
    hint = t["num_kv_splits"].cpu()
    hint_check = (
        check_hint_against_sglang(t["lens"], hint, prof.n_heads, prof.n_kv_heads, args.max_splits, sw.cores)
        if sw.use_cuda
        else "not checked (no CUDA)"
    )
    if hint_check and not hint_check.startswith("not checked"):
        print(f"{shape.label}: hint mismatch: {hint_check}", flush=True)
    ref = sw.spec.reference(
        {k: t[k] for k in ("q", "k_buffer", "v_buffer", "kv_indptr", "kv_indices")}, {"sm_scale": sm_scale}
    )["o"]
    nbytes = kv_bytes(t)
    info = {
        "label": shape.label,
        "batch": shape.batch,
        "ctx": shape.ctx,
        "tokens": int(t["lens"].sum()),
        "bytes": nbytes,
        "hint": {str(k): v for k, v in sorted(Counter(hint.tolist()).items())},
        "hint_vs_sglang": hint_check or "agrees",
        "stock": None,
    }
    doc["shapes"].append(info)

    stock = stock_out = None
    if sw.fwd is not None:
        stock = Stock(sw.fwd, t, sm_scale, sw.use_pdl)
        st, detail, nums = check(stock, ref, None, sw.tol, sw.device)
        stock_out = stock.out.detach().float().cpu() if st != "error" else None
        info["stock"] = {"status": st, "detail": detail, **nums}
        if st != "ok":
            print(f"{shape.label}: stock {st}: {detail}", flush=True)
            stock = None if st == "error" else stock
    stock_replay = None
    if sw.use_cuda and stock is not None:
        stock_replay, _ = graphed(stock)  # the bound replay holds its graph
        sides = {"stock": stock_replay}
        if sw.use_pdl:
            nopdl = Stock(sw.fwd, t, sm_scale, False)
            sides["stock_nopdl"] = graphed(nopdl)[0]
        tm = time_sides(sides, 2 * args.reps, sw.timer)
        info["stock"].update(
            us=tm["stock"]["median_us"],
            rel_stderr=tm["stock"]["rel_stderr"],
            gbps=nbytes / tm["stock"]["median_us"] / 1e3,
            nopdl_us=tm.get("stock_nopdl", {}).get("median_us"),
        )
        info["stock"]["pct_copy"] = 100 * info["stock"]["gbps"] / sw.copy_gbps
        print(
            f"{shape.label}: stock {info['stock']['us']:.1f} µs, {info['stock']['gbps']:,.0f} GB/s "
            f"({info['stock']['pct_copy']:.1f} %), hint {info['hint']}"
            + (f", without PDL {info['stock']['nopdl_us']:.1f} µs" if info["stock"]["nopdl_us"] else ""),
            flush=True,
        )
    return Case(
        shape=shape,
        t=t,
        ref=ref,
        nbytes=nbytes,
        sm_scale=sm_scale,
        default=default_config(sw.mod, shape.batch, prof.n_kv_heads),
        stock=stock,
        stock_out=stock_out,
        stock_replay=stock_replay,
    )


def plan(sw: Sweep, si: int, case: Case, top: list[Config]) -> list[tuple[str, Config, Any]]:
    """(name, config, wrong kv_indices or None) in the order measured: at the window shape the
    default first, then the grid shuffled (a budget stop leaves an even spread, not one corner)
    and the --control row; elsewhere the window's --top best, then the default if not among them."""
    args, dflt = sw.args, case.default
    todo = list(sw.configs) if si == 0 else list(dict.fromkeys(top[: args.top]))
    if si == 0:
        rest = [c for c in todo if c != dflt]
        random.Random(args.seed).shuffle(rest)
        todo = [dflt] + rest
    elif dflt not in todo:
        todo.append(dflt)
    entries: list[tuple[str, Config, Any]] = [(c.name, c, None) for c in todo]
    if args.control and si == 0:
        entries.append((CONTROL, dflt, wrong_indices(case.t)))
    return entries


def measure(sw: Sweep, case: Case, name: str, c: Config, bad: Any) -> Row:
    """One config: checked, then on CUDA graphed and timed interleaved with stock (same reps)."""
    row = Row(
        shape=case.shape.label,
        config=name,
        block_n=c.block_n,
        warps=c.warps,
        stages=c.stages,
        splits=c.splits,
        default=(c == case.default and bad is None),
    )
    cand = Candidate(sw.mod, c, case.t, case.sm_scale, bad)
    row.status, row.detail, nums = check(cand, case.ref, case.stock_out, sw.tol, sw.device)
    for k, v in nums.items():
        setattr(row, k, v)
    if sw.use_cuda and row.status != "error":
        try:
            replay, graph = graphed(cand)
            sides = {"cand": replay, **({"stock": case.stock_replay} if case.stock_replay else {})}
            tm = time_sides(sides, sw.args.reps, sw.timer)
            row.us, row.rel_stderr = tm["cand"]["median_us"], tm["cand"]["rel_stderr"]
            row.gbps = case.nbytes / row.us / 1e3
            row.pct_copy = 100 * row.gbps / sw.copy_gbps
            if "stock" in tm:
                row.stock_us = tm["stock"]["median_us"]
                row.speedup = row.stock_us / row.us
            del graph
        except Exception as e:  # noqa: BLE001 - e.g. capture refused: the row says so
            row.status, row.detail = "error", f"timing: {type(e).__name__}: {e}"[:240]
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole sweep as one JSON-able document (render.render prints it)."""
    t0 = time.monotonic()
    sw, doc = setup(args, t0)
    pool = make_pool(sw.spec, sw.prof.name, sw.shapes, args.max_splits, sw.act, args.seed, sw.device)
    print(f"pool: {pool['k_buffer'].shape[0]} slots from the slot's generator ({time.monotonic() - t0:.1f} s)", flush=True)

    top: list[Config] = []
    per_config_s = 0.5
    for si, shape in enumerate(sw.shapes):
        if time.monotonic() > sw.deadline:
            doc["stopped"] = f"budget {args.budget_s:.0f} s spent before {shape.label}"
            break
        case = prepare(sw, pool, shape, si, doc)
        entries = plan(sw, si, case, top)
        later = len(sw.shapes) - si - 1
        for name, c, bad in entries:
            now = time.monotonic()
            reserve = (later * (args.top + 1) * per_config_s + later * 3.0) if si == 0 else 0.0
            if now + per_config_s + reserve > sw.deadline:
                doc["stopped"] = doc["stopped"] or f"budget {args.budget_s:.0f} s: {shape.label} stopped before {name}"
                break
            row = measure(sw, case, name, c, bad)
            doc["rows"].append(asdict(row))
            per_config_s = 0.8 * per_config_s + 0.2 * (time.monotonic() - now) if si == 0 else per_config_s
            if args.verbose:
                print(f"  {shape.label} {name}: {row.status} {row.us or 0:.1f} µs {row.speedup or 0:.3f}x", flush=True)
        if si == 0:
            top = ranked(doc["rows"], shape.label)
        best = best_row(doc["rows"], shape.label)
        if best is not None:
            doc["best"][shape.label] = best
    doc["duration_s"] = round(time.monotonic() - t0, 1)
    return doc


def ranked(rows: list[dict[str, Any]], label: str) -> list[Config]:
    """The correct configs at `label`, best first (by speedup, or by µs where stock was not timed)."""
    good = [r for r in rows if r["shape"] == label and r["status"] == "ok" and r["config"] != CONTROL]
    good.sort(key=lambda r: -(r["speedup"] or (1.0 / r["us"] if r["us"] else 0.0)))
    return [Config(r["block_n"], r["warps"], r["stages"], r["splits"]) for r in good]


def best_row(rows: list[dict[str, Any]], label: str) -> dict[str, Any] | None:
    """The lowest-µs correct row at `label` (the control never counts)."""
    good = [r for r in rows if r["shape"] == label and r["status"] == "ok" and r["config"] != CONTROL and r["us"]]
    return min(good, key=lambda r: r["us"]) if good else None
