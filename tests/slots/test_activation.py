"""activation.silu_and_mul: inputs, reference, and the Triton example bundles of the MLP side
(examples/activation.silu_and_mul and examples/norm.fused_add_rmsnorm) through `cacheon verify`."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.slots import get_slot, profiles
from cacheon_subnet.slots.compare import compare
from cacheon_subnet.slots.gen import seed_generator
from cacheon_subnet.slots.spec import TIERS, ShapeCase, Tolerance, dtype_of
from cacheon_subnet.verify import VerifyOptions, verify_bundle

ROOT = Path(__file__).resolve().parents[2]
SPEC = get_slot("activation.silu_and_mul")
FP32_TOL = Tolerance(atol=1e-6, rtol=1e-5, max_rel_l2=1e-6)


MAX_HOST_ELEMENTS = 1 << 24  # bench prefill inputs are GB-sized; their row count is capped below


def _dtypes(tier: str) -> tuple[str, ...]:
    # Large tiers hold big inputs on the host; one dtype is enough to check their shapes.
    return SPEC.dtypes if tier == "verify" else ("bfloat16",)


def _host_sized(c: ShapeCase) -> ShapeCase:
    """The case itself, or (for huge prefill chunks) the same widths with fewer tokens: only T
    scales the leading extent, so the ABI check is the same and the test stays fast."""
    T, D = c.dims["T"], c.dims["D"]
    if T * 2 * D <= MAX_HOST_ELEMENTS:
        return c
    return replace(c, dims={**c.dims, "T": max(1, MAX_HOST_ELEMENTS // (2 * D))})


# ---- (a) inputs -------------------------------------------------------------------------
@pytest.mark.parametrize("tier", TIERS)
def test_every_case_builds_abi_conformant_inputs(tier: str) -> None:
    cases = SPEC.cases(tier)
    assert {c.dims["D"] for c in cases} == {profiles.get(n).intermediate for n in profiles.DENSE}
    assert {c.dims["T"] for c in cases} == {n for _, n in profiles.token_counts(tier)}
    for c in map(_host_sized, cases):
        for name in _dtypes(tier):
            act = dtype_of(name)
            inputs = SPEC.make_inputs(c, act, seed_generator(3))
            args = {**inputs, **SPEC.allocate("out", c.dims, act, "cpu")}
            assert SPEC.check_tensors(args, act) == dict(c.dims)
            assert SPEC.bind_dims(args) == dict(c.dims)
            x = inputs["x"]
            assert torch.isfinite(x).all() and (x != 0).float().mean() > 0.99, "realistic, never zeros"


def test_inputs_exercise_both_silu_tails() -> None:
    c = SPEC.cases("verify")[-1]
    x = SPEC.make_inputs(c, torch.float32, seed_generator(0))["x"]
    gate = x[:, : c.dims["D"]]
    assert (gate < -4).any() and (gate > 4).any()


# ---- (b) reference ----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_reference_matches_float64_formulation(dtype: str) -> None:
    for c in SPEC.cases("verify"):
        inputs = SPEC.make_inputs(c, dtype_of(dtype), seed_generator(11))
        ref = SPEC.reference(inputs, c.params)["out"]
        assert ref.dtype == torch.float32 and ref.shape == (c.dims["T"], c.dims["D"])
        x = inputs["x"].to(torch.float64)
        gate, up = x[:, : c.dims["D"]], x[:, c.dims["D"] :]
        independent = gate * (1.0 / (1.0 + torch.exp(-gate))) * up
        cmp = compare(ref, independent, FP32_TOL)
        assert cmp.ok, cmp.detail


# ---- (c) the example bundles pass verify --------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("example", ["activation.silu_and_mul", "norm.fused_add_rmsnorm"])
def test_example_bundle_passes_verify(example: str) -> None:
    report = verify_bundle(
        load_bundle(str(ROOT / "examples" / example)), VerifyOptions(device="cpu", max_cases=2, seed=1234)
    )
    assert report.status == "PASS", report.reasons


# ---- (d) broken variants fail with "mismatch" -------------------------------------------
def _broken(tmp_path: Path, example: str, module: str, old: str, new: str) -> str:
    dst = tmp_path / example
    shutil.copytree(ROOT / "examples" / example, dst)
    src = (dst / module).read_text()
    assert old in src, f"{old!r} not in {module}"
    (dst / module).write_text(src.replace(old, new))
    manifest = dst / "manifest.toml"  # one dtype is enough to see the wrong math
    manifest.write_text(manifest.read_text().replace('["bfloat16", "float16", "float32"]', '["float32"]'))
    return str(dst)


@pytest.mark.slow
@pytest.mark.parametrize(
    "example,module,old,new",
    [
        ("activation.silu_and_mul", "silu_and_mul.py", "(act * up)", "(gate * up)"),  # gate never activated
        ("activation.silu_and_mul", "silu_and_mul.py", "(act * up)", "(act)"),  # up projection dropped
        ("norm.fused_add_rmsnorm", "fused_add_rmsnorm.py", "(s * rstd * w)", "(s * rstd)"),  # gain dropped
    ],
)
def test_broken_variant_fails_with_mismatch(tmp_path: Path, example: str, module: str, old: str, new: str) -> None:
    report = verify_bundle(
        load_bundle(_broken(tmp_path, example, module, old, new)),
        VerifyOptions(device="cpu", max_cases=1, compile_check=False, seed=99),
    )
    assert report.status == "FAIL"
    assert report.ops[0].failure is not None and report.ops[0].failure.reason == "mismatch", report.reasons
