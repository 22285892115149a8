"""Which shapes verify runs: the slot's tier cases plus every token count the arena will run.

A kernel is only known good at the extents it was checked at; the arena captures decode graphs
at each `cuda_graph_bs` and prefills chunks far larger than the tier cases. `ArenaShapes` holds
those numbers as plain integers (the CLI reads the arena config; cacheon_subnet never imports
arena/). The slot's own cases are templates: `resize` re-targets one to another token count.

GPU tier: every decode batch size and every listed prefill size, each on a random template of the
arena's profile, every dtype; plus one random odd decode and prefill size. CPU tier (Triton
interpreter, about 4 ms per row-program): the largest arena size (the largest that fits
CPU_MAX_CASE_BYTES), one odd size and one random arena size of at most 1024 tokens, each in one
random dtype, the largest with only its identical-input pair; without an arena, one odd decode
or prefill size.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cacheon_subnet.errors import UsageError
from cacheon_subnet.slots.profiles import ModelProfile
from cacheon_subnet.slots.retarget import profile_cases
from cacheon_subnet.slots.spec import ShapeCase, SlotSpec, dtype_of


# SGLang 0.5.13's capture list when cuda_graph_bs is unset: [1, 2, 4, 8, 12] + range(16, 257, 8)
# (36 sizes), cut at cuda_graph_max_bs.
def sglang_default_graph_bs(max_bs: int) -> tuple[int, ...]:
    return tuple(b for b in [1, 2, 4, 8, 12] + list(range(16, 257, 8)) if b <= max_bs)


# SGLang's default max_prefill_tokens: no prefill forward of the arena holds more tokens.
SGLANG_MAX_PREFILL_TOKENS = 16384
# SGLang 0.5.13.post1's chunked_prefill_size when the arena leaves it unset, on the cards the subnet
# runs (35-160 GB: the H100 and the H200; server_args' memory tiers): a prefill forward holds at
# most this many tokens, so the window's prefill call is this size. The H100 profile of the MoE
# arena read 493 µs a fused_experts call where bench timed 1,026 µs at 16384 tokens: 2.08x, the
# per-token time alike (docs/benchmarks.md session 21).
SGLANG_DEFAULT_CHUNKED_PREFILL = 8192
FUSED_AR_NORM_MAX_TOKENS = 2048  # collective.ar_residual_rmsnorm: SGLang fuses only up to this
# Without an arena: the odd sizes drawn on each tier (decode, prefill) ranges.
CPU_ODD_MAX = 511
CPU_SAMPLE_MAX = 1024  # CPU tier: the random arena size is drawn among those up to this many tokens
# CPU tier: the largest arena size that moves at most this much (inputs + outputs): rmsnorm at
# 16384 x 1024 bf16 fits (~60 s a call in the interpreter); heavier slots get their largest size
# that fits, and the GPU tier runs every size.
CPU_MAX_CASE_BYTES = 80 << 20
ODD_RANGES = {"cpu": ((3, 63), (35, 127)), "gpu": ((3, 255), (513, 4095))}
# GPU tier: a case whose inputs exceed this costs seconds of host time per call (the host draws
# them on one CPU core and they cross the wire as bytes: the attention K/V pool at the dense
# arena's bs 256 is 1.4 GB, 4-8 s to draw and ~2.4 s to encode on the 2-core CI box). Such a case
# (attention.decode at bs >= 64 of the arena's context and its odd size, moe.fused_experts' expert
# weights) runs in the arena's dtype only, with its identical-input pair and at random one twin,
# and no CUDA-graph trial (verify/runner.trial_plan says why): the arena then runs the kernel at
# exactly those shapes inside its graphs, with the quality gate on every output. H200 2026-12-03: `cacheon verify
# examples/attention.decode-onepass --device cuda --arena configs/arena/dense.toml` ran past its
# 200 s limit before this; scripts/verify_plan_cost.py: 150.9 GB of inputs drawn on the host, 30.7 after.
GPU_HEAVY_CASE_BYTES = 256 << 20
# No planned case may need a frame the worker refuses (verify/wire.py MAX_MESSAGE, 4 GiB): one
# call's inputs stay under 3 GiB, else the size is left to the arena (an arena at bs 256 and an
# 8k context would draw a 10 GB K/V pool; the worker would die on it and an honest kernel FAIL).
GPU_MAX_CASE_INPUT_BYTES = 3 << 30


@dataclass(frozen=True)
class ArenaShapes:
    """Token counts one arena runs through every slot: decode batch sizes (one token each) and
    prefill forward sizes; `profile` picks the slot cases used as templates. `model`: the shapes
    of a real checkpoint (arena `[model] path`): the slot's cases re-targeted to them
    (slots/retarget.py) are the templates, so verify runs the checkpoint's own extents."""

    profile: str
    decode_batches: tuple[int, ...]
    prefill_tokens: tuple[int, ...]
    name: str = ""
    model: ModelProfile | None = None
    # The sizes a timed window spends its time at: decode at the window's batch (padded up to the
    # captured size SGLang replays) and prefill at its largest forward. Empty: not known.
    window: tuple[tuple[str, int], ...] = ()
    # The context a timed decode step attends to, on average (prompt + half the output): what
    # attention.decode reads per request. 0: not known (the slot case's own context is kept).
    decode_context: int = 0
    dtype: str = ""  # the model's activation dtype ("" not known): heavy GPU cases run in it alone

    def __post_init__(self) -> None:
        for field_name in ("decode_batches", "prefill_tokens"):
            values = tuple(getattr(self, field_name))
            if not values or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in values):
                raise UsageError(
                    f"arena shapes {self.name or self.profile}: {field_name} must be positive integers, got {values!r}"
                )
            object.__setattr__(self, field_name, tuple(sorted(set(values))))
        if any(w not in self.sizes() for w in self.window):
            raise UsageError(f"arena shapes {self.name or self.profile}: window sizes {self.window} not among its sizes")
        if not isinstance(self.decode_context, int) or isinstance(self.decode_context, bool) or self.decode_context < 0:
            raise UsageError(
                f"arena shapes {self.name or self.profile}: decode_context must be a non-negative integer, "
                f"got {self.decode_context!r}"
            )

    @property
    def largest(self) -> tuple[str, int]:
        d, p = self.decode_batches[-1], self.prefill_tokens[-1]
        return ("prefill", p) if p >= d else ("decode", d)

    def sizes(self) -> tuple[tuple[str, int], ...]:
        return tuple(("decode", n) for n in self.decode_batches) + tuple(("prefill", n) for n in self.prefill_tokens)


def from_arena_config(cfg: Any) -> ArenaShapes:
    """ArenaShapes from an arena.config.ArenaConfig (duck-typed: this package never imports arena).
    Prefill sizes a kernel must be right at: up to the largest forward SGLang's defaults allow on any
    card (max_prefill_tokens; a larger chunked prefill the config pins), one prompt, 2, 4, 8, ...
    prompts; the odd sizes plan_cases adds cover what lies between. The window's prefill, where
    the arena spends its time, is the chunked prefill size (the config's, else SGLang's default on
    the H100/H200). Why two: a kernel wrong only above 8192 tokens never meets the arena on these
    cards, yet a B200 validator's engine, or a release user's, calls it there (review, session 21)."""
    e, w = cfg.engine, cfg.workload
    decode = tuple(e.cuda_graph_bs) or sglang_default_graph_bs(e.cuda_graph_max_bs)
    if not e.cuda_graph:
        decode = tuple(sorted({1, e.max_running_requests} | set(sglang_default_graph_bs(e.max_running_requests))))
    chunk = getattr(e, "chunked_prefill_size", None) or SGLANG_DEFAULT_CHUNKED_PREFILL
    queued = w.prompts_per_window * w.input_len
    top = min(queued, max(chunk, SGLANG_MAX_PREFILL_TOKENS))  # verified
    forward = min(queued, chunk)  # timed
    # graded outputs come from the timed windows themselves (arena config 2): no other prompt shape
    prefill = {top, forward, min(w.input_len, top)}
    k = 1
    while w.input_len * k <= top:  # whole batches of 1, 2, 4, ... prompts (every size would cost too much)
        prefill.add(w.input_len * k)
        k *= 2
    model = cfg.profile if getattr(cfg.model, "path", None) else None  # a real checkpoint: its own shapes
    running = min(w.prompts_per_window, e.max_running_requests)
    padded = next((b for b in sorted(decode) if b >= running), None) if e.cuda_graph else running
    window = ((("decode", padded),) if padded is not None and padded in decode else ()) + (("prefill", forward),)
    return ArenaShapes(
        profile=model.name if model else cfg.model.profile,
        decode_batches=decode,
        prefill_tokens=tuple(prefill),
        name=getattr(cfg, "name", ""),
        model=model,
        window=window,
        decode_context=w.input_len + w.output_len // 2,
        dtype=str(getattr(cfg.model, "dtype", "") or ""),
    )


def arena_cases(spec: SlotSpec, cases: Sequence[ShapeCase], arena: ArenaShapes) -> list[tuple[ShapeCase, str]]:
    """Every size the arena runs through `spec`, as (case, where): the timed window's own sizes
    first ("window decode" / "window prefill"), then the other captured decode batches and prefill
    forwards, largest first. What `cacheon bench --arena` times, so a miner's bench predicts it."""
    temps = templates(spec, cases, arena.profile, arena.model)
    if not temps:
        return []
    rest = sorted((s for s in arena.sizes() if s not in arena.window), key=lambda s: (s[0] != "decode", -s[1]))
    out, seen = [], set()
    for kind, n in [*arena.window, *rest]:
        c = resize(spec, temps[0], kind, n, arena.decode_context)
        if c is None or c.label in seen:
            continue
        seen.add(c.label)
        out.append((c, f"window {kind}" if (kind, n) in arena.window else f"arena {kind}"))
    return out


# -- re-targeting a slot case -----------------------------------------------------------------
def token_count(spec: SlotSpec, case: ShapeCase) -> int | None:
    if spec.id == "attention.decode":
        return case.dims["B"]
    return case.dims.get("T")


def resize(spec: SlotSpec, case: ShapeCase, kind: str, n: int, context: int = 0) -> ShapeCase | None:
    """`case` at `n` tokens (decode: n requests of one token), or None where the slot never sees
    that size (attention.decode has no prefill; the fused all-reduce norm stops at 2048 tokens).
    context: attention.decode's per-request context (the arena's; 0 keeps the case's own)."""
    if spec.id == "attention.decode":
        if kind != "decode":
            return None
        ctx = context or case.dims["N"] // case.dims["B"]
        tokens = n * ctx  # as attention._cases: kv_indices holds batch x context, the pool a quarter more
        dims = {**case.dims, "B": n, "N": tokens, "S": tokens + tokens // 4 + 1}
        return dataclasses.replace(case, label=f"{case.profile}/decode-bs{n}-ctx{ctx}", dims=dims)
    if "T" not in case.dims:
        return None
    if spec.id == "collective.ar_residual_rmsnorm" and n > FUSED_AR_NORM_MAX_TOKENS:
        return None
    tail = case.label.rsplit("/", 1)[-1]
    tag = "" if tail.startswith(("decode-", "prefill-")) else f"{tail.rstrip('0123456789-')}-"
    name = f"decode-bs{n}" if kind == "decode" else f"prefill-{n}"
    return dataclasses.replace(case, label=f"{case.profile}/{tag}{name}", dims={**case.dims, "T": n})


def templates(
    spec: SlotSpec, cases: Sequence[ShapeCase], profile: str | None, model: ModelProfile | None = None
) -> list[ShapeCase]:
    """Cases of `profile` that resize (all resizable cases when the slot has none of it); with a
    checkpoint's `model`, the resizable cases re-targeted to its shapes (none when the slot does
    not apply to it, e.g. an MoE slot on a dense model)."""
    usable = [c for c in cases if token_count(spec, c) is not None]
    if model is not None:
        return profile_cases(spec, usable, model)
    own = [c for c in usable if c.profile == profile]
    return own or usable


@dataclass(frozen=True)
class PlannedCase:
    case: ShapeCase
    dtypes: tuple[str, ...]
    origin: str  # "tier" | "arena" | "odd" | "largest"
    kind: str = ""  # "decode" | "prefill" for re-targeted cases
    heavy: bool = False  # GPU tier, over GPU_HEAVY_CASE_BYTES: one dtype, its pair and maybe a twin, no graph


def plan_cases(
    spec: SlotSpec,
    base: Sequence[ShapeCase],
    dtypes: Sequence[str],
    rng: random.Random,
    *,
    gpu: bool,
    arena: ArenaShapes | None,
    eligible: Any = None,
    pool: Sequence[ShapeCase] = (),
    cpu_max_bytes: int = CPU_MAX_CASE_BYTES,
) -> list[PlannedCase]:
    """Tier cases in every dtype, then the arena / odd sizes (see module doc). `pool`: the cases
    templates are drawn from (default `base`); `eligible(dims)`: the op's constraints."""
    out = [PlannedCase(c, tuple(dtypes), "tier") for c in base]
    temps = templates(spec, list(pool) or list(base), arena.profile if arena else None, arena.model if arena else None)
    if not temps:
        return out
    seen = {(c.label, tuple(sorted(c.dims.items()))) for c in base}
    named = {token_count(spec, c) for c in list(pool) + list(base)} | {n for _, n in (arena.sizes() if arena else ())}
    odd = _odd_sizes(rng, gpu, arena, named)
    if gpu:
        wanted = [(k, n, "arena") for k, n in (arena.sizes() if arena else ())] + [(k, n, "odd") for k, n in odd]
    else:
        wanted = [(k, n, "largest") for k, n in sorted(arena.sizes(), key=lambda x: -x[1])] if arena else []
        small = [x for x in (arena.sizes() if arena else ()) if x[1] <= CPU_SAMPLE_MAX]
        wanted += [(*rng.choice(small), "arena")] if small else []
        wanted += [(k, n, "odd") for k, n in odd]
    has_largest = False
    for kind, n, origin in wanted:
        if origin == "largest" and has_largest:
            continue
        ctx = arena.decode_context if arena is not None and origin != "odd" else 0  # odd: the case's own
        c = resize(spec, rng.choice(temps), kind, n, ctx)
        if c is None or (eligible is not None and not eligible(c.dims)):
            continue
        fits = (
            [d for d in dtypes if spec.default_bytes(c, dtype_of(d)) <= cpu_max_bytes]
            if not gpu
            else [d for d in dtypes if input_bytes(spec, c, dtype_of(d)) <= GPU_MAX_CASE_INPUT_BYTES]
        )
        if not fits:
            continue  # the interpreter would take minutes per call: the GPU tier covers this size
        dts = tuple(dtypes) if gpu else (rng.choice(fits),)
        has_largest = has_largest or origin == "largest"
        key = (c.label, tuple(sorted(c.dims.items())))
        if key in seen:
            continue
        seen.add(key)
        out.append(PlannedCase(c, dts, origin, kind))
    return [_weigh(spec, p, arena) for p in out] if gpu else out


def input_bytes(spec: SlotSpec, case: ShapeCase, act: Any) -> int:
    """Bytes the host draws for one call of `case` (its in/inout arguments, allocated extents)."""
    return sum(
        math.prod(a.concrete_shape(case.dims)) * a.torch_dtype(act).itemsize for a in spec.args if a.role in ("in", "inout")
    )


def _weigh(spec: SlotSpec, p: PlannedCase, arena: ArenaShapes | None) -> PlannedCase:
    """Mark a GPU-tier case heavy (see GPU_HEAVY_CASE_BYTES) and narrow it to one dtype: the
    arena's when the op declares it, else the op's first."""
    if input_bytes(spec, p.case, dtype_of(p.dtypes[0])) <= GPU_HEAVY_CASE_BYTES:
        return p
    one = arena.dtype if arena and arena.dtype in p.dtypes else p.dtypes[0]
    return dataclasses.replace(p, dtypes=(one,), heavy=True)


def _odd_sizes(rng: random.Random, gpu: bool, arena: ArenaShapes | None, named: set) -> list[tuple[str, int]]:
    """One odd decode and one odd prefill size no list names: a kernel tuned to the listed sizes
    alone meets a size it did not expect. On CPU, one of the two (cost)."""
    if arena is not None:
        d_hi, p_hi = max(3, arena.decode_batches[-1]), max(3, arena.prefill_tokens[-1])
        if not gpu:  # the interpreter's cost is linear in rows: the largest size is the one big case
            d_hi, p_hi = min(d_hi, CPU_ODD_MAX), min(p_hi, CPU_ODD_MAX)
        ranges = ((3, d_hi), (3, p_hi))
    else:
        ranges = ODD_RANGES["gpu" if gpu else "cpu"]
    picks = [("decode", _odd(rng, *ranges[0], named)), ("prefill", _odd(rng, *ranges[1], named))]
    return picks if gpu else [rng.choice(picks)]


def _odd(rng: random.Random, lo: int, hi: int, named: set) -> int:
    """An odd size in [lo, hi] that no tier case or arena list names (when one exists)."""
    lo |= 1
    if hi < lo:
        return lo
    n = lo
    for _ in range(64):
        n = rng.randrange(lo, hi + 1, 2)
        if n not in named:
            break
    return n
