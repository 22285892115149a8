"""Every input verify sends, drawn by the host ahead of the trial that sends it.

Why: at the dense arena's shapes one attention.decode verify draws ~30 GB of inputs; drawn call by
call on the host's critical path they took 158 s of a 281 s screen (H200, main c7cdecf), and
their references, digests and the socket copies most of the rest. Here the host's own threads
(never the worker, which runs bundle code) make each trial's inputs, reference, digests of large
read-only inputs and sealed frame (verify/shm.py) while the worker runs the trials before it.

What stays exact:
- Every draw's generator is seeded from the secret seed, the op and the draw's place in the plan
  alone (`draw_seed`: SHA-256), never from a counter or a thread: the same inputs for the same
  seed whatever the number of threads, the look-ahead or the order the jobs finish in.
- The plan's secret choices (twin rows, replay counts) were drawn before any input (opplan.py).
- The host judges with the tensors it drew (`Prepared.inputs`); the worker gets a sealed copy of
  exactly those bytes (`Prepared.parcel`), and nothing it does reaches the host's tensors.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from cacheon_subnet.slots.gen import draw_device, seed_generator
from cacheon_subnet.slots.spec import ShapeCase, SlotSpec, dtype_of
from cacheon_subnet.tensor_views import tensor_digest
from cacheon_subnet.verify.judge import BIG_INPUT
from cacheon_subnet.verify.opplan import OpPlan, dynamic_args, replays_that_fit
from cacheon_subnet.verify.shapes import input_bytes
from cacheon_subnet.verify.shm import Parcel
from cacheon_subnet.verify.trials import mix

Tensors = dict[str, torch.Tensor]
# How far ahead of the running trial inputs are made: at most AHEAD trials and, past the next
# one, about BUDGET bytes of drawn inputs and their sealed copies (a bs 256 pool is 1.4 GB).
AHEAD = 6
BUDGET = 6 << 30


def draw_seed(secret: int, op_key: str, key: str) -> int:
    """A draw's generator seed: one-way from the secret seed, so seeing one call's inputs tells
    nothing of another's (a kernel sees its arguments)."""
    h = hashlib.sha256(f"cacheon.verify.draw.v1|{secret}|{op_key}|{key}".encode()).digest()
    return int.from_bytes(h[:8], "big") >> 2


@dataclass
class Prepared:
    """One input set: the host's tensors (judged with, never sent), the sealed copy that is sent,
    the reference on them and the digests of read-only inputs the worker answers with a digest."""

    inputs: Tensors
    parcel: Parcel
    ref: Tensors
    digests: dict[str, str]

    def close(self) -> None:
        self.parcel.close()


@dataclass
class GraphPrepared:
    """A graph trial: the capture, each replay's inputs and reference, one frame for all, and the
    digests the read-only inputs must have after the last replay. replays == []: skipped (the
    capture alone does not fit a frame)."""

    capture: Tensors
    parcel: Parcel | None
    replays: list[Tensors] = field(default_factory=list)
    refs: list[Tensors] = field(default_factory=list)
    final: dict[str, str] = field(default_factory=dict)

    def close(self) -> None:
        if self.parcel is not None:
            self.parcel.close()


class _Inline:
    """An executor that runs each job when it is submitted (threads=0: tests, a one-core host)."""

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        f: Future = Future()
        try:
            f.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - re-raised by get()
            f.set_exception(e)
        return f

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


class Draws:
    """Makes op `op_key`'s inputs for `plan` ahead of the trials (see module doc). get(n) blocks
    until trial n's are ready; done(n) frees them. `threads`: jobs run at once (0: inline)."""

    def __init__(
        self,
        spec: SlotSpec,
        op_key: str,
        plan: OpPlan,
        secret: int,
        threads: int = 2,
        ahead: int = AHEAD,
        budget: int = BUDGET,
        device: str | None = None,
    ) -> None:
        self.spec, self.op_key, self.plan, self.secret = spec, op_key, plan, secret
        self.device = device  # where the large normals are drawn (slots/gen.draw_device); None: host threads
        self.ahead, self.budget = ahead, budget
        self.pool: Any = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="draw") if threads else _Inline()
        self.futures: dict[int, Future] = {}
        self.sources: dict[tuple[int, str], Future] = {}
        self.users: dict[tuple[int, str], list[int]] = {}  # a source's pair trials (its frame) and all its trials
        for t in plan.trials:
            if t.kind in ("pair", "twin"):
                self.users.setdefault((t.case, t.dtype), [0, 0])
                self.users[(t.case, t.dtype)][0] += t.kind == "pair"
                self.users[(t.case, t.dtype)][1] += 1
        self.next = 0
        self.inflight = 0
        self.cost: dict[int, int] = {}
        self.lock = threading.Lock()
        self.timing: dict[str, float] = dict.fromkeys(("draw", "reference", "digest", "frame", "wait"), 0.0)

    # -- the trial loop's side --------------------------------------------------------------
    def get(self, n: int) -> Prepared | GraphPrepared:
        self._fill(n)
        t0 = time.perf_counter()
        try:
            return self.futures[n].result()
        finally:
            self._add("wait", time.perf_counter() - t0)  # the critical path: inputs not ready in time

    def done(self, n: int) -> None:
        """Trial n has been judged: its inputs go (a source when its last trial is done)."""
        t = self.plan.trials[n]
        fut = self.futures.pop(n, None)
        self.inflight -= self.cost.pop(n, 0)
        if t.kind in ("pair", "twin"):
            key = (t.case, t.dtype)
            left = self.users[key]
            left[0] -= t.kind == "pair"
            left[1] -= 1
            src = self.sources.get(key)
            if src is not None and src.done() and not src.exception() and left[0] == 0:
                src.result().parcel.close()  # its two pair calls are sent
            if left[1] == 0:
                self.sources.pop(key, None)
            if t.kind == "pair":
                return
        if fut is not None and fut.done() and not fut.exception():
            fut.result().close()

    def draw(self, case: ShapeCase, dtype: str, key: str) -> Tensors:
        """One input set of `case`: the read inputs (in, inout) the slot's generators make."""
        t0 = time.perf_counter()
        with draw_device(self.device):
            inputs = self.spec.make_inputs(case, dtype_of(dtype), seed_generator(draw_seed(self.secret, self.op_key, key)))
        self._add("draw", time.perf_counter() - t0)
        return {k: v for k, v in inputs.items() if self.spec.arg(k).role in ("in", "inout")}

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        for f in [*self.futures.values(), *self.sources.values()]:
            if f.done() and not f.cancelled() and not f.exception():
                f.result().close()
        self.futures.clear()
        self.sources.clear()
        if self.device is not None and self.device.startswith("cuda"):
            torch.cuda.empty_cache()  # this host process keeps no GPU memory past its verify

    # -- ahead of it ------------------------------------------------------------------------
    def _fill(self, n: int) -> None:
        trials = self.plan.trials
        while self.next < len(trials) and (
            self.next <= n or (self.next - n <= self.ahead and self.inflight + self._cost(self.next) <= self.budget)
        ):
            self._submit(self.next)
            self.next += 1

    def _cost(self, m: int) -> int:
        """Bytes trial m's job holds until done (drawn inputs and their sealed copy)."""
        t = self.plan.trials[m]
        one = input_bytes(self.spec, self.plan.planned[t.case].case, dtype_of(t.dtype))
        draws = {"pair": 0, "graph": 1 + self.plan.wanted.get(m, 0)}.get(t.kind, 1)
        if t.kind in ("pair", "twin") and (t.case, t.dtype) not in self.sources:
            draws += 1
        return 2 * one * draws

    def _submit(self, m: int) -> None:
        t = self.plan.trials[m]
        self.cost[m] = self._cost(m)
        self.inflight += self.cost[m]
        case = self.plan.planned[t.case].case
        if t.kind in ("pair", "twin"):
            key = (t.case, t.dtype)
            if key not in self.sources:
                self.sources[key] = self.pool.submit(self._prepare, case, t.dtype, None, f"pair/{t.case}/{t.dtype}")
            src = self.sources[key]
            self.futures[m] = src if t.kind == "pair" else self.pool.submit(self._twin, m, src)
        elif t.kind == "graph":
            self.futures[m] = self.pool.submit(self._graph, m)
        else:
            self.futures[m] = self.pool.submit(self._prepare, case, t.dtype, None, f"t{m}/fresh")

    def _prepare(self, case: ShapeCase, dtype: str, inputs: Tensors | None, key: str) -> Prepared:
        inputs = inputs if inputs is not None else self.draw(case, dtype, key)
        return Prepared(inputs, self._parcel(inputs), self._reference(inputs, case), self._digests(inputs))

    def _twin(self, m: int, source: Future) -> Prepared:
        t = self.plan.trials[m]
        case = self.plan.planned[t.case].case
        rows = self.plan.twin_rows[m]
        fresh = self.draw(case, t.dtype, f"t{m}/fresh")
        inputs = fresh if rows is None else mix(source.result().inputs, fresh, rows, t.mode)
        return self._prepare(case, t.dtype, inputs, "")

    def _graph(self, m: int) -> GraphPrepared:
        t = self.plan.trials[m]
        case = self.plan.planned[t.case].case
        capture = self.draw(case, t.dtype, f"t{m}/capture")
        dynamic = dynamic_args(self.spec)
        n = min(self.plan.wanted[m], replays_that_fit(capture, dynamic))
        if n < 1:
            return GraphPrepared(capture, None)
        tensors, replays = dict(capture), []
        for i in range(n):
            fresh = self.draw(case, t.dtype, f"t{m}/replay{i}")
            replays.append({k: (fresh[k] if k in dynamic else capture[k]) for k in capture})
            tensors.update({f"r{i}.{k}": fresh[k] for k in sorted(dynamic & set(fresh))})
        refs = [self._reference(r, case) for r in replays]
        t0 = time.perf_counter()
        final = {a.name: tensor_digest(replays[-1][a.name]) for a in self.spec.by_role("in")}
        self._add("digest", time.perf_counter() - t0)
        return GraphPrepared(capture, self._parcel(tensors), replays, refs, final)

    def _reference(self, inputs: Tensors, case: ShapeCase) -> Tensors:
        t0 = time.perf_counter()
        try:
            return self.spec.reference(inputs, case.params)
        finally:
            self._add("reference", time.perf_counter() - t0)

    def _digests(self, inputs: Tensors) -> dict[str, str]:
        """Digests of the read-only inputs the worker answers with a digest (judge.BIG_INPUT)."""
        t0 = time.perf_counter()
        out = {
            a.name: tensor_digest(inputs[a.name])
            for a in self.spec.by_role("in")
            if inputs[a.name].numel() * inputs[a.name].element_size() > BIG_INPUT
        }
        self._add("digest", time.perf_counter() - t0)
        return out

    def _parcel(self, tensors: Tensors) -> Parcel:
        t0 = time.perf_counter()
        parcel = Parcel(tensors)
        self._add("frame", time.perf_counter() - t0)
        return parcel

    def _add(self, what: str, seconds: float) -> None:
        with self.lock:
            self.timing[what] += seconds
