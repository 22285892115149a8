"""The trial schedule and the shape plan (verify/trials.py, verify/shapes.py): no worker needed."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from cacheon_subnet.errors import UsageError
from cacheon_subnet.slots import all_slots, get_slot
from cacheon_subnet.slots.gen import seed_generator
from cacheon_subnet.verify import shapes
from cacheon_subnet.verify.runner import trial_plan
from cacheon_subnet.verify.shapes import ArenaShapes, plan_cases, resize, token_count
from cacheon_subnet.verify.trials import (
    CPU_CALLS,
    CPU_SOAK,
    CUDA_CALLS,
    CUDA_SOAK,
    Budget,
    schedule,
    twin,
)

REPO = Path(__file__).resolve().parents[2]
CASES = [(0, ("bfloat16", "float16")), (1, ("bfloat16", "float16")), (2, ("bfloat16",))]


def _plan(seed: int, device: str = "cpu", **kw):
    return schedule(CASES, random.Random(seed), Budget.for_device(device), compile_check=True, **kw)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_calls_per_case_are_random_within_the_budget_with_one_soak(device):
    calls, soak = (CPU_CALLS, CPU_SOAK) if device == "cpu" else (CUDA_CALLS, CUDA_SOAK)
    seen = set()
    for seed in range(40):
        counts = Counter((t.case, t.dtype) for t in _plan(seed, device) if t.kind in ("pair", "fresh", "twin"))
        long = [n for n in counts.values() if n > calls[1]]
        assert len(long) <= 1 and all(soak[0] <= n <= soak[1] for n in long)
        assert all(calls[0] <= n <= soak[1] for n in counts.values())
        seen |= set(counts.values())
    assert set(range(calls[0], calls[1] + 1)) <= seen  # the whole range is used


def test_pair_twin_compile_per_case_and_dtype():
    plan = _plan(3)
    for i, dts in CASES:
        for d in dts:
            mine = [t for t in plan if (t.case, t.dtype) == (i, d)]
            assert sorted(t.poison for t in mine if t.kind == "pair") == [0, 1]
            assert any(t.kind == "twin" for t in mine)
    assert Counter(t.dtype for t in plan if t.kind == "compile") == {"bfloat16": 1, "float16": 1}


def test_schedule_is_seeded_and_interleaved():
    assert _plan(5) == _plan(5)
    assert _plan(5) != _plan(6)
    order = [t.case for t in _plan(5)]
    changes = sum(a != b for a, b in itertools.pairwise(order))
    assert changes > len(set(order))  # cases revisited, not run one after another


def test_largest_gets_only_its_pair_and_graph_cases_are_planned():
    plan = _plan(1, "cuda", pair_only=(2,), graph_cases=(0,))
    assert Counter(t.kind for t in plan if t.case == 2 and t.kind != "compile") == Counter(pair=2)
    assert Counter(t.dtype for t in plan if t.kind == "graph") == {"bfloat16": 1, "float16": 1}


def _inputs(slot: str, label_part: str, seed: int):
    spec = get_slot(slot)
    case = next(c for c in spec.cases("verify") if label_part in c.label)
    inputs = spec.make_inputs(case, torch.bfloat16, seed_generator(seed))
    return spec, {k: v for k, v in inputs.items() if spec.arg(k).role in ("in", "inout")}


@pytest.mark.parametrize("mode", ["prefix", "suffix"])
def test_twin_shares_a_block_of_rows_and_differs_elsewhere(mode):
    _, src = _inputs("norm.rmsnorm", "qwen3-0.6b/decode-bs7", 1)
    _, fresh = _inputs("norm.rmsnorm", "qwen3-0.6b/decode-bs7", 2)
    t = twin(src, fresh, random.Random(0), mode)
    same = (t["x"] == src["x"]).all(dim=1)
    k = int(same.sum())
    assert 1 <= k <= 6
    assert bool(same[:k].all()) if mode == "prefix" else bool(same[-k:].all())
    assert not torch.equal(t["x"], src["x"])


def test_twin_single_row_keeps_x_changes_weight_and_gives_up_when_it_cannot():
    _, src = _inputs("norm.rmsnorm", "qwen3-0.6b/decode-bs1", 1)
    _, fresh = _inputs("norm.rmsnorm", "qwen3-0.6b/decode-bs1", 2)
    t = twin(src, fresh, random.Random(0))
    assert torch.equal(t["x"], src["x"]) and not torch.equal(t["weight"], src["weight"])
    _, g1 = _inputs("moe.topk_softmax", "decode-bs1", 1)
    _, g2 = _inputs("moe.topk_softmax", "decode-bs1", 2)
    assert twin(g1, g2, random.Random(0)) is None  # one single-row tensor: no valid mixture


def test_twin_keeps_index_tensors_whole():
    _, src = _inputs("rope.neox", "qwen3-0.6b/decode-bs7", 1)
    _, fresh = _inputs("rope.neox", "qwen3-0.6b/decode-bs7", 2)
    t = twin(src, fresh, random.Random(0))
    for name, v in src.items():
        if not v.is_floating_point():
            assert torch.equal(t[name], v)


@pytest.mark.parametrize("tier", ["verify", "gpu", "bench"])
def test_resize_reproduces_every_slot_case_at_its_own_size(tier):
    """Drift guard: re-targeting a case to its own token count gives back its own dims."""
    for spec in all_slots():
        for c in spec.cases(tier):
            n = token_count(spec, c)
            if n is None:
                continue
            kind = "decode" if "decode" in c.label else "prefill"
            r = resize(spec, c, kind, n)
            assert r is not None and dict(r.dims) == dict(c.dims), (spec.id, c.label)


def _dense() -> ArenaShapes:
    from arena.config import load_config

    return shapes.from_arena_config(load_config(REPO / "configs/arena/dense.toml"))


def test_dense_arena_shapes():
    a = _dense()
    assert a.profile == "qwen3-0.6b"
    assert a.decode_batches == (1, 2, 4, 8, 16, 32, 64, 128, 192, 256)
    # graded windows are timed windows: one prompt shape. Verified up to SGLang's max_prefill_tokens
    # (a B200's chunked prefill, a release user's engine) though the window forward is 8192 here
    assert a.prefill_tokens == (1024, 2048, 4096, 8192, 16384) and a.window[1] == ("prefill", 8192)


def test_dense_arena_window_is_its_padded_batch_and_largest_forward():
    """256 prompts a window, 256 running at most, graphs captured up to 256: decode replays the
    bs-256 graph; 256 x 1024 prompt tokens prefill in forwards of SGLang's chunked prefill size at
    most (unset: 8192 on the H100 and H200, where the MoE profile read 2.08x less a call than a
    16384-token forward), or of the size the config sets."""
    a = _dense()
    assert a.window == (("decode", 256), ("prefill", 8192))
    from dataclasses import replace

    from arena.config import load_config
    from arena.jobs import engine_kwargs

    cfg = load_config(REPO / "configs/arena/dense.toml")
    fewer = replace(cfg, workload=replace(cfg.workload, prompts_per_window=100))
    assert shapes.from_arena_config(fewer).window[0] == ("decode", 128)  # padded up to the next captured size
    assert "chunked_prefill_size" not in engine_kwargs(cfg) and "chunked_prefill_size" not in cfg.identity()["engine"]
    pinned = replace(cfg, engine=replace(cfg.engine, chunked_prefill_size=4096))
    assert shapes.from_arena_config(pinned).window[1] == ("prefill", 4096)
    assert engine_kwargs(pinned)["chunked_prefill_size"] == 4096 and pinned.arena_id != cfg.arena_id


def test_bench_arena_cases_put_the_window_first_then_every_other_size():
    a = _dense()
    spec = get_slot("norm.rmsnorm")
    placed = shapes.arena_cases(spec, spec.cases("bench"), a)
    assert [w for _, w in placed[:2]] == ["window decode", "window prefill"]
    assert placed[0][0].dims["T"] == 256 and placed[1][0].dims["T"] == 8192
    assert {c.dims["T"] for c, _ in placed} == set(a.decode_batches) | set(a.prefill_tokens)
    assert all(c.profile == "qwen3-0.6b" for c, _ in placed)
    attn = shapes.arena_cases(get_slot("attention.decode"), get_slot("attention.decode").cases("bench"), a)
    assert attn and all(w.endswith("decode") for _, w in attn)  # attention.decode has no prefill


def test_bench_and_verify_run_attention_at_the_arenas_context():
    """The dense arena decodes 1024-token prompts for 128 tokens: attention.decode reads ~1088
    tokens of KV per request there (H200 2026-12-02: 87 % of its decode step), not the bench
    template's 4096/8192, which made a 1.38x microbench gain a 0.9995 arena ratio."""
    a = _dense()
    assert a.decode_context == 1024 + 128 // 2
    att = get_slot("attention.decode")
    placed = shapes.arena_cases(att, att.cases("bench"), a)
    assert placed[0][1] == "window decode" and placed[0][0].dims["B"] == 256
    for c, _ in placed:
        assert c.dims["N"] == c.dims["B"] * a.decode_context and c.dims["S"] > c.dims["N"], c.label
        assert c.label.endswith(f"-ctx{a.decode_context}")
    planned = plan_cases(att, att.cases("gpu"), att.dtypes, random.Random(0), gpu=True, arena=a)
    at_arena = [p for p in planned if p.origin == "arena"]
    assert at_arena and all(p.case.dims["N"] == p.case.dims["B"] * a.decode_context for p in at_arena)
    unknown = replace(a, decode_context=0)  # no arena context: the case keeps its own
    c0 = shapes.arena_cases(att, att.cases("bench"), unknown)[0][0]
    assert c0.dims["N"] // c0.dims["B"] != a.decode_context
    with pytest.raises(UsageError, match="decode_context"):
        replace(a, decode_context=-1)


def test_gpu_tier_runs_every_arena_size_in_every_dtype():
    a = _dense()
    spec = get_slot("norm.rmsnorm")
    base = spec.cases("gpu")
    planned = plan_cases(spec, base, spec.dtypes, random.Random(0), gpu=True, arena=a)
    arena = [p for p in planned if p.origin == "arena"]
    mine = [p for p in planned if p.case.profile == "qwen3-0.6b"]  # tier cases already at a size are kept once
    assert {p.case.dims["T"] for p in mine} >= set(a.decode_batches) | set(a.prefill_tokens)
    assert all(p.dtypes == spec.dtypes for p in mine)
    assert all(p.case.profile == "qwen3-0.6b" for p in arena)
    odd = [p.case.dims["T"] for p in planned if p.origin == "odd"]
    assert len(odd) == 2 and all(n % 2 for n in odd)


def test_gpu_tier_attention_and_fused_norm_sizes():
    a = _dense()
    att = get_slot("attention.decode")
    planned = plan_cases(att, att.cases("gpu"), att.dtypes, random.Random(0), gpu=True, arena=a)
    assert {p.case.dims["B"] for p in planned} >= set(a.decode_batches)
    assert all(p.kind == "decode" for p in planned if p.origin != "tier")
    fused = get_slot("collective.ar_residual_rmsnorm")
    planned = plan_cases(fused, fused.cases("gpu"), fused.dtypes, random.Random(0), gpu=True, arena=a)
    assert max(p.case.dims["T"] for p in planned) <= shapes.FUSED_AR_NORM_MAX_TOKENS


def test_heavy_gpu_cases_run_in_the_arenas_dtype_with_their_pair_alone():
    """The attention K/V pool at the dense arena's large batches is 0.3-1.4 GB a draw: those cases
    run once (the arena's dtype), as their identical-input pair and at random one twin, with no
    graph trial (H200 2026-12-03: the full plan ran past 200 s)."""
    a = _dense()
    att = get_slot("attention.decode")
    planned = plan_cases(att, att.cases("gpu"), att.dtypes, random.Random(0), gpu=True, arena=a)
    heavy = [p for p in planned if p.heavy]
    assert {p.case.dims["B"] for p in heavy} >= {128, 192, 256}
    assert all(p.dtypes == ("bfloat16",) for p in heavy)
    assert all(p.dtypes == att.dtypes for p in planned if not p.heavy) and len(heavy) < len(planned) // 2
    thirds = 0
    for seed in range(4):
        plan = trial_plan(planned, random.Random(seed), Budget.for_device("cuda"), graphs=True, compile_check=True)
        for i, p in enumerate(planned):
            kinds = Counter(t.kind for t in plan if t.case == i and t.kind != "compile")
            if p.heavy:  # the pair, at random one twin, no graph trial (its frame would pass the wire's limit)
                assert kinds["pair"] == 2 and kinds["twin"] <= 1 and kinds["fresh"] == 0, p.case.label
                assert kinds["graph"] == 0, p.case.label
                thirds += kinds["twin"]
            elif p.kind == "decode":
                assert kinds["graph"] == len(p.dtypes) and kinds["pair"] == 2 * len(p.dtypes)
    # a kernel that turns wrong at a heavy shape after its pair is judged on a third call somewhere
    assert 0 < thirds < 4 * len(heavy)
    fp16 = plan_cases(att, att.cases("gpu"), att.dtypes, random.Random(0), gpu=True, arena=replace(a, dtype="float16"))
    assert {p.dtypes for p in fp16 if p.heavy} == {("float16",)}  # the arena's own dtype
    cpu = plan_cases(att, att.cases("gpu"), att.dtypes, random.Random(0), gpu=False, arena=a)
    assert not any(p.heavy for p in cpu)  # the CPU tier has its own byte cap
    norm = get_slot("norm.rmsnorm")  # 16384 x 1024 bf16 prefill: light, every dtype
    assert not any(p.heavy for p in plan_cases(norm, norm.cases("gpu"), norm.dtypes, random.Random(0), gpu=True, arena=a))


def test_cpu_tier_samples_the_largest_an_odd_size_and_stays_bounded():
    a = _dense()
    spec = get_slot("norm.rmsnorm")
    base = spec.cases("verify")
    for seed in range(10):
        planned = plan_cases(spec, base, spec.dtypes, random.Random(seed), gpu=False, arena=a, pool=base)
        extra = [p for p in planned if p.origin != "tier"]
        assert len(extra) <= 3 and all(len(p.dtypes) == 1 for p in extra)
        largest = [p for p in extra if p.origin == "largest"]
        assert len(largest) == 1 and largest[0].case.dims["T"] == 16384 and largest[0].dtypes != ("float32",)
        odd = [p.case.dims["T"] for p in extra if p.origin == "odd"]
        assert len(odd) == 1 and odd[0] % 2 and odd[0] not in {1, 7, 33}


def test_odd_sizes_avoid_the_named_ones_without_an_arena():
    spec = get_slot("norm.rmsnorm")
    base = spec.cases("verify")
    for seed in range(20):
        planned = plan_cases(spec, base, spec.dtypes, random.Random(seed), gpu=False, arena=None)
        odd = [p.case.dims["T"] for p in planned if p.origin == "odd"]
        assert len(odd) == 1 and odd[0] % 2 and odd[0] not in {1, 7, 33}


def test_arena_shapes_validate():
    with pytest.raises(Exception, match="positive integers"):
        ArenaShapes(profile="x", decode_batches=(0,), prefill_tokens=(4,))


def test_cli_reads_the_arena_config():
    from cacheon_subnet.cli import _arena_shapes, build_parser

    assert _arena_shapes(str(REPO / "configs/arena/dense.toml")) == _dense()
    args = build_parser().parse_args(["verify", "b", "--arena", "configs/arena/dense.toml"])
    assert args.arena == "configs/arena/dense.toml"


def test_validator_screen_uses_the_gpu_arena_shapes():
    from types import SimpleNamespace

    from cacheon_subnet.validator.commands import _screener

    config = SimpleNamespace(screen_device="cpu", verify_max_cases=None)
    assert _screener("cpu", config) is None
    s = _screener(str(REPO / "configs/arena/dense.toml"), config)
    assert s.arena == _dense() and s.device == "cpu"


def test_verify_plan_cost_script_counts_the_heavy_rule():
    """scripts/verify_plan_cost.py (the benchmarks' count): the rule cuts attention.decode's host draws."""
    import sys

    sys.path.insert(0, str(REPO / "scripts"))
    from verify_plan_cost import plan_cost

    off = plan_cost("attention.decode", str(REPO / "configs/arena/dense.toml"), seeds=2, heavy_limit=1 << 62)
    on = plan_cost("attention.decode", str(REPO / "configs/arena/dense.toml"), seeds=2)
    assert on["input_gb"] < off["input_gb"] / 3 and on["calls"] < off["calls"]
    assert shapes.GPU_HEAVY_CASE_BYTES == 256 << 20  # the script restores the module's limit


def test_graph_trial_frames_stay_under_the_wire_limit():
    """The worker dies on a frame over wire.MAX_MESSAGE (4 GiB): the host caps a graph trial's
    replays to what fits, skips one whose capture alone does not fit, and every light decode
    case of the dense arena keeps its full 3-6 replays."""
    from cacheon_subnet.verify.opplan import GRAPH_FRAME_BYTES, replays_that_fit
    from cacheon_subnet.verify.runner import VerifyOptions
    from cacheon_subnet.verify.wire import MAX_MESSAGE

    cap = {"x": torch.zeros(1000, dtype=torch.uint8), "w": torch.zeros(500, dtype=torch.uint8)}
    assert replays_that_fit(cap, {"x"}, budget=4500) == 3  # (4500 - 1500) // 1000
    assert replays_that_fit(cap, {"x"}, budget=1400) == 0  # the capture alone does not fit
    assert replays_that_fit(cap, set(), budget=1500) > 100  # nothing to re-send
    assert GRAPH_FRAME_BYTES * 2 <= MAX_MESSAGE
    a, att = _dense(), get_slot("attention.decode")
    planned = plan_cases(att, att.cases("gpu"), att.dtypes, random.Random(0), gpu=True, arena=a)
    light = max((p for p in planned if p.kind == "decode" and not p.heavy), key=lambda p: p.case.dims["N"])
    inputs = att.make_inputs(light.case, torch.bfloat16, seed_generator(1))
    dynamic = {x.name for x in att.args if x.graph_dynamic or x.role == "inout"}
    assert replays_that_fit(inputs, dynamic) >= 2 * VerifyOptions().graph_replays, light.case.label


def test_graph_trial_sends_only_the_replays_that_fit(monkeypatch):
    """A graph trial's inputs, drawn ahead (verify/draws.py): the frame never holds more replays
    than fit GRAPH_FRAME_BYTES, and a capture that alone passes the budget sends nothing (skipped)."""
    from types import SimpleNamespace

    from cacheon_subnet.verify import op_trials, opplan
    from cacheon_subnet.verify.draws import Draws
    from cacheon_subnet.verify.shapes import PlannedCase
    from cacheon_subnet.verify.trials import Trial

    spec = get_slot("norm.rmsnorm")
    case = spec.cases("verify")[0]
    plan = opplan.OpPlan(
        (PlannedCase(case, ("bfloat16",), "tier"),), (Trial("graph", 0, "bfloat16", watch=False),), {}, {0: 6}, {0: 6}
    )
    draws = Draws(spec, "norm.rmsnorm/default", plan, secret=1, threads=0)
    one = draws.draw(case, "bfloat16", "probe")
    size = sum(v.untyped_storage().nbytes() for v in one.values())
    dyn = sum(v.untyped_storage().nbytes() for k, v in one.items() if k in opplan.dynamic_args(spec))
    monkeypatch.setattr(opplan, "GRAPH_FRAME_BYTES", size + 2 * dyn)  # room for two replays
    g = draws.get(0)
    sent = {v.untyped_storage().data_ptr(): v.untyped_storage().nbytes() for v in g.parcel.frame().values()}
    assert len(g.replays) == 2 == len(g.refs) and sum(sent.values()) <= size + 2 * dyn
    draws.close()
    monkeypatch.setattr(opplan, "GRAPH_FRAME_BYTES", size - 1)  # the capture alone does not fit
    draws = Draws(spec, "norm.rmsnorm/default", plan, secret=1, threads=0)
    g = draws.get(0)
    assert g.replays == [] and g.parcel is None
    requests: list = []
    run = SimpleNamespace(request=lambda *a: requests.append(a), calls=0)
    trials = op_trials.OpTrials(run, SimpleNamespace(key="norm.rmsnorm/default"), spec, plan, draws)
    assert trials._graph(plan.trials[0], case, torch.bfloat16, g) is None and not requests and run.calls == 0
    draws.close()


def test_no_gpu_case_needs_a_frame_the_worker_refuses():
    """An arena at bs 256 and an 8k context would draw a 10 GB K/V pool per call, past the wire's
    4 GiB frame: such sizes are left to the arena, never sent (the worker would die: FAIL crashed)."""
    from cacheon_subnet.slots.spec import dtype_of
    from cacheon_subnet.verify.wire import MAX_MESSAGE

    assert shapes.GPU_MAX_CASE_INPUT_BYTES < MAX_MESSAGE
    att = get_slot("attention.decode")
    long = replace(_dense(), decode_context=8192)
    planned = plan_cases(att, att.cases("gpu"), att.dtypes, random.Random(0), gpu=True, arena=long)
    sizes = {p.case.dims["B"] for p in planned if p.origin == "arena"}
    assert 256 not in sizes and 1 in sizes  # the big ones left out, the small ones kept
    assert all(
        shapes.input_bytes(att, p.case, dtype_of(d)) <= shapes.GPU_MAX_CASE_INPUT_BYTES for p in planned for d in p.dtypes
    )
