"""The arena's forward clock: GPU time of every forward pass on a scheduler rank, read per window.

Why: on the lent H200 the host's wall clock moves with the box, not with the kernels. With the
dense arena's windows the GPU was 75-100 % busy and the slow phases (10-15 %, several windows
long) showed the SM clock at its maximum, GPU power down and utilisation down: the GPU was
waiting on the host (docs/benchmarks.md, "Arena noise"). Kernels are what a contribution
changes, so the arena also times the GPU span of each `ModelRunner.forward` with CUDA events:
decode replays a CUDA graph in one launch, so its span is kernel time, whatever the host does
between steps.

Installed (AROUND hook on `ModelRunner.forward`, listed in docs/seams.md) only where the host
sets CACHEON_FORWARD_CLOCK=1, i.e. in the arena's timed engines, where B, C and B′ share one
engine and so pay exactly the same cost. The host reads it through
`Engine.collective_rpc("cacheon_clock", tag=...)`: each call sums the spans recorded since the
previous call, appends one JSON line to `clock-<rank>.jsonl` in the receipts directory, and
starts a new span list. Events are never recorded while a CUDA graph is being captured.
Without CUDA (tests, the CPU arena) the spans are host `perf_counter` intervals.

The H200 showed host time still leaking into forward spans (eager prefill launches, the
replay's input preparation while the GPU idles): in slow box phases GPU tokens/s fell with wall
tokens/s, about half as much. So the clock also times each CUDA graph replay alone
(`torch.cuda.CUDAGraph.replay`, patched in this process only): once launched, a decode graph runs
without the host, so its span is kernel time. Reported as `graph_s` (decode steps only).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

TARGET = "sglang.srt.model_executor.model_runner:ModelRunner.forward"
ENV = "CACHEON_FORWARD_CLOCK"
RPC_METHOD = "cacheon_clock"


class ForwardClock:
    """Spans of forward passes since the last read; one instance per scheduler process."""

    def __init__(self, directory: str | None, rank: int, use_cuda: bool | None = None) -> None:
        import torch

        self.directory, self.rank = directory, rank
        self.cuda = torch.cuda.is_available() if use_cuda is None else use_cuda
        self._torch = torch
        self._spans: list[Any] = []
        self._graphs: list[Any] = []

    def _timed(self, sink: list[Any], fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        torch = self._torch
        if self.cuda:
            if torch.cuda.is_current_stream_capturing():
                return fn(*args, **kwargs)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn(*args, **kwargs)
            end.record()
            sink.append((start, end))
            return out
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        sink.append(time.perf_counter() - t)
        return out

    def around(self, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self._timed(self._spans, original, *args, **kwargs)

    def graph_replay(self, original: Callable[..., Any], graph: Any) -> Any:
        return self._timed(self._graphs, original, graph)

    def _total(self, spans: list[Any]) -> float:
        if not self.cuda:
            return float(sum(spans))
        total = 0.0
        for start, end in spans:
            end.synchronize()
            total += start.elapsed_time(end) / 1000.0
        return total

    def read(self, tag: str) -> dict[str, Any]:
        """Sum and clear the spans; append the record to this rank's clock file."""
        spans, self._spans = self._spans, []
        graphs, self._graphs = self._graphs, []
        rec = {"tag": str(tag), "rank": self.rank, "gpu_s": self._total(spans), "forwards": len(spans),
               "graph_s": self._total(graphs), "graphs": len(graphs), "cuda": self.cuda, "t": time.time()}
        if self.directory:
            path = Path(self.directory) / f"clock-{self.rank}.jsonl"
            with open(path, "a") as f:
                f.write(json.dumps(rec) + "\n")
                f.flush()
                os.fsync(f.fileno())
        return rec


_CLOCK: list[ForwardClock] = []


def hooks(directory: str | None, rank: int) -> dict[str, Callable[..., Any]]:
    """The AROUND hook for install_hooks; one clock per process. Also wraps CUDAGraph.replay
    (a torch class, not an SGLang symbol: no HookRegistry target) in this process."""
    if not _CLOCK:
        _CLOCK.append(ForwardClock(directory, rank))
        _wrap_graph_replay(_CLOCK[0])
    clock = _CLOCK[0]

    def _forward(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return clock.around(original, *args, **kwargs)

    return {TARGET: _forward}


def _wrap_graph_replay(clock: ForwardClock) -> None:
    import torch

    graph_cls = getattr(torch.cuda, "CUDAGraph", None)
    original = getattr(graph_cls, "replay", None)
    if original is None or getattr(original, "__cacheon_clock__", False):
        return

    def replay(self: Any) -> Any:
        return clock.graph_replay(original, self)

    replay.__cacheon_clock__ = True  # type: ignore[attr-defined]
    replay.__wrapped__ = original  # type: ignore[attr-defined]
    graph_cls.replay = replay


def attach(scheduler: Any) -> None:
    """Give the scheduler the RPC the host calls around each timed window."""
    if not _CLOCK:
        return
    clock = _CLOCK[0]

    def cacheon_clock(tag: str) -> None:
        clock.read(tag)

    setattr(scheduler, RPC_METHOD, cacheon_clock)


def read_clock(directory: str | os.PathLike[str], tag: str) -> list[dict[str, Any]]:
    """Every rank's record for `tag` (the host side), newest last."""
    out = []
    for p in sorted(Path(directory).glob("clock-*.jsonl")):
        for line in p.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("tag") == tag:
                out.append(rec)
    return out
