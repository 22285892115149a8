"""The arena's forward clock (seams/forward_clock.py): SGLang's device_timer contract, spans per
window by category and cleared at every read, answered in the rank's nonce-bound answer log
(seams/answers.py), the device timer set only where asked."""

from __future__ import annotations

import contextlib
import json
import time
import types

import pytest

from seams import forward_clock
from seams.answers import AnswerReader, ForgeryError
from seams.dispatch import Registry
from seams.forward_clock import ForwardClock
from seams.receipts import Receipts

N1, N2 = "1" * 32, "2" * 32


def _forward(clock: ForwardClock, category: str, seconds: float) -> None:
    """What SGLang does (cuda_graph_runner.py replay, model_runner.py forward_extend)."""
    with clock.wrap(metadata={"category": category}):
        time.sleep(seconds)


def test_spans_are_summed_per_window_by_category_and_cleared_at_each_read():
    clock = ForwardClock(rank=0, use_cuda=False)
    _forward(clock, "extend", 0.03)
    _forward(clock, "decode", 0.01)
    _forward(clock, "decode", 0.01)
    first = clock.read()
    assert first["forwards"] == 3 and first["decodes"] == 2
    assert 0.015 < first["decode_gpu_s"] < first["gpu_s"] - 0.025  # decode steps alone, prefill apart
    assert first["by_category"]["extend"][0] == 1
    _forward(clock, "decode", 0.005)
    second = clock.read()
    assert second["forwards"] == 1 and second["gpu_s"] < first["decode_gpu_s"]  # nothing carried over


def test_a_timer_sglang_installed_keeps_running_inside():
    seen = []

    class SGLangTimer:
        @contextlib.contextmanager
        def wrap(self, metadata):
            seen.append(metadata["category"])
            yield

    clock = ForwardClock(0, use_cuda=False, inner=SGLangTimer())
    _forward(clock, "decode", 0.0)
    assert seen == ["decode"] and clock.read()["decodes"] == 1 and bool(clock)


def _sched():
    return types.SimpleNamespace(tp_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(device_timer=None)))


def test_every_answer_echoes_the_host_nonce_with_the_counts(tmp_path):
    reg = Registry()
    reg.receipts = Receipts(None, "scheduler", 1)
    sched = _sched()
    clock = forward_clock.attach(sched, 1, {forward_clock.ENV: "1", "CACHEON_RECEIPT_DIR": str(tmp_path)}, reg)
    assert sched.tp_worker.model_runner.device_timer is clock
    reader = AnswerReader(tmp_path, [1])
    _forward(clock, "decode", 0.0)
    reg.receipts.note("norm.rmsnorm", "fired")
    getattr(sched, forward_clock.RPC_METHOD)(nonce=N1)
    got = reader.collect(N1, "clock")[1]
    assert got["nonce"] == N1 and got["clock"]["decodes"] == 1 and got["counts"]["norm.rmsnorm"]["fired"] == 1
    getattr(sched, forward_clock.RPC_METHOD)(nonce=N2)
    assert reader.collect(N2, "clock")[1]["clock"]["forwards"] == 0  # cleared at the last read


def test_without_the_env_the_rpc_answers_counts_but_times_nothing(tmp_path):
    sched = _sched()
    assert forward_clock.attach(sched, 0, {"CACHEON_RECEIPT_DIR": str(tmp_path)}, Registry()) is None
    assert sched.tp_worker.model_runner.device_timer is None
    getattr(sched, forward_clock.RPC_METHOD)(nonce=N1)
    assert AnswerReader(tmp_path, [0]).collect(N1, "clock")[0]["clock"] is None


def test_a_nonce_that_is_not_the_hosts_form_is_refused(tmp_path):
    sched = _sched()
    forward_clock.attach(sched, 0, {"CACHEON_RECEIPT_DIR": str(tmp_path)}, Registry())
    with pytest.raises(ValueError, match="32 lowercase hex"):
        getattr(sched, forward_clock.RPC_METHOD)(nonce="w000-B")


def test_a_pre_written_or_extra_answer_is_forging(tmp_path):
    sched = _sched()
    forward_clock.attach(sched, 0, {"CACHEON_RECEIPT_DIR": str(tmp_path)}, Registry())
    reader = AnswerReader(tmp_path, [0])
    # a line written before the RPC, with a guessed nonce: the real answer then comes second
    (tmp_path / "answers-0.jsonl").write_text(json.dumps({"nonce": "f" * 32, "kind": "clock", "rank": 0}) + "\n")
    getattr(sched, forward_clock.RPC_METHOD)(nonce=N1)
    with pytest.raises(ForgeryError, match="2 complete new answer line"):
        reader.collect(N1, "clock")


def test_a_failing_forward_records_no_span():
    clock = ForwardClock(0, use_cuda=False)
    with pytest.raises(RuntimeError):
        with clock.wrap(metadata={"category": "decode"}):
            raise RuntimeError("kernel failed")
    assert clock.read()["forwards"] == 0
