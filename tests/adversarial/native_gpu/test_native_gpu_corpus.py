"""Launch-time attacks only a GPU can run (issue 32, item 6), as CUDA bundles of norm.rmsnorm:
a PTX trap, a kernel that never returns, a write far outside its buffers, a wrapper that launches
another kernel while captured into a CUDA graph. Each ends FAIL with its reason and the validator
unharmed: the same process then verifies the reference CUDA example to PASS.

On CPU the compile lane must accept every one of them (they are well-formed CUDA: what makes
them hostile happens only at the launch), so the corpus is compiled in CI; the `gpu` tests run on
the lease (`scripts/device_trust.sh cuda`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "native"))
from native_bundles import needs_nvcc  # noqa: E402

from cacheon_subnet.bundle import load_bundle  # noqa: E402
from cacheon_subnet.verify import VerifyOptions, verify_bundle  # noqa: E402
from cacheon_subnet.verify.native_gate import check_native  # noqa: E402
from native.build import BuildOptions  # noqa: E402

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parents[2] / "examples" / "cuda" / "norm.rmsnorm"
# attack -> the failure reasons it may end in (the launch error surfaces as the call's exception,
# or the worker dies with its context; the hang is the call's deadline; capture: the replay check)
EXPECT = {
    "trap": {"exception", "crashed"},
    "hang": {"timeout", "crashed"},
    "out_of_bounds": {"exception", "crashed"},
    "graph_differs": {"graph_replay", "partial_write", "nan_inf", "mismatch"},
}
CUDA = torch.cuda.is_available()


def test_the_corpus_is_every_bundle_here():
    assert sorted(p.name for p in HERE.iterdir() if (p / "manifest.toml").is_file()) == sorted(EXPECT)


@needs_nvcc
@pytest.mark.parametrize("name", sorted(EXPECT))
def test_the_compile_lane_accepts_each_attack_its_harm_is_at_the_launch(tmp_path, name):
    report = check_native(load_bundle(HERE / name), BuildOptions(cache_dir=tmp_path / "cache"))
    assert not report.failed, report.render()
    assert all(b.artifact is not None and b.artifact.descriptor.kernels for b in report.builds)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("name", sorted(EXPECT))
def test_each_gpu_attack_fails_with_its_reason_and_the_validator_is_unharmed(name):
    opts = VerifyOptions(device="cuda", max_cases=2, call_timeout_s=30, import_timeout_s=120, deadline_s=240)
    report = verify_bundle(load_bundle(HERE / name), opts)
    assert report.status == "FAIL", report.render()
    [op] = report.ops
    assert op.failure is not None and op.failure.reason in EXPECT[name], report.render()
    good = verify_bundle(load_bundle(EXAMPLE), VerifyOptions(device="cuda", max_cases=2))
    assert good.status == "PASS", good.render()
