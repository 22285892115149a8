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

The host reads it through `Engine.collective_rpc("cacheon_clock", nonce=...)`: each call sums the
spans since the previous call by category, starts afresh, and answers with one line in the
rank's nonce-bound answer log (seams/answers.py: the nonce is the host's, fresh per call, so no
line can be written ahead of time), beside the rank's receipt counts at that moment. The RPC is
there on every rank with an active candidate; the spans only where the host asked for them.
Spans are never recorded while a graph is being captured.
Without CUDA (tests, the CPU stand-in engine) spans are host `perf_counter` intervals.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

from cacheon_subnet.env import FORWARD_CLOCK, RECEIPT_DIR

ENV = FORWARD_CLOCK.name
RPC_METHOD = "cacheon_clock"
DECODE = "decode"  # SGLang's category for decode forwards (a graph replay when graphs are on)


class ForwardClock:
    """Spans of forward passes since the last read, by SGLang's category; one per scheduler."""

    def __init__(self, rank: int, use_cuda: bool | None = None, inner: Any = None) -> None:
        import torch

        self.rank, self.inner = rank, inner
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

    def read(self) -> dict[str, Any]:
        """Sum and clear the spans since the last read."""
        spans, self._spans = self._spans, []
        by: dict[str, list[float]] = {}
        for category, span in spans:
            by.setdefault(category, []).append(self._seconds(span))
        return {
            "rank": self.rank,
            "gpu_s": sum(sum(v) for v in by.values()),
            "forwards": len(spans),
            "decode_gpu_s": sum(by.get(DECODE, [])),
            "decodes": len(by.get(DECODE, [])),
            "by_category": {k: [len(v), sum(v)] for k, v in sorted(by.items())},
            "cuda": self.cuda,
        }


def attach(scheduler: Any, rank: int, environ: dict[str, str] | None = None, registry: Any = None) -> ForwardClock | None:
    """Answer the host's clock RPC on this rank; where the host asked for it, also become the
    model runner's device_timer (the clock's spans then travel in every answer)."""
    from seams.answers import snapshot
    from seams.dispatch import REGISTRY

    env = os.environ if environ is None else environ
    reg = REGISTRY if registry is None else registry
    log = answer_log(env.get(RECEIPT_DIR.name), rank)
    clock = None
    if env.get(ENV) == "1":
        runner = scheduler.tp_worker.model_runner
        clock = ForwardClock(rank, inner=getattr(runner, "device_timer", None))
        runner.device_timer = clock

    def cacheon_clock(nonce: str) -> None:
        log.answer(nonce, "clock", {"clock": clock.read() if clock else None, **snapshot(reg.receipts)})

    setattr(scheduler, RPC_METHOD, cacheon_clock)
    return clock


_LOGS: dict[tuple[str | None, int], Any] = {}


def answer_log(directory: str | None, rank: int) -> Any:
    """One answer log per (directory, rank) in this process: route and clock answers share it."""
    from seams.answers import AnswerLog

    return _LOGS.setdefault((directory, rank), AnswerLog(directory, rank))
