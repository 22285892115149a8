"""`cacheon bench`: per-shape timing of a bundle's kernels against stock SGLang (or the reference).

The kernels run in the sandboxed worker (bench_timing.py); the host picks the shapes, checks
a fresh-input run of every timed kernel against the reference (a kernel that is fast because it
is wrong shows up as such) and renders speedup and % of measured HBM copy bandwidth. Each phase
(worker start, stock warm-up, each case's timing and re-check) prints a `progress.note` line on
stderr unless --quiet. Inputs are drawn from secret seeds on the bench device: by the worker,
and for the re-check by the host again (nothing GB-sized crosses the wire back).

Advisory only: these timings are taken inside the worker, next to the contribution's code, so
a bundle can bend them. No verdict uses them; the CPU arena (validator/qualify.py) times on the
host's clock (validator/host_timing.py) and the GPU arena in the engine.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from cacheon_subnet import progress, sandbox
from cacheon_subnet.bench_arena import Prediction, fixture_constants, inputs_line, predict
from cacheon_subnet.bench_report import BenchReport, BenchRow
from cacheon_subnet.bench_words import CaseCost, baseline_label
from cacheon_subnet.bundle import Bundle
from cacheon_subnet.log import get_logger
from cacheon_subnet.records import crownable, slot_inputs
from cacheon_subnet.slots import fixture_draw, get_slot
from cacheon_subnet.slots.retarget import profile_cases
from cacheon_subnet.slots.spec import dtype_of
from cacheon_subnet.verify import judge
from cacheon_subnet.verify import protocol as P
from cacheon_subnet.verify.client import WorkerClient, WorkerConfig, WorkerDied, WorkerTimeout
from cacheon_subnet.verify.report import Failure
from cacheon_subnet.verify.shapes import arena_cases, token_count

log = get_logger("cacheon.bench")


@dataclass(frozen=True)
class BenchOptions:
    device: str = "cuda"
    tier: str = "bench"
    budget_s: float = 3.0
    target_rel_err: float = 0.001
    max_cases: int | None = None
    dtype: str | None = None  # default: the op's first declared dtype
    seed: int | None = None
    call_timeout_s: float = 900.0
    stock: bool = True
    model: Any = None  # slots.profiles.ModelProfile of a real checkpoint: its shapes replace the built-in ones
    arena: Any = None  # verify.shapes.ArenaShapes: time the sizes this arena runs, its window's own first
    fixtures: Any = None  # where the arenas' slot-input fixtures are (Path; default configs/arena/fixtures)


def bench_bundle(bundle: Bundle, opts: BenchOptions = BenchOptions()) -> BenchReport:
    t0 = time.monotonic()
    seed = opts.seed if opts.seed is not None else secrets.randbits(40)
    # Bench is the miner's own tool on the miner's machine: keep network isolation and the audit
    # guard but not the uid drop, so stock SGLang can reuse its JIT cache (owned by the user).
    policy = sandbox.SandboxPolicy(wall_timeout_s=opts.call_timeout_s, cpu_seconds=None, drop_privileges=False)
    stock = tuple(sorted({o.slot for o in bundle.manifest.ops})) if opts.stock else ()
    warm = _stock_warmup(bundle, opts) if opts.stock else ()
    from cacheon_subnet.verify.native_gate import worker_artifacts

    native = worker_artifacts(bundle, opts.device)  # CUDA ops: compiled here behind the lane's wall, loaded sealed there
    client = WorkerClient(
        bundle, WorkerConfig(device=opts.device, policy=policy, preload_stock=stock, preload_cases=warm, native=native)
    )
    rows: list[BenchRow] = []
    errors: list[str] = []
    predictions: list[Prediction] = []
    env: dict[str, Any] = {}
    hbm = None
    fixture = _fixture(opts)
    card_fixtures: dict[str, slot_inputs.ArenaFixture | None] = {}
    drawn: dict[str, bool] = {}
    try:
        progress.note(
            f"bench: starting the sandboxed worker on {opts.device}"
            + (
                f" (stock kernels first run once on each of {len(warm)} shapes: SGLang builds them on first call)"
                if warm
                else ""
            )
        )
        client.start()
        ops = bundle.manifest.ops
        raw, _ = client.request(P.request(P.load_request(ops)), None, 300, on_progress=_warm_progress(warm, t0))
        loaded = P.read_reply(raw, P.Loaded)  # the worker imported the bundle: its reply is decoded strictly
        env = dict(loaded.env or {})
        progress.note(f"bench: worker ready after {time.monotonic() - t0:.1f} s")
        for op in ops:
            res = loaded.results.get(op.key)
            if res is None or not res.ok:
                errors.append(f"{op.key}: {_load_error(res)}")
                continue
            spec = get_slot(op.slot)
            if spec.collective:  # one process cannot time a collective; verify checks it on N ranks
                errors.append(
                    f"{op.key}: collective slot: bench has no multi-rank timing yet (verify it with "
                    f"cacheon verify --world-size {spec.world_sizes[0]})"
                )
                continue
            dtype = opts.dtype or op.dtypes[0]
            if dtype not in op.dtypes:
                errors.append(f"{op.key}: dtype {dtype} not declared by the bundle")
                continue
            placed = _cases(spec, op, opts, fixture)
            drawn[op.slot] = any(fixture_draw.from_fixture(c.constants) for c, _ in placed)
            ratio: float | None = None
            if not placed:
                model = opts.arena.model if opts.arena is not None else opts.model
                errors.append(
                    f"{op.key}: slot {op.slot} has no workload on "
                    + (f"model {model.name}" if model is not None else "these shapes")
                )
                continue
            for i, (case, where) in enumerate(placed):
                msg = {
                    "type": "bench",
                    "op": op.key,
                    "case": case.to_json(),
                    "dtype": dtype,
                    "seed": seed + 1000 * i,
                    "budget_s": opts.budget_s,
                    "target_rel_err": opts.target_rel_err,
                    "stock": opts.stock,
                }
                log.info("bench.case", op=op.key, case=case.label, dtype=dtype)
                tag = f"bench [{i + 1}/{len(placed)}] {op.key} {case.label} {dtype}" + (f" ({where})" if where else "")
                t_case = time.monotonic()
                progress.note(f"{tag}: drawing the re-check's inputs and running the fp32 reference on them")
                ref, cost = host_reference(spec, case, dtype, msg["seed"] + 1, opts.device)
                cost = replace(cost, ratio=ratio)
                progress.note(f"{tag}: timing, {cost.say(opts.budget_s)}")
                raw, tensors = client.request(msg, None, opts.call_timeout_s)
                r = P.read_reply(raw, P.BenchReply)
                sides = _sides(r)
                if isinstance(sides, str):
                    errors.append(f"{op.key} {case.label}: {sides}")
                    progress.note(f"{tag}: {errors[-1]}")
                    continue
                hbm = hbm if hbm is not None else r.hbm_gbps
                cand, base = sides
                ratio = cand.median_us / base.median_us if base.median_us > 0 else None
                progress.note(
                    f"{tag}: {cand.median_us:.2f} µs vs {base.median_us:.2f} µs; re-checking against the reference"
                )
                t_check = time.monotonic()
                rows.append(_row(op.key, spec, case, dtype, r, sides, tensors, hbm, where, ref, opts.device))
                row = rows[-1]
                gpu = str(env.get("gpu", opts.device))
                if gpu not in card_fixtures:  # read once per device, not per row
                    card_fixtures[gpu] = _card_fixture(opts, gpu)
                pred = predict(
                    op.key, op.slot, row.case, where, token_count(spec, case) or 0, row.speedup, row.baseline_us,
                    card_fixtures[gpu] or fixture, row.baseline, gpu,
                )  # fmt: skip
                predictions += [pred] if pred is not None else []
                progress.note(
                    f"{tag}: re-check {rows[-1].recheck} ({time.monotonic() - t_check:.1f} s; "
                    f"the case took {time.monotonic() - t_case:.1f} s)"
                )
    except (WorkerTimeout, WorkerDied, P.ProtocolError) as e:  # a malformed reply ends the bench, named
        errors.append(f"worker: {e}")
    finally:
        client.cleanup()
    return BenchReport(
        bundle.digest,
        opts.device,
        tuple(rows),
        tuple(errors),
        env,
        hbm,
        time.monotonic() - t0,
        _arena_line(opts.arena, sorted({o.slot for o in bundle.manifest.ops}))
        + (f"\n{inputs_line(opts.arena.name, fixture, drawn)}" if opts.arena is not None else ""),
        tuple(predictions),
    )


def _load_error(res: P.LoadResult | None) -> str:
    """Why an op did not load, as the bench's error line says it (the traceback's last line)."""
    if res is None:
        return "protocol: the worker's load reply has no answer for this op"
    return f"{res.reason}: {((res.error or '').strip().splitlines() or [''])[-1]}"


def _sides(r: P.BenchReply) -> tuple[P.SideTiming, P.SideTiming] | str:
    """The candidate's and the baseline's figures of a bench reply, or the error line for a
    failed case or for a reply without both (a malformed reply is an error line, never a KeyError)."""
    if not r.ok:
        return f"{r.reason}: {(r.error or '').strip().splitlines()[-1:]}"
    t = r.timings or {}
    if "candidate" not in t or "baseline" not in t:
        return f"protocol: the bench reply times {sorted(t)}, not the candidate and the baseline"
    return t["candidate"], t["baseline"]


def _warm_progress(warm: tuple[tuple[str, str, dict[str, Any]], ...], t0: float) -> Any:
    """Prints the worker's warm-up frames; only their counter is read (the labels are the host's)."""

    def show(frame: dict[str, Any]) -> None:
        i = frame.get("done")
        if isinstance(i, int) and 1 <= i <= len(warm):
            slot, dtype, case = warm[i - 1]
            progress.note(
                f"bench: stock warm-up {i}/{len(warm)}: {slot} {case['label']} {dtype} ({time.monotonic() - t0:.1f} s)"
            )

    return show


def _stock_warmup(bundle: Bundle, opts: BenchOptions) -> tuple[tuple[str, str, dict[str, Any]], ...]:
    """Every (slot, dtype, case) the stock side will time: the worker calls each once before its
    guard is armed, so SGLang's per-shape JIT builds never run under it."""
    out: dict[tuple[str, str, str], tuple[str, str, dict[str, Any]]] = {}
    for op in bundle.manifest.ops:
        spec = get_slot(op.slot)
        dtype = opts.dtype or op.dtypes[0]
        if spec.collective or dtype not in op.dtypes:
            continue
        for case, _ in _cases(spec, op, opts, _fixture(opts)):
            out.setdefault((op.slot, dtype, case.label), (op.slot, dtype, case.to_json()))
    return tuple(out.values())


def _fixture(opts: BenchOptions) -> slot_inputs.ArenaFixture | None:
    if opts.arena is None:
        return None
    return slot_inputs.load(opts.arena.name, opts.fixtures or slot_inputs.FIXTURES)


def _card_fixture(opts: BenchOptions, gpu: str) -> slot_inputs.ArenaFixture | None:
    """The arena's fixture captured on this bench's card, when one is committed (slot_inputs.for_card)."""
    if opts.arena is None:
        return None
    return slot_inputs.for_card(opts.arena.name, gpu, opts.fixtures or slot_inputs.FIXTURES)


def _cases(spec, op, opts: BenchOptions, fixture: slot_inputs.ArenaFixture | None = None) -> list[tuple[Any, str]]:  # noqa: ANN001
    """(case, where) to time: the arena's own sizes (window first, drawn like its engine's inputs
    where its fixture records them) or the tier's cases."""
    if opts.arena is not None:
        consts = fixture_constants(spec.id, fixture.slot(spec.id) if fixture is not None else None)
        placed = [
            (replace(c, constants={**c.constants, **consts}) if consts else c, w)
            for c, w in arena_cases(spec, spec.cases(opts.tier), opts.arena)
        ]
    else:
        cases = spec.cases(opts.tier)
        if opts.model is not None:
            cases = profile_cases(spec, cases, opts.model)
        placed = [(c, "") for c in cases]
    return [(c, w) for c, w in placed if op.eligible(c.dims)][: opts.max_cases or None]


def _arena_line(arena: Any, slots: Sequence[str] = ()) -> str:
    if arena is None:
        return ""
    gains = "".join(f"\n{crownable.line(arena.name or arena.profile, s)}" for s in slots)
    window = (
        ", ".join(f"{k} {'bs ' if k == 'decode' else ''}{n}{' tokens' if k == 'prefill' else ''}" for k, n in arena.window)
        or "unknown"
    )
    ctx = f" (decode attends to ~{arena.decode_context} tokens a request)" if arena.decode_context else ""
    return (
        f"arena {arena.name or arena.profile}: its timed window runs {window}{ctx}; it also captures decode at "
        f"bs {', '.join(map(str, arena.decode_batches))} and prefills {', '.join(map(str, arena.prefill_tokens))} tokens"
        + gains
    )


def host_reference(spec, case, dtype: str, seed: int, device: str) -> tuple[dict, CaseCost]:  # noqa: ANN001
    """The fp32 reference's outputs on the re-check call's inputs, which the host draws itself
    from the call's seed on the bench device (no GB-sized copy of them comes back from the
    worker; on CUDA neither the draw nor the reference is host work), and what both cost."""
    import torch

    from cacheon_subnet.bench_timing import device_inputs

    def sync() -> None:
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()

    t0 = time.perf_counter()
    inputs = device_inputs(spec, case, dtype_of(dtype), seed, device)
    sync()
    draw_s = time.perf_counter() - t0
    sent = {k: v for k, v in inputs.items() if spec.arg(k).role in ("in", "inout")}
    calls: list[float] = []
    while not calls or (len(calls) < 5 and sum(calls) < 0.5):  # a cheap first call is mostly start-up cost
        t1 = time.perf_counter()
        with torch.device(device):
            ref = spec.reference(sent, case.params)
        sync()
        calls.append(time.perf_counter() - t1)
    out = {k: v.cpu() for k, v in ref.items()}
    del inputs, sent, ref
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()  # the worker times next, on the same GPU: hand the K/V pool's memory back
    return out, CaseCost(draw_s=draw_s, call_s=min(calls))


def recheck(spec, case, dtype: str, seed: int, device: str, got: dict) -> Failure | None:  # noqa: ANN001
    """The worker's outputs of its re-check call against the reference on the same inputs."""
    return judge.check_outputs(spec, dtype, got, host_reference(spec, case, dtype, seed, device)[0])


def _row(
    key: str,
    spec,
    case,
    dtype: str,
    r: P.BenchReply,
    sides: tuple[P.SideTiming, P.SideTiming],
    tensors: dict,
    hbm: float | None,  # noqa: ANN001
    where: str,
    ref: dict,
    device: str,
) -> BenchRow:
    cand, base = sides
    got = {k[4:]: v for k, v in tensors.items() if k.startswith("out.")}
    f = judge.check_outputs(spec, dtype, got, ref)
    nbytes = spec.default_bytes(case, dtype_of(dtype))
    gbps = nbytes / (cand.median_us * 1e-6) / 1e9 if cand.median_us > 0 else 0.0
    return BenchRow(
        op=key,
        case=case.label,
        dtype=dtype,
        candidate_us=cand.median_us,
        baseline_us=base.median_us,
        speedup=base.median_us / cand.median_us if cand.median_us > 0 else 0.0,
        baseline=baseline_label(r.baseline or "", device),
        bytes=nbytes,
        candidate_gbps=gbps,
        pct_hbm=100 * gbps / hbm if hbm else None,
        n=cand.n,
        rel_stderr=max(cand.rel_stderr, base.rel_stderr),
        recheck="ok" if f is None else f"FAIL {f.reason}",
        where=where,
        inputs="fixture" if fixture_draw.from_fixture(case.constants) else "synthetic",
        clock=r.clock or "",
    )
