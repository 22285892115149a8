"""The arena's forward clock (seams/forward_clock.py): spans per window, cleared at every read,
graph replays timed apart, one file line per rank; the pristine route keeps it in place."""

from __future__ import annotations

import json
import time
import types

from seams import forward_clock, hooks
from seams.forward_clock import ForwardClock, read_clock


def _busy(seconds: float) -> str:
    time.sleep(seconds)
    return "out"


def test_spans_are_summed_per_window_and_cleared_at_each_read(tmp_path):
    clock = ForwardClock(str(tmp_path), rank=0, use_cuda=False)
    assert clock.around(_busy, 0.02) == "out"
    assert clock.around(_busy, 0.02) == "out"
    first = clock.read("w000-B")
    assert first["forwards"] == 2 and 0.035 < first["gpu_s"] < 0.5 and first["graphs"] == 0
    clock.around(_busy, 0.01)
    second = clock.read("w001-C")
    assert second["forwards"] == 1 and second["gpu_s"] < first["gpu_s"]  # nothing carried over
    assert [r["tag"] for r in map(json.loads, (tmp_path / "clock-0.jsonl").read_text().splitlines())] == \
        ["w000-B", "w001-C"]
    assert read_clock(tmp_path, "w001-C") == [second]


def test_graph_replays_are_timed_apart_from_forward_spans(tmp_path):
    clock = ForwardClock(str(tmp_path), rank=1, use_cuda=False)

    def forward():  # a decode forward: host preparation, then one graph replay
        time.sleep(0.03)
        return clock.graph_replay(lambda g: _busy(0.01), object())

    clock.around(forward)
    rec = clock.read("w002-B'")
    assert rec["graphs"] == 1 and rec["forwards"] == 1
    assert 0.005 < rec["graph_s"] < rec["gpu_s"] - 0.02  # the replay span excludes the host's 30 ms


def test_read_clock_returns_every_rank_for_a_tag(tmp_path):
    for rank in (0, 1):
        c = ForwardClock(str(tmp_path), rank=rank, use_cuda=False)
        c.around(_busy, 0.0)
        c.read("w000-B")
        c.read("w001-C:before")
    assert sorted(r["rank"] for r in read_clock(tmp_path, "w000-B")) == [0, 1]
    assert read_clock(tmp_path, "w009-C") == []


def test_rpc_attaches_only_where_a_clock_exists(tmp_path, monkeypatch):
    monkeypatch.setattr(forward_clock, "_CLOCK", [])
    sched = types.SimpleNamespace()
    forward_clock.attach(sched)
    assert not hasattr(sched, forward_clock.RPC_METHOD)
    monkeypatch.setattr(forward_clock, "_CLOCK", [ForwardClock(str(tmp_path), 0, use_cuda=False)])
    forward_clock.attach(sched)
    getattr(sched, forward_clock.RPC_METHOD)(tag="w000-B")
    assert read_clock(tmp_path, "w000-B")[0]["forwards"] == 0


def test_pristine_detach_keeps_the_permanent_clock_hook(monkeypatch):
    class Runner:
        def forward(self, batch):
            return batch

    class Layer:
        def forward_cuda(self, x):
            return x

    wrapped_fwd = lambda self, batch: ("clocked", batch)  # noqa: E731
    wrapped_fwd.__wrapped__ = Runner.forward
    wrapped_norm = lambda self, x: ("seam", x)  # noqa: E731
    wrapped_norm.__wrapped__ = Layer.forward_cuda
    orig_fwd, orig_norm = Runner.forward, Layer.forward_cuda
    monkeypatch.setattr(Runner, "forward", wrapped_fwd)
    monkeypatch.setattr(Layer, "forward_cuda", wrapped_norm)
    owners = {"m:Runner": Runner, "m:Layer": Layer}
    monkeypatch.setattr(hooks, "INSTALLED", {"m:Runner.forward": (orig_fwd, wrapped_fwd),
                                             "m:Layer.forward_cuda": (orig_norm, wrapped_norm)})
    monkeypatch.setattr(hooks, "PERMANENT", {"m:Runner.forward"})
    monkeypatch.setattr(hooks, "_DETACHED", [])
    monkeypatch.setattr(hooks, "pkgutil", types.SimpleNamespace(resolve_name=lambda path: owners[path.replace(".", ":", 1)]))
    assert hooks.detach() == 1
    assert Layer.__dict__["forward_cuda"] is orig_norm  # the adapter is out ...
    assert Runner.__dict__["forward"] is wrapped_fwd  # ... the instrument stays, so every route is timed alike
    hooks.reattach()
    assert Layer.__dict__["forward_cuda"] is wrapped_norm
