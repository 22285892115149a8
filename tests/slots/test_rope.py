"""rope.neox: qkv-view inputs, the cos/sin table, the reference against a complex rotation, and
examples/rope.neox through `cacheon verify` (plus directly on the strided views)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

import pytest
import torch

from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.slots import get_slot, profiles
from cacheon_subnet.slots.compare import compare
from cacheon_subnet.slots.defs.rope import VERIFY_CACHE_LEN, cos_sin_cache
from cacheon_subnet.slots.gen import seed_generator
from cacheon_subnet.slots.spec import TIERS, Tolerance, dtype_of
from cacheon_subnet.verify import VerifyOptions, verify_bundle

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "rope.neox"
SPEC = get_slot("rope.neox")
FP32_TOL = Tolerance(atol=1e-5, rtol=1e-5, max_rel_l2=1e-6)


# ---- (a) inputs -------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("tier", TIERS)
def test_every_case_builds_abi_conformant_qkv_views(tier: str) -> None:
    cases = SPEC.cases(tier)
    assert {c.dims["T"] for c in cases} == {n for _, n in profiles.token_counts(tier)}
    dtypes = SPEC.dtypes if tier == "verify" else ("bfloat16",)
    for c in cases:
        p = profiles.get(c.profile)
        assert (c.dims["HQ"], c.dims["HK"], c.dims["D"]) == (p.n_heads, p.n_kv_heads, p.head_dim)
        assert c.dims["P"] == (min(p.max_position, VERIFY_CACHE_LEN) if tier == "verify" else p.max_position)
        for name in dtypes:
            act = dtype_of(name)
            t = SPEC.make_inputs(c, act, seed_generator(5))
            assert SPEC.check_tensors(t, act) == dict(c.dims)
            assert SPEC.bind_dims(t) == dict(c.dims)
            T, HQ, HK, D = c.dims["T"], c.dims["HQ"], c.dims["HK"], c.dims["D"]
            q, k = t["q"], t["k"]
            # views into one packed [T, (HQ + 2*HK) * D] qkv buffer, split as SGLang splits it
            assert q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr()
            assert q.stride()[1:] == (D, 1) and k.stride()[1:] == (D, 1)
            assert q.storage_offset() == 0 and k.storage_offset() == HQ * D
            assert q.untyped_storage().nbytes() == T * (HQ + 2 * HK) * D * q.element_size()
            if T > 1:  # (a size-1 token dim may carry any stride)
                assert q.stride(0) == k.stride(0) == (HQ + 2 * HK) * D
                assert not q.is_contiguous() and not k.is_contiguous()
            pos = t["positions"]
            assert pos.dtype == torch.int64 and int(pos.min()) >= 0 and int(pos.max()) < c.dims["P"]
            assert t["cos_sin_cache"].dtype == torch.float32 and t["cos_sin_cache"].is_contiguous()
            assert (q != 0).float().mean() > 0.99 and (k != 0).float().mean() > 0.99


def test_positions_spread_over_the_cache() -> None:
    c = SPEC.cases("verify")[2]  # a prefill chunk
    pos = SPEC.make_inputs(c, torch.bfloat16, seed_generator(0))["positions"]
    assert len(set(pos.tolist())) > c.dims["T"] // 2 and int(pos.max()) > c.dims["P"] // 2


def test_cos_sin_cache_follows_rope_theta() -> None:
    """[cos | sin] of pos * theta^(-2i/D); float64 angles differ from SGLang's fp32 ones by at
    most |angle| * 2^-23, which bounds the comparison."""
    P, D, theta = VERIFY_CACHE_LEN, 128, 1e6
    cache = cos_sin_cache(P, D, theta).to(torch.float64)
    assert cache.shape == (P, D)
    inv = theta ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = torch.arange(P, dtype=torch.float64)[:, None] * inv[None, :]
    bound = ang * 2.0**-22 + 1e-6
    assert ((cache[:, : D // 2] - ang.cos()).abs() <= bound).all()
    assert ((cache[:, D // 2 :] - ang.sin()).abs() <= bound).all()
    assert torch.equal(cache[0], torch.cat((torch.ones(D // 2), torch.zeros(D // 2))).double())


# ---- (b) reference ----------------------------------------------------------------------
def _complex_rotation(x: torch.Tensor, cs: torch.Tensor) -> torch.Tensor:
    """NeoX pairs (x[j], x[j + D/2]) as complex numbers times the unit phasor cos + i*sin."""
    h = x.shape[-1] // 2
    z = torch.complex(x[..., :h].double(), x[..., h:].double())
    phasor = torch.complex(cs[:, None, :h].double(), cs[:, None, h:].double())
    r = z * phasor
    return torch.cat((r.real, r.imag), dim=-1)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_reference_matches_complex_rotation(dtype: str) -> None:
    for c in SPEC.cases("verify"):
        t = SPEC.make_inputs(c, dtype_of(dtype), seed_generator(17))
        ref = SPEC.reference(t, c.params)
        cs = t["cos_sin_cache"][t["positions"]]
        for name in ("q", "k"):
            assert ref[name].dtype == torch.float32 and ref[name].shape == t[name].shape
            cmp = compare(ref[name], _complex_rotation(t[name], cs), FP32_TOL)
            assert cmp.ok, f"{name}: {cmp.detail}"
            # a rotation keeps every pair's length
            assert torch.allclose(ref[name].double().norm(dim=-1), t[name].double().norm(dim=-1), rtol=1e-5)


def test_reference_is_identity_at_position_zero() -> None:
    c = SPEC.cases("verify")[1]
    t = SPEC.make_inputs(c, torch.float32, seed_generator(2))
    t["positions"] = torch.zeros_like(t["positions"])
    ref = SPEC.reference(t, c.params)
    assert torch.equal(ref["q"], t["q"]) and torch.equal(ref["k"], t["k"])


# ---- the example kernel on real strided views (in process) -------------------------------
def _load_example(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # read when @triton.jit decorates
    spec = importlib.util.spec_from_file_location("cacheon_test_rope_example", EXAMPLE / "rope.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_example_kernel_rotates_qkv_views_in_place(monkeypatch: pytest.MonkeyPatch, dtype: str) -> None:
    kernel = _load_example(monkeypatch).rope_neox
    c = SPEC.cases("verify")[-1]  # qwen3-30b-a3b prefill: HQ=32, HK=4
    act = dtype_of(dtype)
    t = SPEC.make_inputs(c, act, seed_generator(23))
    ref = SPEC.reference(t, c.params)
    qkv = t["q"].as_strided((c.dims["T"], (c.dims["HQ"] + 2 * c.dims["HK"]) * c.dims["D"]), (t["q"].stride(0), 1))
    v_before = qkv[:, (c.dims["HQ"] + c.dims["HK"]) * c.dims["D"] :].clone()
    assert kernel(**t) is None
    assert torch.equal(qkv[:, (c.dims["HQ"] + c.dims["HK"]) * c.dims["D"] :], v_before), "v must not be touched"
    for name in ("q", "k"):
        cmp = compare(t[name], ref[name], SPEC.tolerance(name, dtype))
        assert cmp.ok, f"{name}: {cmp.detail}"


# ---- (c) the example bundle passes verify -------------------------------------------------
@pytest.mark.slow
def test_example_bundle_passes_verify() -> None:
    report = verify_bundle(load_bundle(str(EXAMPLE)), VerifyOptions(device="cpu", max_cases=2, seed=4321))
    assert report.status == "PASS", report.reasons


# ---- (d) broken variants fail with "mismatch" -------------------------------------------
def _broken(tmp_path: Path, old: str, new: str) -> str:
    dst = tmp_path / "rope.neox"
    shutil.copytree(EXAMPLE, dst)
    src = (dst / "rope.py").read_text()
    assert src.count(old) == 1, f"{old!r} must occur once in rope.py"
    (dst / "rope.py").write_text(src.replace(old, new))
    manifest = dst / "manifest.toml"  # one dtype is enough to see the wrong math
    manifest.write_text(manifest.read_text().replace('["bfloat16", "float16", "float32"]', '["float32"]'))
    return str(dst)


SWAP_COS_SIN = (
    "    cos = tl.load(cs_ptr + pos * cs_stride + cols, mask=cmask, other=0.0)\n"
    "    sin = tl.load(cs_ptr + pos * cs_stride + HALF + cols, mask=cmask, other=0.0)\n",
    "    sin = tl.load(cs_ptr + pos * cs_stride + cols, mask=cmask, other=0.0)\n"
    "    cos = tl.load(cs_ptr + pos * cs_stride + HALF + cols, mask=cmask, other=0.0)\n",
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "old,new",
    [
        SWAP_COS_SIN,
        ("o1 = x1 * cos[None, :] - x2 * sin[None, :]", "o1 = x1 * cos[None, :] + x2 * sin[None, :]"),  # wrong sign
        ("pos = tl.load(pos_ptr + row).to(tl.int64)", "pos = row"),  # ignores positions
    ],
    ids=["swap-cos-sin", "wrong-sign", "ignore-positions"],
)
def test_broken_variant_fails_with_mismatch(tmp_path: Path, old: str, new: str) -> None:
    report = verify_bundle(
        load_bundle(_broken(tmp_path, old, new)), VerifyOptions(device="cpu", max_cases=1, compile_check=False, seed=77)
    )
    assert report.status == "FAIL"
    assert report.ops[0].failure is not None and report.ops[0].failure.reason == "mismatch", report.reasons


@pytest.mark.slow
def test_kernel_ignoring_qkv_row_stride_fails_verify(tmp_path: Path) -> None:
    bad = _broken(tmp_path, "q.stride(0), q.stride(1), k.stride(0), k.stride(1)", "HQ * D, D, HK * D, D")
    report = verify_bundle(load_bundle(bad), VerifyOptions(device="cpu", max_cases=2, compile_check=False, seed=78))
    assert report.status == "FAIL"
    assert report.ops[0].failure is not None and report.ops[0].failure.reason == "mismatch", report.reasons
