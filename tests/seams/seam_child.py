"""One process role of an SGLang engine, run in a fresh interpreter against the stand-in runtime
(seam_harness.write_runtime). Usage: python seam_child.py <scenario>; prints `RESULT <json>`.

Scenarios (the environment carries the gates, tree and receipt dir the host would set):
  off        no gate set: load_plugins + a scheduler rank; nothing may change
  driver     gates set, load_plugins only (the Engine driver never constructs a Scheduler)
  scheduler  run_scheduler_process (positional Scheduler(...) like 0.5.13.post1), then every adapter
  partial    only the norm gate; Scheduler(...) constructed with keywords
  failing    run_scheduler_process with a tree that must not load (strict raises, non-strict serves stock)
"""

from __future__ import annotations

import json
import os
import sys
import traceback

ATTEMPTS: list[str] = []


class _ImportRecorder:
    """Sees every attempt to import contribution code, whether or not it would succeed."""

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001
        if name.split(".")[0].startswith("cacheon_c_"):
            ATTEMPTS.append(name)
        return None


sys.meta_path.insert(0, _ImportRecorder())

import torch  # noqa: E402

from seams.table import SEAM_ADAPTERS  # noqa: E402

torch.manual_seed(0)
BF16 = torch.bfloat16
TP_RANK = int(os.environ.get("CACHEON_TEST_TP_RANK", "0"))
PATCH_POINTS = tuple(p for a in SEAM_ADAPTERS for p in a.patch_points)


def server_args() -> dict:
    from cacheon_subnet.slots.defs.rope import cos_sin_cache

    return {"hidden": 64, "head_size": 16, "cos_sin_cache": cos_sin_cache(64, 16, 1e6), "max_kv_splits": 4}


def run_scheduler(tp_rank: int):
    from sglang.srt.managers.scheduler import run_scheduler_process

    return run_scheduler_process(server_args(), None, 0, tp_rank, 0, 0, 0, 0, None, None)


def hooked(point: str) -> bool:
    import importlib

    mod, _, attr = point.partition(":")
    obj = importlib.import_module(mod)
    for part in attr.split("."):
        obj = getattr(obj, part) if not isinstance(obj, type) or part not in obj.__dict__ else obj.__dict__[part]
    return getattr(obj, "__wrapped__", None) is not None


def state() -> dict:
    from seams import activate
    from seams.dispatch import REGISTRY

    out = {
        "registry_enabled": REGISTRY.enabled,
        "registry_strict": REGISTRY.strict,
        "candidates": sorted(REGISTRY.candidates),
        "candidate_packages": sorted({c.package for cs in REGISTRY.candidates.values() for c in cs}),
        "cacheon_modules": sorted(m for m in sys.modules if m.startswith("cacheon_c_")),
        "import_attempts": sorted(set(ATTEMPTS)),
        "activate_done": bool(activate._state.get("done")),
        "custom_ops": sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith("cacheon_")),
        "receipts_role": getattr(REGISTRY.receipts, "role", None),
        "receipts_rank": getattr(REGISTRY.receipts, "rank", None),
    }
    if "sglang.srt.plugins.hook_registry" in sys.modules:
        from sglang.srt.plugins.hook_registry import HookRegistry

        out["hook_targets"] = sorted(HookRegistry._hooks)
        out["hooked"] = {p: hooked(p) for p in PATCH_POINTS if p.split(":")[0] in sys.modules}
    if "sglang._calls" in sys.modules:
        from sglang._calls import CALLS

        out["stock_calls"] = list(CALLS)
    return out


# ---- exercising the model the Scheduler built, through SGLang's own call paths ---------------
def _check(slot, inputs, params, got, problems_extra=()):
    from seam_harness import check_against_reference

    return list(problems_extra) + check_against_reference(slot, inputs, params, got, BF16)


def ex_norm(model) -> dict:
    from seam_harness import slot_inputs

    w, eps = model.norm.weight.data, model.norm.variance_epsilon
    t, _ = slot_inputs("norm.rmsnorm", seed=1)
    x = t["x"]
    x0 = x.clone()
    out = model.norm(x)
    plain = []
    if not (isinstance(out, torch.Tensor) and out is not x and out.shape == x.shape and out.dtype == x.dtype):
        plain.append(f"plain path returned {type(out).__name__} {getattr(out, 'shape', None)}")
    if not torch.equal(x, x0):
        plain.append("plain path modified its input")
    res = {"rmsnorm": _check("norm.rmsnorm", {"x": x0, "weight": w}, {"eps": eps}, {"out": out}, plain)}
    t, _ = slot_inputs("norm.fused_add_rmsnorm", seed=2)
    x, r = t["x"], t["residual"]
    before = {"x": x.clone(), "residual": r.clone(), "weight": w}
    ret = model.norm(x, r)
    ident = (
        []
        if (isinstance(ret, tuple) and len(ret) == 2 and ret[0] is x and ret[1] is r)
        else [f"residual path returned {type(ret).__name__}, not (x, residual) in place"]
    )
    res["fused_add_rmsnorm"] = _check("norm.fused_add_rmsnorm", before, {"eps": eps}, {"x": x, "residual": r}, ident)
    return res


def ex_activation(model) -> dict:
    from seam_harness import slot_inputs

    t, _ = slot_inputs("activation.silu_and_mul", seed=3)  # [6, 64]
    x2 = t["x"]
    out = model.act(x2.view(2, 3, 64))
    shape = [] if tuple(out.shape) == (2, 3, 32) else [f"3-D input gave shape {tuple(out.shape)}"]
    return {"silu_and_mul": _check("activation.silu_and_mul", {"x": x2.clone()}, {}, {"out": out.reshape(6, 32)}, shape)}


def ex_rope(model) -> dict:
    T, HQ, HK, D = 5, 4, 2, 16
    g = torch.Generator().manual_seed(4)
    qkv = torch.randn(T, (HQ + 2 * HK) * D, generator=g).to(BF16)
    q, k, v = qkv.split([HQ * D, HK * D, HK * D], dim=-1)
    positions = torch.randint(0, 64, (T,), generator=g, dtype=torch.int64)
    inputs = {
        "positions": positions,
        "q": q.reshape(T, HQ, D).clone(),
        "k": k.reshape(T, HK, D).clone(),
        "cos_sin_cache": model.rope.cos_sin_cache,
    }
    v0 = v.clone()
    model.rope(positions, q, k)
    extra = [] if torch.equal(v, v0) else ["rope touched the v part of the qkv buffer"]
    got = {"q": qkv[:, : HQ * D].reshape(T, HQ, D), "k": qkv[:, HQ * D : (HQ + HK) * D].reshape(T, HK, D)}
    return {"rope": _check("rope.neox", inputs, {}, got, extra)}


def ex_attention(model) -> dict:
    from seam_harness import slot_inputs

    t, p = slot_inputs("attention.decode", seed=5)
    B, HQ, D = t["q"].shape
    pad = 3  # graph-padded metadata: buffers sized for a larger captured batch
    indptr = torch.cat([t["kv_indptr"], t["kv_indptr"][-1:].repeat(pad)])
    splits = torch.cat([t["num_kv_splits"], torch.ones(pad, dtype=torch.int32)])
    logits = torch.zeros(B + pad, HQ, 4, D, dtype=torch.float32)
    lse = torch.zeros(B + pad, HQ, 4, dtype=torch.float32)
    o = torch.zeros_like(t["q"])
    model.attn.forward_decode(
        t["q"], t["k_buffer"], t["v_buffer"], o, indptr, t["kv_indices"], logits, lse, splits, p["sm_scale"]
    )
    return {"decode": _check("attention.decode", t, p, {"o": o})}


def ex_moe() -> dict:
    from seam_harness import slot_inputs
    from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig
    from sglang.srt.layers.moe.moe_runner.triton import fused_experts_none_to_triton
    from sglang.srt.layers.moe.topk import fused_topk

    t, p = slot_inputs("moe.topk_softmax", seed=6)
    hidden = torch.randn(t["gating_output"].shape[0], 32).to(BF16)
    w, ids = fused_topk(hidden, t["gating_output"], p["topk"], p["renormalize"])
    res = {"topk": _check("moe.topk_softmax", t, p, {"topk_weights": w, "topk_ids": ids})}
    t, _ = slot_inputs("moe.fused_experts", seed=7)
    hs = t["hidden_states"]
    before = {k: v.clone() for k, v in t.items()}
    cfg = MoeRunnerConfig(num_experts=4, num_local_experts=4, top_k=2, inplace=True)
    ret = fused_experts_none_to_triton(hs, t["w13"], t["w2"], (t["topk_weights"], t["topk_ids"], None), cfg)
    ident = [] if ret is hs else ["inplace fused_experts did not return hidden_states itself"]
    res["experts"] = _check("moe.fused_experts", before, {}, {"out": hs}, ident)
    return res


def exercise_all(model) -> dict:
    return {**ex_norm(model), **ex_activation(model), **ex_rope(model), **ex_attention(model), **ex_moe()}


def receipts_counts() -> dict:
    from seams.dispatch import REGISTRY

    r = REGISTRY.receipts
    if r is None:
        return {}
    r.flush()
    return {k: dict(v) for k, v in r.counts.items()}


# ---- scenarios ----------------------------------------------------------------------------
def scenario(name: str) -> dict:
    result: dict = {}
    if name == "off":
        sched = run_scheduler(TP_RANK)
        result["checks"] = ex_norm(sched.model)
    elif name == "driver":
        from sglang.srt.plugins import load_plugins

        load_plugins()  # Engine.__init__ / _launch_subprocesses
        load_plugins()
        from sglang.srt.layers.layernorm import RMSNorm

        norm = RMSNorm(64)  # stock layers in the driver stay stock
        result["checks"] = ex_norm(type("M", (), {"norm": norm})())
        result["scheduler_init_hooked"] = hooked("sglang.srt.managers.scheduler:Scheduler.__init__")
    elif name == "scheduler":
        sched = run_scheduler(TP_RANK)
        result["checks"] = exercise_all(sched.model)
        result["counts"] = receipts_counts()
    elif name == "partial":
        from sglang.srt.managers.scheduler import Scheduler
        from sglang.srt.plugins import load_plugins

        load_plugins()
        sched = Scheduler(
            server_args=server_args(),
            port_args=None,
            gpu_id=0,
            tp_rank=TP_RANK,
            moe_ep_rank=0,
            pp_rank=0,
            attn_cp_rank=0,
            moe_dp_rank=0,
            dp_rank=None,
        )
        result["checks"] = {**ex_norm(sched.model), **ex_activation(sched.model)}
        result["counts"] = receipts_counts()
    elif name == "failing":
        try:
            sched = run_scheduler(TP_RANK)
        except BaseException as e:  # noqa: BLE001
            result["raised"] = f"{type(e).__name__}: {e}"
        else:
            result["raised"] = None
            result["checks"] = ex_norm(sched.model)
    else:
        raise SystemExit(f"unknown scenario {name}")
    result["state"] = state()
    return result


if __name__ == "__main__":
    try:
        res = scenario(sys.argv[1])
    except BaseException:  # noqa: BLE001
        res = {"error": traceback.format_exc()}
    print("RESULT " + json.dumps(res, default=str), flush=True)
