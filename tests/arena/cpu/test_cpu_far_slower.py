"""A hopeless candidate costs the CPU arena a handful of calls, not K x its slowness."""

from __future__ import annotations

from arena.cpu.qualifier import CpuQualifier
from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.records import CpuDetail

# The reference math, then the variance 600 times over: faithful, ~35-60x slower than the baseline
# (200 times read only ~12x on a loaded CI box: one B batch over a tenth of C left it to a second round).
SLOW = """
import torch


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    x32 = x.to(torch.float32)
    for _ in range(600):
        var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
"""


def test_a_far_slower_candidate_is_timed_one_call_a_batch_for_one_round(example_copy):
    """Batches are sized from the slower side, so the candidate's warm-up and its one deciding
    round (clearly_slower) are a few calls; sized from the baseline alone, each batch held K calls
    at ~40x (the CPU interpreter's Triton is ~400x: 18 calls of 0.7 s each per qualification)."""
    root = example_copy("demo/stock_equivalent")
    (root / "kernel.py").write_text(SLOW)
    bundle = load_bundle(root)
    r = CpuQualifier(cases=1).qualify(bundle, bundle.manifest.ops[0], None)
    assert isinstance(r.detail, CpuDetail), r.reason
    case = r.detail.cases[0]
    assert r.speedup < 0.2, r.reason  # the verdict is unchanged: far below the bar
    assert (case.calls_per_batch, case.rounds) == (1, 1), case
