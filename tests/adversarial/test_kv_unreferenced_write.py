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

from pathlib import Path

import pytest

from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.slots import get_slot
from cacheon_subnet.verify import VerifyOptions, judge, runner
from cacheon_subnet.verify.opplan import OpPlan
from cacheon_subnet.verify.shapes import PlannedCase
from cacheon_subnet.verify.trials import Trial

MANIFEST = '''schema = "cacheon.bundle/2"

[[ops]]
slot = "attention.decode"
entry = "attn:decode_attention"
dtypes = ["bfloat16"]
'''
KERNEL = '''import torch


def decode_attention(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, num_kv_splits, attn_logits, attn_lse, sm_scale):
    B, HQ, D = q.shape
    HK = k_buffer.shape[1]
    g = HQ // HK
    pos = torch.arange(kv_indices.shape[0], device=q.device)
    req = (torch.searchsorted(kv_indptr, pos, right=True) - 1).clamp(0, B)
    k, v = k_buffer[kv_indices].float(), v_buffer[kv_indices].float()
    qq = torch.cat([q.float(), q.new_zeros(1, HQ, D).float()])[req].view(-1, HK, g, D)
    s = (qq * k[:, :, None, :]).sum(-1).reshape(-1, HQ) * sm_scale
    m = torch.full((B + 1, HQ), float("-inf")).scatter_reduce(0, req[:, None].expand(-1, HQ), s, "amax")
    p = torch.exp(s - m[req])
    den = torch.zeros(B + 1, HQ).index_add(0, req, p)
    num = torch.zeros(B + 1, HK, g, D).index_add(0, req, p.view(-1, HK, g, 1) * v.view(-1, HK, 1, D))
    o.copy_((num.view(B + 1, HQ, D) / den[..., None])[:B].to(o.dtype))
'''
# the cheat: after the exact answer, one row of the K pool that no live kv_indices entry names
ATTACK = KERNEL + '''    live = (pos < kv_indptr[-1]).int()
    used = torch.zeros(k_buffer.shape[0], dtype=torch.int32).index_add(0, kv_indices, live)
    rows = torch.arange(k_buffer.shape[0])
    free = torch.where(used == 0, rows, WHICH)
    row = free.REDUCE().view(1)
    k_buffer.index_add_(0, row, torch.ones(1, HK, D, dtype=k_buffer.dtype))
'''


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
    plan = OpPlan((PlannedCase(case, ("bfloat16",), "tier"),),
                  (Trial("pair", 0, "bfloat16", poison=0), Trial("pair", 0, "bfloat16", poison=1),
                   Trial("fresh", 0, "bfloat16", poison=2)), {}, {}, {})
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
    monkeypatch.setattr(wire, "send", lambda fd, msg, t=None, d=None: sealed.append(getattr(t, "sealed", None))
                        or real_send(fd, msg, t, d))
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
