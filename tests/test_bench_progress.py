"""`cacheon bench` says what it is doing (H200, 2026-12-03: `bench --arena dense` printed nothing
for 140 s and was killed), and its re-check draws its inputs on the host side from the seed
instead of receiving GBs of them from the worker."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

import pytest
import torch
from conftest import EXAMPLES, REPO

from cacheon_subnet import bench, bench_words, progress
from cacheon_subnet.bench_timing import build_args, device_inputs, reference_kernel, run_bench_request, warm_stock
from cacheon_subnet.slots import get_slot
from cacheon_subnet.slots.gen import seed_generator
from cacheon_subnet.slots.spec import dtype_of
from cacheon_subnet.verify import wire
from cacheon_subnet.verify.client import WorkerClient, WorkerConfig

BENCH = [
    "bench",
    str(EXAMPLES / "norm.rmsnorm"),
    "--device",
    "cpu",
    "--tier",
    "verify",
    "--budget",
    "0.05",
    "--max-cases",
    "1",
    "--json",
]
PHASES = (
    "bench: starting the sandboxed worker on cpu",
    "bench: worker ready after",
    "bench [1/1] norm.rmsnorm/default",
    ": timing, about ",
    "one fp32 reference call takes",
    "re-checking against the reference",
    "re-check ok (",
)


def _cacheon(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != progress.ENV}
    return subprocess.run(
        [sys.executable, "-m", "cacheon_subnet.cli", *args], capture_output=True, text=True, timeout=300, cwd=REPO, env=env
    )


@pytest.mark.slow
def test_bench_prints_each_phase_on_stderr_off_a_terminal_and_nothing_with_quiet():
    loud = _cacheon(*BENCH)
    assert loud.returncode == 0, loud.stdout + loud.stderr
    assert json.loads(loud.stdout)["rows"][0]["recheck"] == "ok"  # stdout stays pure JSON
    for phrase in PHASES:
        assert phrase in loud.stderr, (phrase, loud.stderr[-2000:])
    quiet = _cacheon("--quiet", *BENCH)
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert json.loads(quiet.stdout)["rows"][0]["recheck"] == "ok"
    assert not [p for p in PHASES if p in quiet.stderr], quiet.stderr[-2000:]


def test_note_follows_the_quiet_switch_alone(monkeypatch, capsys):
    monkeypatch.delenv(progress.ENV, raising=False)
    monkeypatch.setattr(progress, "_quiet", False)
    progress.note("phase one")
    monkeypatch.setenv(progress.ENV, "0")
    progress.note("phase two")
    err = capsys.readouterr().err
    assert "phase one" in err and "phase two" not in err


def test_warm_up_frames_are_shown_with_the_hosts_own_labels_and_bad_counters_are_dropped(monkeypatch):
    shown = []
    monkeypatch.setattr(progress, "note", shown.append)
    warm = (
        ("attention.decode", "bfloat16", {"label": "qwen3-0.6b/decode-bs256-ctx1088"}),
        ("attention.decode", "bfloat16", {"label": "qwen3-0.6b/decode-bs1-ctx1088"}),
    )
    show = bench._warm_progress(warm, 0.0)
    for frame in ({"done": 2, "total": 2}, {"done": 3}, {"done": 0}, {"done": "1\x1b[2J"}, {}):
        show(frame)
    assert len(shown) == 1 and "stock warm-up 2/2: attention.decode qwen3-0.6b/decode-bs1-ctx1088" in shown[0]


def test_request_hands_progress_frames_to_the_callback_and_without_one_returns_them():
    client = WorkerClient.__new__(WorkerClient)
    for callback in (True, False):
        host, worker = socket.socketpair()
        client.sock = host
        wire.send(worker.fileno(), {"type": "progress", "phase": "warm", "done": 1, "total": 1})
        wire.send(worker.fileno(), {"type": "loaded", "results": {}})
        seen: list = []
        reply, _ = client.request({"type": "load", "ops": []}, None, 5, on_progress=seen.append if callback else None)
        assert (reply["type"], len(seen)) == (("loaded", 1) if callback else ("progress", 0))
        host.close()
        worker.close()
    assert WorkerConfig().preload_cases == ()


def test_warm_stock_reports_each_call_that_reached_a_stock_kernel(monkeypatch):
    import seams.stock

    calls = []
    monkeypatch.setattr(
        seams.stock,
        "stock_kernel",
        lambda slot: (lambda **kw: calls.append(slot), "fake") if slot == "norm.rmsnorm" else (None, "none"),
    )
    case = get_slot("norm.rmsnorm").cases("verify")[0].to_json()
    done: list[int] = []
    failed = warm_stock(
        [
            {"slot": "moe.topk_softmax", "dtype": "float32", "case": case},
            {"slot": "norm.rmsnorm", "dtype": "float32", "case": case},
        ],
        torch.device("cpu"),
        done.append,
    )
    assert calls == ["norm.rmsnorm"] and done == [2] and len(failed) == 1


def test_device_inputs_on_cpu_are_the_slot_generators_own_and_keep_q_a_view_into_qkv():
    spec = get_slot("attention.decode")
    case = next(c for c in spec.cases("verify") if c.dims["B"] > 1)  # B = 1: any row stride is contiguous
    act = dtype_of("bfloat16")
    got = device_inputs(spec, case, act, 7, "cpu")
    want = spec.make_inputs(case, act, seed_generator(7))
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    d = case.dims
    q = build_args(spec, case, act, 7, torch.device("cpu"))["q"]
    assert q.stride() == ((d["HQ"] + 2 * d["HK"]) * d["D"], d["D"], 1) and not q.is_contiguous()


def test_the_host_recheck_draws_the_inputs_the_worker_called_with():
    """The worker ships only written args back; the host rebuilds the call's inputs from its seed.
    A kernel that is right passes; the same outputs checked against other inputs fail."""
    for slot in ("attention.decode", "norm.fused_add_rmsnorm"):  # strided q; inout args
        spec = get_slot(slot)
        case = spec.cases("verify")[-1]
        msg = {
            "case": case.to_json(),
            "dtype": "bfloat16",
            "seed": 41,
            "budget_s": 0.01,
            "target_rel_err": 1.0,
            "min_iters": 1,
            "stock": False,
        }
        reply, tensors = run_bench_request(spec, reference_kernel(spec), msg, torch.device("cpu"))
        assert reply["ok"] and set(tensors) == {f"out.{a.name}" for a in spec.args if a.written}
        got = {k[4:]: v for k, v in tensors.items()}
        assert bench.recheck(spec, case, "bfloat16", 42, "cpu", got) is None
        assert bench.recheck(spec, case, "bfloat16", 43, "cpu", got).reason == "mismatch"


DIGESTS = """
import sys
from cacheon_subnet.bench_timing import device_inputs
from cacheon_subnet.slots import all_slots
from cacheon_subnet.slots.spec import dtype_of
from cacheon_subnet.tensor_views import tensor_digest
dev, tier = sys.argv[1], sys.argv[2]
for spec in all_slots():
    for c in ([] if spec.collective else spec.cases(tier)[:3]):
        t = device_inputs(spec, c, dtype_of(spec.dtypes[0]), 12345, dev)
        print(spec.id, c.label, *(f"{k}:{v.device.type}:{tuple(v.stride())}:{tensor_digest(v)[:16]}" for k, v in sorted(t.items())))
"""


@pytest.mark.slow
def test_two_processes_draw_the_same_inputs_on_the_bench_device():
    """What the host's re-check rests on: the worker and the host, each drawing from the call's
    seed on the bench device, hold the same values (CPU here; CUDA as well where one is visible,
    at the bench tier's sizes)."""
    runs = [("cpu", "verify")] + ([("cuda", "bench")] if torch.cuda.is_available() else [])
    for dev, tier in runs:
        outs = [
            subprocess.run([sys.executable, "-c", DIGESTS, dev, tier], capture_output=True, text=True, timeout=300, cwd=REPO)
            for _ in range(2)
        ]
        assert all(p.returncode == 0 for p in outs), outs[0].stderr[-2000:]
        lines = outs[0].stdout.splitlines()
        assert len(lines) >= 10 and all(f":{dev}:" in ln for ln in lines), outs[0].stdout[-2000:]
        assert outs[0].stdout == outs[1].stdout


def test_the_case_estimate_scales_with_the_work_not_the_budget():
    """CPU, dense arena: "about 3 s a side" was printed before a case that took ~9 minutes. Each
    side runs at least 23 calls, so a slow call sets the time; a fast one leaves the budget."""
    slow = bench_words.CaseCost(draw_s=4.0, call_s=10.0)
    assert slow.estimate_s(3.0) == pytest.approx(2 * 4 + 2 * 3 * 10 + 20 * 2 * 10 + 10)  # 478 s, not 3
    assert "about 478 s" in slow.say(3.0) and "one fp32 reference call takes 10 s" in slow.say(3.0)
    fast = bench_words.CaseCost(draw_s=0.0, call_s=1e-5)
    assert 3.0 < fast.estimate_s(3.0) < 3.6  # the budget, plus warm-up
    # a candidate 25x slower than the reference in the op's last case (Triton interpreted) counts
    assert bench_words.CaseCost(0.0, 0.1, ratio=25.0).estimate_s(0.05) == pytest.approx(3 * 2.5 + 0.3 + 20 * 2.6 + 2.5)
    assert "the candidate's 25x it" in bench_words.CaseCost(0.0, 0.1, ratio=25.0).say(0.05)


def test_host_reference_times_one_call_after_start_up():
    spec = get_slot("norm.rmsnorm")
    case = spec.cases("verify")[0]
    ref, cost = bench.host_reference(spec, case, "float32", 5, "cpu")
    assert set(ref) == {a.name for a in spec.args if a.written} and all(v.device.type == "cpu" for v in ref.values())
    assert 0 < cost.call_s < 1.0 and cost.draw_s >= 0


def test_the_baseline_is_labelled_as_what_it_is():
    said = "reference fp32 (stock kernel unavailable: ModuleNotFoundError: No module named 'sgl_kernel')"
    cpu = bench_words.baseline_label(said, "cpu")
    assert cpu.startswith("fp32 reference (stock SGLang kernels are CUDA builds") and "ModuleNotFound" not in cpu
    gpu = bench_words.baseline_label(said, "cuda")
    assert gpu.startswith("fp32 reference (no stock SGLang kernel here: stock kernel unavailable") and ".[gpu]" in gpu
    broken = bench_words.baseline_label("reference fp32 (stock kernel unavailable: SandboxViolation: dlopen)", "cuda")
    assert "SandboxViolation" in broken and "pip" not in broken  # not an install problem: no install hint
    assert bench_words.baseline_label("reference fp32 (stock disabled)", "cpu") == "fp32 reference (stock disabled)"
    assert bench_words.baseline_label("stock: sgl_kernel.rmsnorm", "cuda") == "stock: sgl_kernel.rmsnorm"


@pytest.mark.slow
def test_the_printed_estimate_is_within_a_factor_of_three_of_the_time_taken():
    """The dense arena's window sizes on CPU (decode bs 256, prefill 8192): the slow case's
    printed estimate and the time it took agree within 3x (it was 0.05 s vs seconds: 70x)."""
    r = _cacheon(
        "bench", str(EXAMPLES / "demo" / "cpu_rmsnorm"), "--device", "cpu", "--budget", "0.05", "--max-cases", "2",
        "--arena", str(REPO / "configs/arena/dense.toml"), "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(r.stdout)["rows"]
    assert all(row["baseline"].startswith("fp32 reference (stock SGLang kernels are CUDA builds") for row in rows)
    said = dict(re.findall(r"\[(\d)/2\] .*?: timing, about ([\d.]+ m?s)", r.stderr))
    took = dict(re.findall(r"\[(\d)/2\] .*?the case took ([\d.]+) s\)", r.stderr))
    assert set(said) == set(took) == {"1", "2"}, r.stderr[-3000:]
    seconds = {k: float(v.split()[0]) / (1e3 if v.endswith("ms") else 1) for k, v in said.items()}
    slow = max(took, key=lambda k: float(took[k]))
    assert float(took[slow]) > 1.0, took  # prefill-8192: many times the 0.05 s budget
    assert 1 / 3 < seconds[slow] / float(took[slow]) < 3, (said, took)
