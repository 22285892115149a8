"""`cacheon bench` says what it is doing (H200, 2026-12-03: `bench --arena dense` printed nothing
for 140 s and was killed)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import torch

from cacheon_subnet import bench, progress
from cacheon_subnet.bench_timing import warm_stock
from cacheon_subnet.slots import get_slot
from cacheon_subnet.verify import wire
from cacheon_subnet.verify.client import WorkerClient, WorkerConfig

from conftest import EXAMPLES, REPO

BENCH = ["bench", str(EXAMPLES / "norm.rmsnorm"), "--device", "cpu", "--tier", "verify", "--budget", "0.05",
         "--max-cases", "1", "--json"]
PHASES = ("bench: starting the sandboxed worker on cpu", "bench: worker ready after",
          "bench [1/1] norm.rmsnorm/default", ": timing (about 0.05 s a side)", "re-checking against the reference",
          "re-check ok (")


def _cacheon(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != progress.ENV}
    return subprocess.run([sys.executable, "-m", "cacheon_subnet.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env=env)


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
    warm = (("attention.decode", "bfloat16", {"label": "qwen3-0.6b/decode-bs256-ctx1088"}),
            ("attention.decode", "bfloat16", {"label": "qwen3-0.6b/decode-bs1-ctx1088"}))
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
    monkeypatch.setattr(seams.stock, "stock_kernel", lambda slot: (lambda **kw: calls.append(slot), "fake")
                        if slot == "norm.rmsnorm" else (None, "none"))
    case = get_slot("norm.rmsnorm").cases("verify")[0].to_json()
    done: list[int] = []
    failed = warm_stock([{"slot": "moe.topk_softmax", "dtype": "float32", "case": case},
                         {"slot": "norm.rmsnorm", "dtype": "float32", "case": case}], torch.device("cpu"), done.append)
    assert calls == ["norm.rmsnorm"] and done == [2] and len(failed) == 1
