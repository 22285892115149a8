"""A paid miner against the cheaper screen (issue 30 item 1): its attention kernel is exact, but it
also writes into a row of the paged K pool that no request of the call references. The judge
compares outputs only on referenced rows, so a digest or copy-back "sized to what is judged"
(the referenced pages) would miss it; in an engine that row is another request's cache or a free
slot the next prefill fills. The whole pool is still digested (tensor_views.tensor_digest: every
byte, on threads), so the real sandboxed worker reports a changed K pool: FAIL input_mutated.

Runs below the static scan (a plain-torch kernel the allowlist refuses: runner._Run, as
test_trials.py does), on a case whose pools pass judge.BIG_INPUT (digested, not copied back) and
whose frame goes through a sealed memfd (verify/shm.py), on CPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.slots import get_slot
from cacheon_subnet.verify import VerifyOptions, judge, runner
from cacheon_subnet.verify.opplan import OpPlan
from cacheon_subnet.verify.shapes import PlannedCase
from cacheon_subnet.verify.trials import Trial

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import verify_pipeline_probe as _probe  # noqa: E402

pytestmark = pytest.mark.slow

MANIFEST = """schema = "cacheon.bundle/2"

[[ops]]
slot = "attention.decode"
entry = "attn:decode_attention"
dtypes = ["bfloat16"]
"""
# the plain-torch decode attention scripts/verify_pipeline_probe.py probes verify with: exact on every
# referenced K/V row (the static allowlist refuses searchsorted and index_add: the test skips the scan)
KERNEL = _probe.KERNEL
# the cheat: after the exact answer, one row of the K pool that no live kv_indices entry names
ATTACK = (
    KERNEL
    + """    live = (pos < kv_indptr[-1]).int()
    used = torch.zeros(k_buffer.shape[0], dtype=torch.int32).index_add(0, kv_indices, live)
    rows = torch.arange(k_buffer.shape[0])
    free = torch.where(used == 0, rows, WHICH)
    row = free.REDUCE().view(1)
    k_buffer.index_add_(0, row, torch.ones(1, HK, D, dtype=k_buffer.dtype))
"""
)


def _bundle(tmp_path: Path, name: str, source: str) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "manifest.toml").write_text(MANIFEST)
    (d / "attn.py").write_text(source)
    d.chmod(0o755)
    return d


def _screen(bundle_dir: Path, monkeypatch):
    """Three calls at a case whose K and V pools are 84 MB each (digested by the worker, sent in a
    sealed memfd): the identical-input pair and one fresh call."""
    spec = get_slot("attention.decode")
    case = next(c for c in spec.cases("gpu") if c.label == "qwen3-0.6b/decode-bs64-ctx512")
    assert case.dims["S"] * case.dims["HK"] * case.dims["D"] * 2 > judge.BIG_INPUT
    plan = OpPlan(
        (PlannedCase(case, ("bfloat16",), "tier"),),
        (
            Trial("pair", 0, "bfloat16", poison=0),
            Trial("pair", 0, "bfloat16", poison=1),
            Trial("fresh", 0, "bfloat16", poison=2),
        ),
        {},
        {},
        {},
    )
    monkeypatch.setattr(runner, "op_plan", lambda *a: plan)
    bundle = load_bundle(bundle_dir)
    run = runner._Run(bundle, VerifyOptions(device="cpu", tier="gpu", seed=5, call_timeout_s=300), 5)
    try:
        results, _ = run.execute()
    finally:
        run.close()
    return results[0]


def test_the_exact_kernel_passes(tmp_path, monkeypatch):
    from cacheon_subnet.verify import wire

    sealed, real_send = [], wire.send
    monkeypatch.setattr(
        wire, "send", lambda fd, msg, t=None, d=None: sealed.append(getattr(t, "sealed", None)) or real_send(fd, msg, t, d)
    )
    r = _screen(_bundle(tmp_path, "honest", KERNEL), monkeypatch)
    assert r.status == "PASS", r.failure
    assert sum(s is not None for s in sealed) == 3  # every call's inputs went through a sealed memfd


@pytest.mark.parametrize("which,reduce", [("-1", "max"), ("1 << 30", "min")], ids=["last-free-row", "first-free-row"])
def test_a_write_to_an_unreferenced_kv_row_is_caught(tmp_path, monkeypatch, which, reduce):
    """The last free row sits in the pool's last digest chunk, the first free one in its first."""
    source = ATTACK.replace("WHICH", which).replace("REDUCE", reduce)
    r = _screen(_bundle(tmp_path, "attack", source), monkeypatch)
    assert r.failure is not None and r.failure.reason == "input_mutated", r.failure
    assert "k_buffer" in r.failure.detail
