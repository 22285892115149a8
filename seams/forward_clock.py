"""The arena's forward clock: GPU time of the forward passes on a scheduler rank, read per window.

Why: on the lent H200 the host's wall clock moves with the box, not with the kernels. In the
dense arena's slow phases (10-15 %, several windows long) the SM clock sat at its maximum while
GPU power and utilisation fell: the GPU was waiting on the host (docs/benchmarks.md, "Arena
noise"). Kernels are what a contribution changes, so the arena also times the GPU.

How: SGLang's own timing point. `ModelRunner.device_timer` (SGLang's DeviceTimer slot, filled by
its metrics reporter under SGLANG_ENABLE_METRICS_DEVICE_TIMER) is entered as
`device_timer.wrap(metadata={"category": ...})` around exactly the GPU work of a forward: the
decode CUDA-graph replay alone (cuda_graph_runner.py, `CudaGraphRunner.replay`), eager
`model.forward` of extend/decode/idle batches after their attention metadata is prepared
(model_runner.py). The clock is an object with that `wrap`, set as the runner's device_timer
where the host sets CACHEON_FORWARD_CLOCK=1 (the arena's timed engines: B, C and B′ share one
engine, so they pay its cost alike). No function is patched; the pristine route leaves it in
place. A timer SGLang already installed keeps running inside ours.

The host reads it through `Engine.collective_rpc("cacheon_clock", tag=...)`: each call sums the
spans since the previous call by category, appends one JSON line to `clock-<rank>.jsonl` in the
receipts directory, and starts afresh. Spans are never recorded while a graph is being captured.
Without CUDA (tests, the CPU stand-in engine) spans are host `perf_counter` intervals.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

ENV = "CACHEON_FORWARD_CLOCK"
RPC_METHOD = "cacheon_clock"
DECODE = "decode"  # SGLang's category for decode forwards (a graph replay when graphs are on)


class ForwardClock:
    """Spans of forward passes since the last read, by SGLang's category; one per scheduler."""

    def __init__(self, directory: str | None, rank: int, use_cuda: bool | None = None, inner: Any = None) -> None:
        import torch

        self.directory, self.rank, self.inner = directory, rank, inner
        self.cuda = torch.cuda.is_available() if use_cuda is None else use_cuda
        self._torch = torch
        self._spans: list[tuple[str, Any]] = []

    @contextlib.contextmanager
    def wrap(self, metadata: dict[str, Any]) -> Iterator[None]:
        """DeviceTimer.wrap's contract: time the enclosed GPU work, tagged with metadata."""
        inner = self.inner.wrap(metadata) if self.inner else contextlib.nullcontext()
        category = str((metadata or {}).get("category", "other"))
        torch = self._torch
        with inner:
            if not self.cuda:
                t = time.perf_counter()
                yield
                self._spans.append((category, time.perf_counter() - t))
                return
            if torch.cuda.is_current_stream_capturing():
                yield
                return
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self._spans.append((category, (start, end)))

    def _seconds(self, span: Any) -> float:
        if not self.cuda:
            return float(span)
        start, end = span
        end.synchronize()
        return start.elapsed_time(end) / 1000.0

    def read(self, tag: str) -> dict[str, Any]:
        """Sum and clear the spans; append the record to this rank's clock file."""
        spans, self._spans = self._spans, []
        by: dict[str, list[float]] = {}
        for category, span in spans:
            by.setdefault(category, []).append(self._seconds(span))
        rec = {"tag": str(tag), "rank": self.rank, "gpu_s": sum(sum(v) for v in by.values()), "forwards": len(spans),
               "decode_gpu_s": sum(by.get(DECODE, [])), "decodes": len(by.get(DECODE, [])),
               "by_category": {k: [len(v), sum(v)] for k, v in sorted(by.items())}, "cuda": self.cuda,
               "t": time.time()}
        if self.directory:
            path = Path(self.directory) / f"clock-{self.rank}.jsonl"
            with open(path, "a") as f:
                f.write(json.dumps(rec) + "\n")
                f.flush()
                os.fsync(f.fileno())
        return rec


def attach(scheduler: Any, rank: int, environ: dict[str, str] | None = None) -> ForwardClock | None:
    """Where the host asked for it: become the model runner's device_timer and answer the RPC."""
    env = os.environ if environ is None else environ
    if env.get(ENV) != "1":
        return None
    runner = scheduler.tp_worker.model_runner
    clock = ForwardClock(env.get("CACHEON_RECEIPT_DIR"), rank, inner=getattr(runner, "device_timer", None))
    runner.device_timer = clock

    def cacheon_clock(tag: str) -> None:
        clock.read(tag)

    setattr(scheduler, RPC_METHOD, cacheon_clock)
    return clock


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
