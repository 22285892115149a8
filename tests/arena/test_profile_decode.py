"""scripts/profile_decode.py's table (issue 17's slot shares) from saved torch-profiler traces: the
GPU run itself needs an engine; what the table says about a trace is checked here."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import arena_harness as h

sys.path.insert(0, str(h.REPO / "scripts"))
import profile_decode as pd  # noqa: E402


def _trace(kernels: list[tuple[str, float]], extra: list[dict] | None = None) -> dict:
    ev = [{"ph": "X", "cat": "kernel", "name": n, "dur": d, "ts": i} for i, (n, d) in enumerate(kernels)]
    return {"traceEvents": ev + (extra or [])}


def test_kernels_are_summed_into_their_slots_and_the_unknown_ones_are_named():
    doc = _trace(
        [
            ("void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>", 30.0),
            ("void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>", 10.0),
            ("void flashinfer::activation::act_and_mul_kernel<silu>", 20.0),
            ("_fwd_grouped_kernel_stage1", 20.0),
            ("_fwd_kernel_stage1", 5.0),
            ("_fwd_kernel_stage2", 5.0),
            ("nvjet_tst_128x256_64x4_2x1_v_bz_coopB_TNN", 100.0),
            ("BatchQKApplyRotaryPosIdsCosSinCache", 8.0),
            ("mystery_kernel", 2.0),
            ("void (anonymous namespace)::fused_qknorm_warp<128l, true, __nv_bfloat16>(QKNormParams)", 4.0),
            ("create_flashinfer_kv_indices_triton", 1.0),
        ],
        extra=[{"ph": "X", "cat": "cpu_op", "name": "aten::rms_norm", "dur": 999.0}],
    )  # CPU ops are not GPU time
    s = pd.stage_profile(doc, "DECODE", "t.json", 4)
    by = {x.category: x for x in s.shares}
    assert s.kernel_us == 205.0
    assert by["qk-norm (no slot)"].us == 4.0 and by["attention metadata (no slot)"].us == 1.0
    assert by["norm.fused_add_rmsnorm"].us == 30.0 and by["norm.rmsnorm"].us == 10.0
    assert by["activation.silu_and_mul"].us == 20.0
    assert by["attention.decode"].kernels == 3 and by["attention.decode"].calls == 1  # one stage-2 kernel a call
    assert by["gemm (no slot)"].us == 100.0 and by["rope.neox"].us == 8.0
    assert s.shares[0].category == "gemm (no slot)"  # sorted by time
    assert s.top_other == (("mystery_kernel", 2.0),)


def test_a_multi_kernel_slot_call_is_one_call_and_owns_the_kernels_inside_it():
    """H100, 2026-12-05: fused_experts launched 5 matched kernels a call, so a fixture read 20
    calls a decode step for 4 (7.8 us a call for ~40), and its act_and_mul was booked to
    activation.silu_and_mul, a slot the MoE model never calls outside the experts."""
    layer = [
        ("void moe::topkGatingSoftmax<4, 16>", 2.0),
        ("void moe_align_block_size_kernel<int>", 3.0),
        ("void count_and_sort_expert_tokens_kernel<int>", 2.0),
        ("fused_moe_kernel", 16.0),
        ("void (anonymous namespace)::act_and_mul_kernel<__nv_bfloat16>", 2.0),
        ("Memcpy DtoD (Device -> Device)", 1.0),
        ("fused_moe_kernel", 16.0),
        ("void moe_sum_reduce_kernel_warp_token_topk<c10::BFloat16, 4, 4>", 3.0),
        ("void flashinfer::activation::act_and_mul_kernel<silu>", 5.0),  # a dense MLP's, outside the call
    ]
    s = pd.stage_profile(_trace(layer * 2), "DECODE", "t.json", 1)
    by = {x.category: x for x in s.shares}
    assert by["moe.fused_experts"].calls == 2 and by["moe.fused_experts"].kernels == 14
    assert by["moe.fused_experts"].us == 2 * 43.0
    assert by["activation.silu_and_mul"].calls == 2 and by["activation.silu_and_mul"].us == 10.0
    assert by["moe.topk_softmax"].calls == 2 and "elementwise/copy (no slot)" not in by


def test_spans_are_followed_per_stream():
    ev = [
        {"ph": "X", "cat": "kernel", "name": "moe_align_block_size_kernel", "dur": 1.0, "ts": 0, "args": {"stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "act_and_mul_kernel", "dur": 4.0, "ts": 1, "args": {"stream": 8}},
        {"ph": "X", "cat": "kernel", "name": "moe_sum_reduce_kernel", "dur": 1.0, "ts": 2, "args": {"stream": 7}},
    ]
    by = {x.category: x for x in pd.stage_profile({"traceEvents": ev}, "DECODE", "t.json", 1).shares}
    assert by["activation.silu_and_mul"].us == 4.0 and by["moe.fused_experts"].us == 2.0


def test_the_cli_reads_saved_traces_by_stage(tmp_path):
    for stage, k in (("EXTEND", [("_fwd_kernel", 50.0), ("nvjet_x", 50.0)]), ("DECODE", [("RMSNormKernel", 1.0)])):
        with gzip.open(tmp_path / f"123.4-TP-0-{stage}.trace.json.gz", "wt") as f:
            json.dump(_trace(k), f)
    out = tmp_path / "p.json"
    r = subprocess.run(
        [
            sys.executable,
            "scripts/profile_decode.py",
            "--out",
            str(out),
            "--steps",
            "3",
            "--table",
            *sorted(str(p) for p in tmp_path.glob("*.gz")),
        ],
        capture_output=True,
        text=True,
        cwd=h.REPO,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    stages = {s["stage"]: s for s in doc["stages"]}
    assert set(stages) == {"EXTEND", "DECODE"}
    assert stages["EXTEND"]["shares"][0]["share"] == 0.5
    assert {x["category"] for x in stages["EXTEND"]["shares"]} == {"attention.extend", "gemm (no slot)"}
    assert "== DECODE" in r.stdout and "norm.rmsnorm" in r.stdout
