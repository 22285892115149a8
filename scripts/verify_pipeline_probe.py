#!/usr/bin/env python3
"""Where `cacheon verify --device cuda --arena CONFIG` spends its host and wire time, measured on
any machine: the GPU plan of attention.decode (the arena's shapes, heavy cases included) run on
CPU through the real sandboxed worker, with a probe kernel written in plain torch (graph and
compile trials off: they need CUDA). Prints verify's timing summary: input draws, the worker
round trip and the worker's own share of it (materialise, kernel, digest and copy back), the
host's digests and references; what is left of the round trip is the wire.

The probe kernel uses torch ops the static allowlist refuses (searchsorted, index_add), so this
script skips the policy scan for the probe alone, in its own process: a development measurement,
never a verdict. The worker's memory limit stops it at the largest cases (bs 201 at ctx 2048).

    python scripts/verify_pipeline_probe.py [--config configs/arena/dense.toml] [--seed 1] [--trials N]

--trials N runs the plan's first N trials only (a reduced measurement; the plan is the same).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MANIFEST = """schema = "cacheon.bundle/2"

[bundle]
name = "torch-decode-attention-probe"
description = "A plain torch paged GQA decode: times verify's pipeline on CPU at the arena's shapes."

[[ops]]
slot = "attention.decode"
entry = "attn:decode_attention"
dtypes = ["bfloat16", "float16"]
"""
KERNEL = """import torch


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
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "configs" / "arena" / "dense.toml"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--trials", type=int, help="only the plan's first N trials")
    a = ap.parse_args(argv)
    from arena.config import load_config
    from cacheon_subnet.bundle import load_bundle
    from cacheon_subnet.log import configure
    from cacheon_subnet.verify import opplan, runner, shapes
    from cacheon_subnet.verify.static import bound as policy_bound
    from cacheon_subnet.verify.trials import Budget

    configure("info")
    policy_bound.static_check = lambda bundle, **kw: policy_bound.StaticResult(())  # the probe only (module docstring)

    def gpu_plan(spec, op, opts, seed):  # the GPU plan, executed on CPU
        plan = opplan.op_plan(spec, op, dataclasses.replace(opts, device="cuda"), seed)
        return dataclasses.replace(plan, trials=plan.trials[: a.trials]) if a.trials else plan

    runner.op_plan = gpu_plan
    with tempfile.TemporaryDirectory() as d:
        Path(d, "manifest.toml").write_text(MANIFEST)
        Path(d, "attn.py").write_text(KERNEL)
        opts = runner.VerifyOptions(
            device="cpu",
            tier="gpu",
            graph_check=False,
            compile_check=False,
            seed=a.seed,
            arena=shapes.from_arena_config(load_config(a.config)),
            budget=Budget.for_device("cuda"),
            call_timeout_s=600,
        )
        t0 = time.time()
        r = runner.verify_bundle(load_bundle(Path(d)), opts)
    print(f"{r.status} in {time.time() - t0:.1f} s; {r.ops[0].calls} calls; {(r.reasons or ('',))[0][:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
