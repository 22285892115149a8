"""moe.topk_softmax and moe.fused_experts: inputs, references, the Triton example bundles through
`cacheon verify`, broken variants that must fail, and (on a GPU) the stock SGLang bindings."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import torch

from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.slots import get_slot
from cacheon_subnet.slots.compare import compare
from cacheon_subnet.slots.defs import moe
from cacheon_subnet.slots.gen import seed_generator
from cacheon_subnet.slots.spec import TIERS, ShapeCase, Tolerance, dtype_of
from cacheon_subnet.verify import VerifyOptions, verify_bundle

ROOT = Path(__file__).resolve().parents[2]
TOPK = get_slot("moe.topk_softmax")
EXPERTS = get_slot("moe.fused_experts")
CUDA = torch.cuda.is_available()
BIG = "qwen3-30b-a3b"  # ~1.2 GB of expert weights: shapes checked symbolically only


def _reason(report) -> str:
    fails = [op.failure for op in report.ops if op.failure]
    return f"{fails[0].reason}: {fails[0].detail}" if fails else ""


def _check_routing(ids: torch.Tensor, w: torch.Tensor, E: int) -> None:
    assert ids.dtype == torch.int32 and w.dtype == torch.float32
    assert int(ids.min()) >= 0 and int(ids.max()) < E
    assert (ids.sort(dim=1).values.diff(dim=1) != 0).all(), "ids distinct per row"
    assert (w > 0).all() and torch.allclose(w.sum(dim=1), torch.ones(len(w)), atol=1e-5)


# ---- (a) inputs -------------------------------------------------------------------------
@pytest.mark.parametrize("tier", TIERS)
def test_topk_cases_build_abi_conformant_inputs_with_a_gap(tier: str) -> None:
    cases = TOPK.cases(tier)
    assert any(not c.params["renormalize"] for c in cases) and any(c.params["renormalize"] for c in cases)
    for c in cases:
        assert c.params["topk"] == c.dims["K"], "the topk param mirrors K"
        for name in TOPK.dtypes:
            act = dtype_of(name)
            inputs = TOPK.make_inputs(c, act, seed_generator(5))
            args = {**inputs, **TOPK.allocate("out", c.dims, act, "cpu")}
            assert TOPK.check_tensors(args, act) == dict(c.dims)
            v = inputs["gating_output"].to(torch.float32).sort(dim=1, descending=True).values
            K = c.dims["K"]
            assert float((v[:, K - 1] - v[:, K]).min()) >= moe.MIN_GAP / 2, "K-th pick separated after rounding"
            assert float(v.std()) > 0.5 and torch.isfinite(v).all()


@pytest.mark.slow
@pytest.mark.parametrize("tier", TIERS)
def test_expert_cases_build_abi_conformant_inputs(tier: str) -> None:
    cases = EXPERTS.cases(tier)
    if tier == "verify":
        assert {c.profile for c in cases} == {"qwen3-moe-mini"} and max(c.dims["T"] for c in cases) <= 64
    for c in cases:
        T, H, I, E, K = (c.dims[k] for k in ("T", "H", "I", "E", "K"))
        assert EXPERTS.arg("w13").concrete_shape(c.dims) == (E, 2 * I, H)
        assert EXPERTS.arg("w2").concrete_shape(c.dims) == (E, H, I)
        assert EXPERTS.arg("out").concrete_shape(c.dims) == (T, H)
        assert EXPERTS.default_bytes(c, torch.bfloat16) > 3 * I * H * 2 and EXPERTS.flops(c) == 6 * T * K * I * H
        if c.profile == BIG:  # routing alone is cheap: check it without the 1.2 GB of weights
            w, ids = moe.softmax_topk(moe.router_logits(T, E, K, seed_generator(2), cold=E // 8), K, True)
            _check_routing(ids, w, E)
            continue
        for name in EXPERTS.dtypes if tier == "verify" else ("bfloat16",):
            act = dtype_of(name)
            inputs = EXPERTS.make_inputs(c, act, seed_generator(7))
            args = {**inputs, **EXPERTS.allocate("out", c.dims, act, "cpu")}
            assert EXPERTS.check_tensors(args, act) == dict(c.dims)
            _check_routing(inputs["topk_ids"], inputs["topk_weights"], E)
            for k in ("hidden_states", "w13", "w2"):
                assert (inputs[k] != 0).float().mean() > 0.99, f"{k}: realistic, never zeros"
            assert abs(float(inputs["w13"].float().std()) * math.sqrt(H) - 1) < 0.05
            load = torch.bincount(inputs["topk_ids"].flatten().long(), minlength=E)
            assert (load == 0).sum() >= E // 8, "some experts unused"
            if T * K >= 8 * E:
                assert int(load.max()) > 1.5 * T * K / E, "some experts hot"


# ---- (b) references against independent float64 loops ------------------------------------
@pytest.mark.parametrize("renormalize", [True, False])
def test_topk_reference_matches_float64_loop(renormalize: bool) -> None:
    c = next(c for c in TOPK.cases("verify") if c.dims["E"] == 128 and c.dims["T"] > 1)
    params = {**c.params, "renormalize": renormalize}
    inputs = TOPK.make_inputs(c, torch.bfloat16, seed_generator(13))
    ref = moe.sort_by_expert(TOPK.reference(inputs, params))
    K = c.dims["K"]
    for t, row in enumerate(inputs["gating_output"].to(torch.float64)):
        p = torch.exp(row - row.max())
        p = p / p.sum()
        picks = sorted(range(len(p)), key=lambda e: -float(p[e]))[:K]
        w = torch.stack([p[e] for e in picks])
        if renormalize:
            w = w / w.sum()
        order = sorted(range(K), key=lambda j: picks[j])
        assert ref["topk_ids"][t].tolist() == [picks[j] for j in order]
        assert torch.allclose(ref["topk_weights"][t].double(), w[order], rtol=1e-5, atol=1e-7)


def test_topk_canonicalize_accepts_any_pick_order() -> None:
    c = TOPK.cases("verify")[2]
    inputs = TOPK.make_inputs(c, torch.float32, seed_generator(1))
    ref = TOPK.reference(inputs, c.params)
    perm = torch.argsort(torch.rand(ref["topk_ids"].shape, generator=seed_generator(2)), dim=1)
    shuffled = {k: v.gather(1, perm) for k, v in ref.items()}
    a, b = moe.sort_by_expert(shuffled), moe.sort_by_expert(ref)
    assert torch.equal(a["topk_ids"], b["topk_ids"]) and torch.equal(a["topk_weights"], b["topk_weights"])


def test_experts_reference_matches_float64_loop() -> None:
    c = next(c for c in EXPERTS.cases("verify") if c.dims["T"] == 7)
    inputs = EXPERTS.make_inputs(c, torch.bfloat16, seed_generator(17))
    ref = EXPERTS.reference(inputs, c.params)["out"]
    assert ref.dtype == torch.float32
    x, w13, w2 = (inputs[k].to(torch.float64) for k in ("hidden_states", "w13", "w2"))
    I = c.dims["I"]
    expected = torch.zeros_like(x)
    for t in range(c.dims["T"]):
        for k in range(c.dims["K"]):
            e = int(inputs["topk_ids"][t, k])
            h = w13[e] @ x[t]
            a = h[:I] / (1.0 + torch.exp(-h[:I])) * h[I:]
            expected[t] += float(inputs["topk_weights"][t, k]) * (w2[e] @ a)
    cmp = compare(ref, expected, Tolerance(atol=1e-5, rtol=1e-4, max_rel_l2=1e-5))
    assert cmp.ok, cmp.detail


# ---- (c) the example bundles pass verify --------------------------------------------------
@pytest.mark.slow
def test_topk_example_passes_verify() -> None:
    report = verify_bundle(load_bundle(ROOT / "examples" / "moe.topk_softmax"), VerifyOptions(device="cpu", max_cases=2))
    assert report.status == "PASS", report.render()


@pytest.mark.slow
def test_fused_experts_example_passes_verify() -> None:
    opts = VerifyOptions(device="cpu", max_cases=1)  # interpreted Triton: ~45 s a case on the 2-core CI box
    report = verify_bundle(load_bundle(ROOT / "examples" / "moe.fused_experts"), opts)
    assert report.status == "PASS", report.render()


# ---- (d) broken variants fail -------------------------------------------------------------
def _broken(tmp_path: Path, name: str, module: str, old: str, new: str, bf16_only: bool = False) -> Path:
    dst = tmp_path / name
    shutil.copytree(ROOT / "examples" / name, dst)
    src = dst / module
    text = src.read_text()
    assert old in text, f"{old!r} not in {module}"
    src.write_text(text.replace(old, new))
    if bf16_only:
        manifest = dst / "manifest.toml"
        manifest.write_text(manifest.read_text().replace('dtypes = ["bfloat16", "float16"]', 'dtypes = ["bfloat16"]'))
    return dst


@pytest.mark.slow
def test_topk_without_renormalisation_fails(tmp_path: Path) -> None:
    bundle = _broken(tmp_path, "moe.topk_softmax", "topk_softmax.py", "RENORM=bool(renormalize)", "RENORM=False")
    report = verify_bundle(load_bundle(bundle), VerifyOptions(device="cpu", max_cases=1))
    assert report.status == "FAIL" and _reason(report).startswith("mismatch"), report.render()
    assert "topk_weights" in _reason(report)


@pytest.mark.slow
def test_experts_ignoring_router_weights_fail(tmp_path: Path) -> None:
    bundle = _broken(
        tmp_path, "moe.fused_experts", "gemm.py", "acc = acc * w[:, None]", "acc = acc + 0.0 * w[:, None]", bf16_only=True
    )
    report = verify_bundle(load_bundle(bundle), VerifyOptions(device="cpu", max_cases=1))
    assert report.status == "FAIL" and _reason(report).startswith("mismatch"), report.render()


# ---- on a GPU: the gpu tier with graph capture, and the stock bindings ----------------------
@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["moe.topk_softmax", "moe.fused_experts"])
def test_examples_pass_gpu_tier(name: str) -> None:
    report = verify_bundle(load_bundle(ROOT / "examples" / name), VerifyOptions(device="cuda"))
    assert report.status == "PASS", report.render()


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("slot_id", ["moe.topk_softmax", "moe.fused_experts"])
def test_stock_binding_meets_the_slot_tolerance(slot_id: str) -> None:
    from seams.stock import stock_kernel

    kernel, why = stock_kernel(slot_id)
    if kernel is None:
        pytest.skip(why)
    spec = get_slot(slot_id)
    for c in spec.cases("gpu"):
        for name in spec.dtypes:
            _run_and_judge(spec, kernel, c, name)


def _run_and_judge(spec, kernel, c: ShapeCase, name: str) -> None:  # noqa: ANN001
    from cacheon_subnet.verify.judge import check_outputs

    act = dtype_of(name)
    inputs = spec.make_inputs(c, act, seed_generator(23))
    args = {k: v.cuda() for k, v in inputs.items()}
    args.update(
        {
            k: v.fill_(float("nan") if v.is_floating_point() else -1)
            for k, v in spec.allocate("out", c.dims, act, "cuda").items()
        }
    )
    kernel(**args, **c.params)
    torch.cuda.synchronize()
    got = {k: v.cpu() for k, v in args.items()}
    failure = check_outputs(spec, name, got, spec.reference(inputs, c.params))
    assert failure is None, f"{c.label} {name}: {failure}"
