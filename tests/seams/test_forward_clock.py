"""The arena's forward clock (seams/forward_clock.py): SGLang's device_timer contract, spans per
window by category and cleared at every read, one file line per rank, set only where asked."""

from __future__ import annotations

import contextlib
import json
import time
import types

import pytest

from seams import forward_clock
from seams.forward_clock import ForwardClock, read_clock


def _forward(clock: ForwardClock, category: str, seconds: float) -> None:
    """What SGLang does (cuda_graph_runner.py replay, model_runner.py forward_extend)."""
    with clock.wrap(metadata={"category": category}):
        time.sleep(seconds)


def test_spans_are_summed_per_window_by_category_and_cleared_at_each_read(tmp_path):
    clock = ForwardClock(str(tmp_path), rank=0, use_cuda=False)
    _forward(clock, "extend", 0.03)
    _forward(clock, "decode", 0.01)
    _forward(clock, "decode", 0.01)
    first = clock.read("w000-B")
    assert first["forwards"] == 3 and first["decodes"] == 2
    assert 0.015 < first["decode_gpu_s"] < first["gpu_s"] - 0.025  # decode steps alone, prefill apart
    assert first["by_category"]["extend"][0] == 1
    _forward(clock, "decode", 0.005)
    second = clock.read("w001-C")
    assert second["forwards"] == 1 and second["gpu_s"] < first["decode_gpu_s"]  # nothing carried over
    lines = (tmp_path / "clock-0.jsonl").read_text().splitlines()
    assert [json.loads(x)["tag"] for x in lines] == ["w000-B", "w001-C"]
    assert read_clock(tmp_path, "w001-C") == [second]


def test_a_timer_sglang_installed_keeps_running_inside(tmp_path):
    seen = []

    class SGLangTimer:
        @contextlib.contextmanager
        def wrap(self, metadata):
            seen.append(metadata["category"])
            yield

    clock = ForwardClock(None, 0, use_cuda=False, inner=SGLangTimer())
    _forward(clock, "decode", 0.0)
    assert seen == ["decode"] and clock.read("w")["decodes"] == 1 and bool(clock)


def test_read_clock_returns_every_rank_for_a_tag(tmp_path):
    for rank in (0, 1):
        c = ForwardClock(str(tmp_path), rank=rank, use_cuda=False)
        _forward(c, "decode", 0.0)
        c.read("w000-B")
        c.read("w001-C:before")
    assert sorted(r["rank"] for r in read_clock(tmp_path, "w000-B")) == [0, 1]
    assert read_clock(tmp_path, "w009-C") == []


def test_attach_fills_the_runner_device_timer_only_where_asked(tmp_path):
    sched = types.SimpleNamespace(tp_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(device_timer=None)))
    assert forward_clock.attach(sched, 0, {}) is None
    assert sched.tp_worker.model_runner.device_timer is None and not hasattr(sched, forward_clock.RPC_METHOD)
    clock = forward_clock.attach(sched, 1, {forward_clock.ENV: "1", "CACHEON_RECEIPT_DIR": str(tmp_path)})
    assert sched.tp_worker.model_runner.device_timer is clock
    _forward(clock, "decode", 0.0)
    getattr(sched, forward_clock.RPC_METHOD)(tag="w000-B")
    (rec,) = read_clock(tmp_path, "w000-B")
    assert rec["rank"] == 1 and rec["decodes"] == 1


def test_a_failing_forward_records_no_span(tmp_path):
    clock = ForwardClock(None, 0, use_cuda=False)
    with pytest.raises(RuntimeError):
        with clock.wrap(metadata={"category": "decode"}):
            raise RuntimeError("kernel failed")
    assert clock.read("w")["forwards"] == 0
