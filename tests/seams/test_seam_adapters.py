"""Each adapter on fake SGLang objects: eligible calls reach the candidate (through the global
registry, custom op and guarded body, as in a scheduler rank) and come back in exactly the form
SGLang expects, equal to the slot reference; every stock-only case calls the original unchanged."""

from __future__ import annotations

import dataclasses
import inspect
from collections import namedtuple
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from seam_harness import ALL_SLOTS, check_against_reference, clone_all, reference_kernel, register_candidate, slot_inputs

from cacheon_subnet.slots import get_slot
from seams.activate import adapter_hooks
from seams.adapters import activation, attention, moe, norm, rope
from seams.dispatch import REGISTRY
from seams.receipts import Receipts
from seams.table import SEAM_ADAPTERS

BF16 = torch.bfloat16
SENTINEL = object()
CALLS: list[str] = []
_CANDIDATES: dict[str, Any] = {}
TopKOutput = namedtuple("TopKOutput", ["topk_weights", "topk_ids", "router_logits"])  # StandardTopKOutput


class Original:
    """SGLang's original callable: records how it was called, returns a sentinel."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple, dict]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        return SENTINEL


@pytest.fixture
def live(monkeypatch: pytest.MonkeyPatch) -> Receipts:
    """The process-global registry as activate_scheduler leaves it in a scheduler rank."""
    for slot in ALL_SLOTS:
        if slot not in _CANDIDATES:  # one custom op per slot and process (names must be unique)
            _CANDIDATES[slot] = register_candidate(get_slot(slot), reference_kernel(slot, CALLS), REGISTRY, add=False)
    receipts = Receipts(None, "scheduler", 0)
    monkeypatch.setattr(REGISTRY, "enabled", True)
    monkeypatch.setattr(REGISTRY, "strict", True)
    monkeypatch.setattr(REGISTRY, "receipts", receipts)
    monkeypatch.setattr(REGISTRY, "specs", {s: get_slot(s) for s in ALL_SLOTS})
    monkeypatch.setattr(REGISTRY, "candidates", {s: [_CANDIDATES[s]] for s in ALL_SLOTS})
    CALLS.clear()
    return receipts


def routed(receipts: Receipts, slot: str) -> None:
    assert CALLS == [slot], f"candidate calls {CALLS}"
    c = receipts.counts[slot]
    assert (c["fired"], c["completed"], c["fallback"]) == (1, 1, 0), c


def stayed_stock(receipts: Receipts, orig: Original, result: Any, args: tuple, kwargs: dict) -> None:
    assert result is SENTINEL, "adapter did not return the original's result"
    assert len(orig.calls) == 1, f"original called {len(orig.calls)} times"
    got_args, got_kwargs = orig.calls[0]
    bound = [*got_args, *got_kwargs.values()]
    want = [*args, *kwargs.values()]
    assert len(bound) == len(want) and all(a is b or a == b for a, b in zip(bound, want)), (got_args, got_kwargs)
    assert CALLS == [] and not any(c["fired"] for c in receipts.counts.values())


def test_hooks_match_table_and_bind_sglang_keywords() -> None:
    for a in SEAM_ADAPTERS:
        hooks = adapter_hooks(a)
        assert set(hooks) == set(a.patch_points)
        for fn in hooks.values():  # SGLang calls several chokepoints with keywords only
            sig = inspect.signature(fn)
            sig.bind(object(), **{p: None for p in a.params})


# ---- norm -----------------------------------------------------------------------------------------
def _rmsnorm_layer(weight: torch.Tensor, **kw: Any) -> SimpleNamespace:
    attrs = dict(
        weight=torch.nn.Parameter(weight, requires_grad=False),
        variance_epsilon=1e-6,
        variance_size_override=None,
        cast_x_before_out_mul=False,
    )
    attrs.update(kw)
    return SimpleNamespace(**attrs)


def test_norm_plain(live: Receipts) -> None:
    t, p = slot_inputs("norm.rmsnorm")
    x0 = t["x"].clone()
    orig = Original()
    out = norm._around(orig, _rmsnorm_layer(t["weight"]), t["x"])
    assert orig.calls == [] and isinstance(out, torch.Tensor)
    assert out is not t["x"] and out.shape == t["x"].shape and out.dtype == t["x"].dtype
    assert torch.equal(t["x"], x0)
    assert check_against_reference("norm.rmsnorm", {**t, "x": x0}, p, {"out": out}, BF16) == []
    routed(live, "norm.rmsnorm")


def test_norm_residual_in_place(live: Receipts) -> None:
    t, p = slot_inputs("norm.fused_add_rmsnorm")
    before = clone_all(t)
    orig = Original()
    ret = norm._around(orig, _rmsnorm_layer(t["weight"]), t["x"], t["residual"])
    assert orig.calls == []
    assert isinstance(ret, tuple) and len(ret) == 2 and ret[0] is t["x"] and ret[1] is t["residual"]
    assert check_against_reference("norm.fused_add_rmsnorm", before, p, t, BF16) == []
    routed(live, "norm.fused_add_rmsnorm")


def _norm_case(case: str) -> tuple[SimpleNamespace, tuple]:
    t, _ = slot_inputs("norm.fused_add_rmsnorm")
    x, r, w = t["x"], t["residual"], t["weight"]
    layer = _rmsnorm_layer(w)
    if case == "3-D x":
        return layer, (x.view(1, *x.shape), None, None)
    if case == "3-D x with residual":
        return layer, (x.view(1, *x.shape), r.view(1, *r.shape), None)
    if case == "cast_x_before_out_mul":
        return _rmsnorm_layer(w, cast_x_before_out_mul=True), (x, None, None)
    if case == "cast_x_before_out_mul with residual":
        return _rmsnorm_layer(w, cast_x_before_out_mul=True), (x, r, None)
    if case == "post_residual_addition":
        return layer, (x, r, torch.randn_like(r))
    if case == "variance_size_override":
        return _rmsnorm_layer(w, variance_size_override=32), (x, None, None)
    if case == "empty x":
        return layer, (x[:0], None, None)
    if case == "fp32 residual (fp32_residual=True)":
        return layer, (x, r.float(), None)
    raise AssertionError(case)


@pytest.mark.parametrize(
    "case",
    [
        "3-D x",
        "3-D x with residual",
        "cast_x_before_out_mul",
        "cast_x_before_out_mul with residual",
        "post_residual_addition",
        "variance_size_override",
        "empty x",
        "fp32 residual (fp32_residual=True)",
    ],
)
def test_norm_stock_only(live: Receipts, case: str) -> None:
    layer, args = _norm_case(case)
    orig = Original()
    res = norm._around(orig, layer, *args)
    stayed_stock(live, orig, res, (layer, *args), {})


# ---- activation -----------------------------------------------------------------------------------
@pytest.mark.parametrize("lead", [(6,), (2, 3)])
def test_activation_restores_shape(live: Receipts, lead: tuple[int, ...]) -> None:
    t, p = slot_inputs("activation.silu_and_mul")  # x [6, 64]
    x = t["x"].view(*lead, 64)
    orig = Original()
    out = activation._around(orig, object(), x)
    assert orig.calls == [] and tuple(out.shape) == (*lead, 32) and out.dtype == BF16
    assert check_against_reference("activation.silu_and_mul", t, p, {"out": out.reshape(6, 32)}, BF16) == []
    routed(live, "activation.silu_and_mul")


@pytest.mark.parametrize("case", ["non-contiguous", "non-contiguous 3-D", "odd width", "1-D", "empty"])
def test_activation_stock_only(live: Receipts, case: str) -> None:
    x = {
        "non-contiguous": torch.randn(64, 6).to(BF16).t(),
        "odd width": torch.randn(6, 63).to(BF16),
        "non-contiguous 3-D": torch.randn(3, 2, 64).to(BF16).transpose(0, 1),
        "1-D": torch.randn(64).to(BF16),
        "empty": torch.randn(0, 64).to(BF16),
    }[case]
    orig, layer = Original(), object()
    stayed_stock(live, orig, activation._around(orig, layer, x), (layer, x), {})


# ---- rope -------------------------------------------------------------------------------------------
def _qkv(T: int = 5, HQ: int = 4, HK: int = 2, D: int = 16) -> tuple[torch.Tensor, dict, dict]:
    t, _ = slot_inputs("rope.neox", dims={"T": T, "HQ": HQ, "HK": HK, "D": D})
    qkv = torch.randn(T, (HQ + 2 * HK) * D).to(BF16)
    q = qkv[:, : HQ * D].view(T, HQ, D)  # strided views into one buffer, like qkv.split(...)
    k = qkv[:, HQ * D : (HQ + HK) * D].view(T, HK, D)
    kw = {"positions": t["positions"], "q": q, "k": k, "cos_sin_cache": t["cos_sin_cache"]}
    return qkv, kw, {**t, "q": q.clone(), "k": k.clone()}


@pytest.mark.parametrize("rope_dim", [None, 0, 16])
def test_rope_in_place_on_views(live: Receipts, rope_dim: int | None) -> None:
    qkv, kw, before = _qkv()
    assert not kw["q"].is_contiguous() and kw["q"].data_ptr() == qkv.data_ptr()
    v0 = qkv[:, 6 * 16 :].clone()
    extra = {} if rope_dim is None else {"rope_dim": rope_dim}
    orig = Original()
    assert rope._around(orig, **kw, is_neox=True, fused_args=None, **extra) is None
    assert orig.calls == []
    got = {"q": qkv[:, : 4 * 16].view(5, 4, 16), "k": qkv[:, 4 * 16 : 6 * 16].view(5, 2, 16)}
    assert check_against_reference("rope.neox", before, {}, got, BF16) == []
    assert torch.equal(qkv[:, 6 * 16 :], v0), "v part of the qkv buffer touched"
    routed(live, "rope.neox")


@pytest.mark.parametrize("case", ["is_neox=False", "fused_args", "partial rope_dim", "int32 positions", "2-D q"])
def test_rope_stock_only(live: Receipts, case: str) -> None:
    _, kw, _ = _qkv()
    opts: dict[str, Any] = {"is_neox": True, "rope_dim": 0, "fused_args": None}
    if case == "is_neox=False":
        opts["is_neox"] = False
    elif case == "fused_args":
        opts["fused_args"] = SimpleNamespace(value=None, k_buffer=None, v_buffer=None, cache_loc=None)
    elif case == "partial rope_dim":
        opts["rope_dim"] = 8
    elif case == "int32 positions":
        kw["positions"] = kw["positions"].to(torch.int32)
    elif case == "2-D q":
        kw["q"] = kw["q"].reshape(5, 64)
    orig = Original()
    res = rope._around(orig, **kw, **opts)
    stayed_stock(live, orig, res, (kw["q"], kw["k"], kw["cos_sin_cache"], kw["positions"]), opts)


# ---- attention --------------------------------------------------------------------------------------
def _decode_call(pad: int, maxs: int = 4) -> tuple[dict, dict, list, dict]:
    t, p = slot_inputs("attention.decode")
    B, HQ, D = t["q"].shape
    indptr = torch.cat([t["kv_indptr"], t["kv_indptr"][-1:].repeat(pad)])
    splits = torch.cat([t["num_kv_splits"], torch.ones(pad, dtype=torch.int32)])
    o = torch.zeros_like(t["q"])
    args = [
        t["q"],
        t["k_buffer"],
        t["v_buffer"],
        o,
        indptr,
        t["kv_indices"],
        torch.zeros(B + pad, HQ, maxs, D),
        torch.zeros(B + pad, HQ, maxs),
        splits,
        maxs,
        p["sm_scale"],
        1.0,
        1.0,
    ]
    kw = {"logit_cap": 0.0, "sinks": None, "xai_temperature_len": -1, "has_mla": False, "use_pdl": False}
    return t, p, args, kw


@pytest.mark.parametrize("pad", [0, 5], ids=["eager", "graph-padded"])
def test_attention_slices_padded_metadata(live: Receipts, pad: int) -> None:
    t, p, args, kw = _decode_call(pad)
    orig = Original()
    assert attention._around(orig, *args, **kw) is None
    assert orig.calls == []
    assert check_against_reference("attention.decode", t, p, {"o": args[3]}, BF16) == []
    routed(live, "attention.decode")


def test_attention_takes_the_strided_q_the_engine_hands_over(live: Receipts, monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA SGLang's fused in-place QK-norm leaves q a view into the packed qkv projection. The
    slot (version 2) takes it; its @1 ABI (q contiguous) declined it at every batch size but 1, so
    on the H200 the candidate ran in the bs-1 graph only. The control: the @1 layout declines it."""
    t, p, args, kw = _decode_call(3)
    q = args[0]
    assert q.shape[0] > 1 and not q.is_contiguous() and q.stride(-1) == 1 and q.stride(0) > q.shape[1] * q.shape[2]
    orig = Original()
    assert attention._around(orig, *args, **kw) is None and orig.calls == []
    assert check_against_reference("attention.decode", t, p, {"o": args[3]}, BF16) == []
    routed(live, "attention.decode")
    assert not live.declines.get("attention.decode")

    spec = get_slot("attention.decode")
    v1 = dataclasses.replace(
        spec, args=tuple(dataclasses.replace(a, layout="contiguous") if a.name == "q" else a for a in spec.args)
    )
    monkeypatch.setitem(REGISTRY.specs, "attention.decode", v1)
    CALLS.clear()
    orig = Original()
    assert attention._around(orig, *args, **kw) is SENTINEL and len(orig.calls) == 1 and CALLS == []
    assert list(live.declines["attention.decode"]) == [f"abi: q not contiguous (strides {tuple(q.stride())})"]


@pytest.mark.parametrize(
    "case",
    [
        "logit_cap",
        "sinks",
        "xai_temperature_len",
        "has_mla",
        "k_scale tensor",
        "k_scale 0.5",
        "max_kv_splits != attn_logits splits",
    ],
)
def test_attention_stock_only(live: Receipts, case: str) -> None:
    _, _, args, kw = _decode_call(2)
    if case == "logit_cap":
        kw["logit_cap"] = 30.0
    elif case == "sinks":
        kw["sinks"] = torch.zeros(4)
    elif case == "xai_temperature_len":
        kw["xai_temperature_len"] = 8
    elif case == "has_mla":
        kw["has_mla"] = True
    elif case == "k_scale tensor":
        args[11] = torch.tensor(1.0)
    elif case == "k_scale 0.5":
        args[11] = 0.5
    else:
        args[9] = 8
    orig = Original()
    stayed_stock(live, orig, attention._around(orig, *args, **kw), tuple(args), kw)


# ---- moe --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("K, renormalize", [(2, True), (3, False)])
def test_topk_routes(live: Receipts, K: int, renormalize: bool) -> None:
    t, _ = slot_inputs("moe.topk_softmax", dims={"K": K})
    T = t["gating_output"].shape[0]
    w = torch.empty(T, K, dtype=torch.float32)
    ids = torch.empty(T, K, dtype=torch.int32)
    orig = Original()
    assert moe._topk_around(orig, w, ids, t["gating_output"], renormalize) is None
    assert orig.calls == []
    params = {"renormalize": renormalize, "topk": K}
    assert check_against_reference("moe.topk_softmax", t, params, {"topk_weights": w, "topk_ids": ids}, BF16) == []
    routed(live, "moe.topk_softmax")


@pytest.mark.parametrize("case", ["moe_softcapping", "correction_bias"])
def test_topk_stock_only(live: Receipts, case: str) -> None:
    t, _ = slot_inputs("moe.topk_softmax")
    w, ids = torch.empty(6, 2, dtype=torch.float32), torch.empty(6, 2, dtype=torch.int32)
    cap, bias = (30.0, None) if case == "moe_softcapping" else (0.0, torch.zeros(8))
    args = (w, ids, t["gating_output"], True, cap, bias)
    orig = Original()
    stayed_stock(live, orig, moe._topk_around(orig, *args), args, {})


EXPERT_KW = {
    "b1": None,
    "b2": None,
    "use_fp8_w8a8": False,
    "use_int8_w8a8": False,
    "use_int8_w8a16": False,
    "use_int4_w4a16": False,
    "per_channel_quant": False,
    "w1_scale": None,
    "w2_scale": None,
    "w1_zp": None,
    "w2_zp": None,
    "a1_scale": None,
    "a2_scale": None,
    "block_shape": None,
}


def _runner_config(**kw: Any) -> SimpleNamespace:  # MoeRunnerConfig's fields and defaults
    cfg = dict(
        num_experts=4,
        num_local_experts=4,
        top_k=2,
        activation="silu",
        is_gated=True,
        apply_router_weight_on_input=False,
        inplace=True,
        no_combine=False,
        routed_scaling_factor=None,
        gemm1_alpha=None,
        gemm1_clamp_limit=None,
        swiglu_limit=None,
    )
    cfg.update(kw)
    return SimpleNamespace(**cfg)


def _experts_kw(t: dict, cfg: SimpleNamespace, **extra: Any) -> dict:
    return {
        "hidden_states": t["hidden_states"],
        "w1": t["w13"],
        "w2": t["w2"],
        "topk_output": TopKOutput(t["topk_weights"], t["topk_ids"], None),
        "moe_runner_config": cfg,
        **EXPERT_KW,
        **extra,
    }


@pytest.mark.parametrize("inplace", [True, False])
def test_experts_routes(live: Receipts, inplace: bool) -> None:
    t, p = slot_inputs("moe.fused_experts")
    before = clone_all(t)
    orig = Original()
    ret = moe._experts_around(orig, **_experts_kw(t, _runner_config(inplace=inplace)))  # all keywords, like SGLang
    assert orig.calls == [] and isinstance(ret, torch.Tensor)
    if inplace:
        assert ret is t["hidden_states"]
    else:
        assert ret is not t["hidden_states"] and torch.equal(t["hidden_states"], before["hidden_states"])
    assert ret.shape == before["hidden_states"].shape and ret.dtype == BF16
    assert check_against_reference("moe.fused_experts", before, p, {"out": ret}, BF16) == []
    routed(live, "moe.fused_experts")


EXPERT_STOCK = {
    **{
        flag: ({flag: True}, {})
        for flag in ("use_fp8_w8a8", "use_int8_w8a8", "use_int8_w8a16", "use_int4_w4a16", "per_channel_quant")
    },
    "w1_scale": ({"w1_scale": torch.ones(4)}, {}),
    "b1": ({"b1": torch.zeros(4, 32)}, {}),
    "block_shape": ({"block_shape": [128, 128]}, {}),
    "gelu": ({}, {"activation": "gelu"}),
    "not gated": ({}, {"is_gated": False}),
    "router weight on input": ({}, {"apply_router_weight_on_input": True}),
    "routed_scaling_factor": ({}, {"routed_scaling_factor": 2.5}),
    "gemm1_alpha": ({}, {"gemm1_alpha": 1.702}),
    "swiglu_limit": ({}, {"swiglu_limit": 7.0}),
    "no_combine": ({}, {"no_combine": True, "inplace": False}),
    "expert parallel": ({}, {"num_experts": 8}),
}


@pytest.mark.parametrize("case", list(EXPERT_STOCK))
def test_experts_stock_only(live: Receipts, case: str) -> None:
    t, _ = slot_inputs("moe.fused_experts")
    extra, cfg = EXPERT_STOCK[case]
    kw = _experts_kw(t, _runner_config(**cfg), **extra)
    orig = Original()
    res = moe._experts_around(orig, **kw)
    first = ("hidden_states", "w1", "w2", "topk_output", "moe_runner_config")
    stayed_stock(live, orig, res, tuple(kw[n] for n in first), {k: v for k, v in kw.items() if k not in first})
