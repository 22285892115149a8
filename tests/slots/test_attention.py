"""Slot attention.decode@2: shapes, paged layout, reference, and the example bundle under verify."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.slots import get_slot
from cacheon_subnet.slots.compare import compare
from cacheon_subnet.slots.defs.attention import backend_split_hint
from cacheon_subnet.slots.gen import seed_generator
from cacheon_subnet.slots.spec import TIERS, dtype_of
from cacheon_subnet.verify import VerifyOptions, verify_bundle

SPEC = get_slot("attention.decode")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "attention.decode"
ONEPASS = EXAMPLE.with_name("attention.decode-onepass")  # the second champion: no split, no merge kernel
ALL_CASES = [(tier, c) for tier in TIERS for c in SPEC.cases(tier)]


def _full_args(case, act: torch.dtype, seed: int) -> dict[str, torch.Tensor]:
    inputs = SPEC.make_inputs(case, act, seed_generator(seed))
    return {**inputs, **SPEC.allocate("out", case.dims, act, "cpu"), **SPEC.allocate("scratch", case.dims, act, "cpu")}


def _check_layout(t: dict[str, torch.Tensor], dims: dict[str, int], ctx: int) -> None:
    ptr, idx, splits = t["kv_indptr"].to(torch.int64), t["kv_indices"], t["num_kv_splits"]
    lens = ptr[1:] - ptr[:-1]
    assert int(ptr[0]) == 0 and bool((lens >= 1).all()) and int(lens.max()) <= ctx
    assert int(ptr[-1]) <= dims["N"], "live tokens must fit the kv_indices buffer"
    assert bool((idx >= 0).all()) and bool((idx < dims["S"]).all()), "every entry (live or stale) in the pool"
    live = idx[: int(ptr[-1])]
    assert live.unique().numel() == live.numel(), "slots are drawn without replacement"
    assert not bool((live[1:] >= live[:-1]).all()), "slots are not sorted"
    assert bool((splits >= 1).all()) and bool((splits <= dims["MAXS"]).all())
    if dims["B"] >= 2:
        assert int(lens.min()) == 1 and int(lens.max()) == ctx, "a new request and a full-context one"
    if ctx > 256:  # realistic tiers: exactly the backend's split policy (stable timings)
        want = backend_split_hint(lens, dims["HQ"], dims["HK"], dims["MAXS"])
        assert torch.equal(splits, want)


@pytest.mark.slow
@pytest.mark.parametrize("tier,case", ALL_CASES, ids=[f"{t}-{c.label}" for t, c in ALL_CASES])
def test_inputs_fit_the_abi_and_are_a_valid_paged_layout(tier: str, case) -> None:
    # Big bench pools are built once (bf16); small tiers in both dtypes.
    dtypes = SPEC.dtypes if tier != "bench" else SPEC.dtypes[:1]
    for name in dtypes:
        act = dtype_of(name)
        t = _full_args(case, act, seed=11)
        assert SPEC.check_tensors(t, act) == dict(case.dims)
        _check_layout(t, dict(case.dims), case.dims["N"] // case.dims["B"])
        for k in ("q", "k_buffer", "v_buffer"):
            x = t[k].reshape(-1)[:: max(1, t[k].numel() // 1_000_000)]  # a sample: bench pools are GBs
            assert bool(torch.isfinite(x).all()) and int((x == 0).sum()) < x.numel() // 100
        d = case.dims  # q as the engine hands it over: a view into the packed qkv projection (version 2)
        assert t["q"].stride()[1:] == (d["D"], 1)
        assert d["B"] == 1 or t["q"].stride(0) == (d["HQ"] + 2 * d["HK"]) * d["D"]
        assert set(SPEC.graph_dynamic) == {"q", "k_buffer", "v_buffer", "kv_indptr", "kv_indices", "num_kv_splits"}
    assert SPEC.default_bytes(case, torch.bfloat16) > 0 and SPEC.flops(case) > 0


def _sdpa_f64(t: dict[str, torch.Tensor], scale: float) -> torch.Tensor:
    """Independent float64 reference: SDPA per request with KV heads repeated to HQ."""
    q, kb, vb = t["q"].double(), t["k_buffer"], t["v_buffer"]
    B, HQ, D = q.shape
    rep = HQ // kb.shape[1]
    ptr = t["kv_indptr"].tolist()
    out = torch.empty(B, HQ, D, dtype=torch.float64)
    for b in range(B):
        idx = t["kv_indices"][ptr[b] : ptr[b + 1]]
        k = kb[idx].double().repeat_interleave(rep, dim=1).transpose(0, 1)  # [HQ, L, D]
        v = vb[idx].double().repeat_interleave(rep, dim=1).transpose(0, 1)
        out[b] = F.scaled_dot_product_attention(q[b][:, None, :], k, v, scale=scale)[:, 0, :]
    return out


@pytest.mark.parametrize("tier,act", [("verify", "bfloat16"), ("verify", "float16"), ("gpu", "bfloat16")])
def test_reference_matches_float64_sdpa(tier: str, act: str) -> None:
    for case in SPEC.cases(tier)[:6]:  # gpu: B=1 and B=8 at every GQA ratio (keeps CPU time down)
        t = SPEC.make_inputs(case, dtype_of(act), seed_generator(5))
        got = SPEC.reference(t, case.params)["o"]
        want = _sdpa_f64(t, float(case.params["sm_scale"]))
        assert got.dtype == torch.float32
        assert float((got.double() - want).norm() / want.norm()) < 1e-5, case.label


def test_softmax_is_neither_uniform_nor_one_hot() -> None:
    case = SPEC.cases("gpu")[0]  # one long request
    t = SPEC.make_inputs(case, torch.bfloat16, seed_generator(3))
    ptr = t["kv_indptr"].tolist()
    k = t["k_buffer"][t["kv_indices"][: ptr[1]]].float()  # [L, HK, D]
    q = t["q"][0].float().view(k.shape[1], -1, k.shape[2])
    p = torch.softmax(torch.einsum("kgd,lkd->kgl", q, k) * case.params["sm_scale"], -1)
    top = p.max(-1).values.mean()
    assert 5.0 / ptr[1] < top < 0.5


def _verify(path: Path, max_cases: int):
    return verify_bundle(load_bundle(path), VerifyOptions(device="cpu", max_cases=max_cases, seed=1234))


@pytest.mark.slow
@pytest.mark.parametrize("example", [EXAMPLE, ONEPASS], ids=lambda p: p.name)
def test_example_bundle_passes_verify(example: Path) -> None:
    report = _verify(example, max_cases=4)  # every GQA ratio at B=1, then a batch with a length-1 request
    assert report.status == "PASS", report.render()


def _example_module(monkeypatch: pytest.MonkeyPatch, path: Path = EXAMPLE) -> Any:
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # read when @triton.jit decorates
    spec = importlib.util.spec_from_file_location(f"cacheon_test_attn_{abs(hash(path))}", path / "decode.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_at_the_arenas_batch(module: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The launch config the arena's window gets (batch x kv heads >= 512: BLOCK_N 64, 1 split,
    the hint unread), on a small head dim and context so the CPU interpreter stays quick."""
    from cacheon_subnet.slots.spec import case

    B, HQ, HK, D, ctx = 64, 16, 8, 16, 20
    c = case(
        "t/decode-bs64",
        "qwen3-0.6b",
        {"B": B, "HQ": HQ, "HK": HK, "D": D, "S": B * ctx + 64, "N": B * ctx, "MAXS": 8},
        sm_scale=D**-0.5,
    )
    t = SPEC.make_inputs(c, torch.bfloat16, seed_generator(5))
    assert t["q"].stride(0) == (HQ + 2 * HK) * D  # the engine's strided q
    o = torch.zeros(B, HQ, D, dtype=torch.bfloat16)
    module.decode_attention(
        t["q"],
        t["k_buffer"],
        t["v_buffer"],
        o,
        t["kv_indptr"],
        t["kv_indices"],
        t["num_kv_splits"],
        torch.zeros(B, HQ, 8, D),
        torch.zeros(B, HQ, 8),
        D**-0.5,
    )
    return o, _sdpa_f64(t, D**-0.5)


@pytest.mark.slow
def test_example_at_the_arenas_batch_size_matches_the_reference(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The config the H200 crowned (C/B 1.29) is taken only at batch x kv heads >= 512, which the
    verify tiers on CPU never reach; a broken copy at the same shape is the control."""
    module = _example_module(monkeypatch)
    assert module._launch_config(64, 8) == (64, 2, 3, 1) and module._launch_config(4, 8)[3] == 0
    tol = SPEC.tolerance("o", "bfloat16")
    o, ref = _run_at_the_arenas_batch(module)
    assert compare(o, ref.float(), tol).ok, compare(o, ref.float(), tol).detail
    broken = _example_module(monkeypatch, _broken(tmp_path, BROKEN["drops_last_token"]))
    bad, ref = _run_at_the_arenas_batch(broken)
    assert not compare(bad, ref.float(), tol).ok


@pytest.mark.slow
def test_onepass_example_at_the_arenas_batch_size_matches_the_reference(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The one-pass kernel at the arena's window config (strided q, one program per request and
    kv head); a copy that skips the newest token is the control."""
    tol = SPEC.tolerance("o", "bfloat16")
    o, ref = _run_at_the_arenas_batch(_example_module(monkeypatch, ONEPASS))
    assert compare(o, ref.float(), tol).ok, compare(o, ref.float(), tol).detail
    edit = [("seq_len = tl.load(indptr_ptr + b + 1) - kv_start\n", "seq_len = tl.load(indptr_ptr + b + 1) - kv_start - 1\n")]
    bad, ref = _run_at_the_arenas_batch(_example_module(monkeypatch, _broken(tmp_path, edit, ONEPASS)))
    assert not compare(bad, ref.float(), tol).ok


@pytest.mark.slow
@pytest.mark.parametrize("bug", ["drops_last_token", "unnormalised"])
def test_onepass_broken_variants_fail_with_mismatch(tmp_path: Path, bug: str) -> None:
    edits = {
        "drops_last_token": BROKEN["drops_last_token"],
        "unnormalised": [("out = acc / l_i[:, None]", "out = acc")],
    }  # the softmax's sum left out
    report = _verify(_broken(tmp_path, edits[bug], ONEPASS), max_cases=4)
    assert report.status == "FAIL"
    (op,) = report.ops  # a length-1 request left with no token divides by zero: NaN
    assert op.failure is not None and op.failure.reason in {"mismatch", "nan_inf"}, report.render()


def _broken(tmp_path: Path, edits: list[tuple[str, str]], example: Path = EXAMPLE) -> Path:
    dst = tmp_path / "bundle"
    shutil.copytree(example, dst, ignore=shutil.ignore_patterns("__pycache__"))
    src = (dst / "decode.py").read_text()
    for old, new in edits:
        assert old in src, old
        src = src.replace(old, new)
    (dst / "decode.py").write_text(src)
    return dst


BROKEN = {
    # query head h reads kv head h % HK instead of h // (HQ/HK)
    "gqa_mapping": [
        ("heads = kvh * GROUP + offs_g  # the query heads", "heads = offs_g * (tl.num_programs(1) // HEAD_BLOCKS) + kvh  #"),
        ("    heads = kvh * GROUP + offs_g\n", "    heads = offs_g * tl.num_programs(1) + kvh\n"),
    ],
    # the newest token of every request (the one just written) is left out
    "drops_last_token": [
        ("seq_len = tl.load(indptr_ptr + b + 1) - kv_start\n", "seq_len = tl.load(indptr_ptr + b + 1) - kv_start - 1\n"),
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("bug", sorted(BROKEN))
def test_broken_variants_fail_with_mismatch(tmp_path: Path, bug: str) -> None:
    report = _verify(_broken(tmp_path, BROKEN[bug]), max_cases=6)
    assert report.status == "FAIL"
    (op,) = report.ops
    assert op.failure is not None and op.failure.reason == "mismatch", report.render()
