"""Runs one op's trial schedule (trials.py) against the worker and judges every reply on the host.

The host generates every input, computes every reference and decides from the output tensors it
reads back alone; a reply's own flags can only fail a trial, never pass one (judge.py).
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from cacheon_subnet import progress
from cacheon_subnet.bundle import OpEntry
from cacheon_subnet.log import get_logger
from cacheon_subnet.slots.spec import ShapeCase, SlotSpec, dtype_name, dtype_of
from cacheon_subnet.tensor_views import rebase
from cacheon_subnet.verify import judge, wire
from cacheon_subnet.verify.report import Failure
from cacheon_subnet.verify.trials import Trial, twin

Tensors = dict[str, torch.Tensor]
log = get_logger(__name__)


# A graph trial sends its capture and every replay's fresh dynamic inputs in one frame; the
# worker refuses frames over wire.MAX_MESSAGE (4 GiB), and the host holds a few copies of it.
GRAPH_FRAME_BYTES = wire.MAX_MESSAGE // 2


def replays_that_fit(capture: Tensors, dynamic: set[str], budget: int | None = None) -> int:
    """How many replays of fresh dynamic inputs fit one graph-trial frame beside the capture
    (storage sizes: an upper bound, a view such as the engine's strided q sends its storage)."""
    budget = GRAPH_FRAME_BYTES if budget is None else budget
    size = {k: v.untyped_storage().nbytes() for k, v in capture.items()}
    per_replay = sum(n for k, n in size.items() if k in dynamic)
    room = budget - sum(size.values())
    if room < 0:
        return 0
    return room // per_replay if per_replay else 1 << 30


@dataclass
class _Pair:
    """The identical-input pair of one (case, dtype): its inputs, reference and both replies."""

    inputs: Tensors
    ref: Tensors
    got: dict[int, Tensors] = field(default_factory=dict)  # by poison
    left: int = 0  # trials of this (case, dtype) still to come that need the inputs


class OpTrials:
    def __init__(self, run: Any, op: OpEntry, spec: SlotSpec, cases: Sequence[ShapeCase], plan: Sequence[Trial],
                 rng: random.Random) -> None:
        self.run_ = run  # runner._Run: worker calls, input generation, counters
        self.op, self.spec, self.cases, self.plan, self.rng = op, spec, list(cases), list(plan), rng
        self.pairs: dict[tuple[int, str], _Pair] = {}
        self.left: dict[tuple[int, str], int] = {}
        for t in self.plan:
            if t.kind in ("pair", "twin"):
                self.left[(t.case, t.dtype)] = self.left.get((t.case, t.dtype), 0) + 1

    def run(self) -> Failure | None:
        with progress.bar(self.plan, desc=f"verify {self.op.key}", unit="trial") as trials:
            for i, t in enumerate(trials):
                case = self.cases[t.case]
                self.run_._stage = f"{t.kind} {t.dtype} {case.label}"
                t0 = time.perf_counter()
                f = getattr(self, f"_{t.kind}")(t, case, dtype_of(t.dtype))
                log.debug("verify.trial", op=self.op.key, n=i, of=len(self.plan), kind=t.kind, dtype=t.dtype,
                         case=case.label, s=round(time.perf_counter() - t0, 3), failed=bool(f))
                if f:
                    return f
        return None

    def _reference(self, inputs: Tensors, params: Any) -> Tensors:
        t0 = time.perf_counter()
        try:
            return self.spec.reference(inputs, params)
        finally:
            self.run_.timing["reference"] += time.perf_counter() - t0

    def _where(self, f: Failure, stage: str, t: Trial, case: ShapeCase) -> Failure:
        return Failure(f.reason, f.detail, case=case.label, dtype=t.dtype, stage=stage)

    def _pair_state(self, t: Trial, case: ShapeCase, act: torch.dtype) -> _Pair:
        key = (t.case, t.dtype)
        if key not in self.pairs:
            inputs = self.run_.inputs(self.spec, case, act)
            self.pairs[key] = _Pair(inputs, self._reference(inputs, case.params))
        return self.pairs[key]

    def _done_with(self, t: Trial) -> None:
        key = (t.case, t.dtype)
        self.left[key] -= 1
        if self.left[key] == 0:
            self.pairs.pop(key, None)  # large inputs do not outlive their last use

    # -- trials -----------------------------------------------------------------------------
    def _pair(self, t: Trial, case: ShapeCase, act: torch.dtype) -> Failure | None:
        pair = self._pair_state(t, case, act)
        reply, tensors = self.run_.call(self.op, self.spec, act, case, pair.inputs, t.poison, t.watch)
        f = judge.check_reply(reply)
        if f:
            return self._where(f, "eager", t, case)
        pair.got[t.poison] = tensors
        if len(pair.got) == 2:
            f = judge.check_pair(self.spec, t.dtype, pair.inputs, pair.got[0], pair.got[1], pair.ref)
            pair.got.clear()
            if f:
                return self._where(f, "eager", t, case)
        self._done_with(t)
        return None

    def _fresh(self, t: Trial, case: ShapeCase, act: torch.dtype, inputs: Tensors | None = None,
               stage: str = "eager-fresh") -> Failure | None:
        inputs = inputs if inputs is not None else self.run_.inputs(self.spec, case, act)
        reply, tensors = self.run_.call(self.op, self.spec, act, case, inputs, t.poison, t.watch,
                                        noise=secrets.randbits(31))
        f = judge.check_reply(reply) or judge.check_inputs_untouched(self.spec, inputs, tensors) \
            or judge.check_outputs(self.spec, t.dtype, tensors, self._reference(inputs, case.params))
        if f and f.reason in ("mismatch", "nan_inf"):
            f = self._diagnose(f, case, act, inputs)
        return self._where(f, stage, t, case) if f else None

    def _diagnose(self, f: Failure, case: ShapeCase, act: torch.dtype, inputs: Tensors) -> Failure:
        """The trial already failed: one more call on the same inputs with poison 1 tells an
        unwritten output (partial_write) from a wrong one. It can only rename the failure."""
        reply, tensors = self.run_.call(self.op, self.spec, act, case, inputs, 1, False)
        why = judge.still_poisoned(self.spec, tensors) if reply.get("ok") is True else None
        return Failure("partial_write", why) if why else f

    def _twin(self, t: Trial, case: ShapeCase, act: torch.dtype) -> Failure | None:
        source = self._pair_state(t, case, act).inputs
        mixed = twin(source, self.run_.inputs(self.spec, case, act), self.rng, t.mode)
        self._done_with(t)
        return self._fresh(t, case, act, mixed, stage=f"eager-twin-{t.mode}" if mixed is not None else "eager-fresh")

    def _compile(self, t: Trial, case: ShapeCase, act: torch.dtype) -> Failure | None:
        inputs = self.run_.inputs(self.spec, case, act)
        reply, tensors = self.run_.call(self.op, self.spec, act, case, inputs, 0, False, mode="compile")
        f = judge.check_reply(reply)
        if f:
            reason = f.reason
            if reason == "exception":  # the kernel itself, or only under torch.compile? (trial order is random)
                eager, _ = self.run_.call(self.op, self.spec, act, case, self.run_.inputs(self.spec, case, act), 0, False)
                e = judge.check_reply(eager)
                if e is not None and e.reason == "exception":
                    return Failure("exception", e.detail, stage="eager (after a failed compile trial)",
                                   case=case.label, dtype=t.dtype)
                reason = "compile"
            return Failure(reason, f.detail, stage="compile", case=case.label, dtype=t.dtype)
        f = judge.check_outputs(self.spec, t.dtype, tensors, self._reference(inputs, case.params))
        if f and f.reason in ("mismatch", "nan_inf"):  # name an unwritten output as eager trials do
            f = self._diagnose(f, case, act, inputs)
        return self._where(f, "compile", t, case) if f else None

    def _graph(self, t: Trial, case: ShapeCase, act: torch.dtype) -> Failure | None:
        """Capture one call in a CUDA graph, replay it a random number of times with new values
        in the graph-dynamic inputs; every replay's outputs are judged against its own reference."""
        spec, opts = self.spec, self.run_.opts
        capture = self.run_.inputs(spec, case, act)
        dynamic = {a.name for a in spec.args if a.graph_dynamic or a.role == "inout"}
        tensors = rebase(capture)
        replays = []
        wanted = self.rng.randint(opts.graph_replays, 2 * opts.graph_replays)
        n = min(wanted, replays_that_fit(capture, dynamic))
        if n < 1:  # the frame would pass the wire's limit and the worker would die on it: not the kernel's doing
            log.warning("verify.graph_skipped", op=self.op.key, case=case.label, dtype=t.dtype,
                        why=f"the capture alone exceeds {GRAPH_FRAME_BYTES} bytes")
            return None
        for i in range(n):
            fresh = self.run_.inputs(spec, case, act)
            merged = {k: (fresh[k] if k in dynamic else capture[k]) for k in capture}
            replays.append(merged)
            for k, v in rebase({k: fresh[k] for k in sorted(dynamic & set(fresh))}).items():
                tensors[f"r{i}.{k}"] = v
        alloc = {a.name: {"dtype": dtype_name(a.torch_dtype(act)), "shape": list(a.concrete_shape(case.dims)), "poison": 0}
                 for a in spec.args if a.role in ("out", "scratch")}
        msg = {"type": "graph", "op": self.op.key, "params": dict(case.params), "alloc": alloc, "replays": len(replays)}
        self.run_.calls += 1 + len(replays)
        reply, out, bad = self.run_.request(msg, tensors)
        f = bad or judge.check_reply(reply)
        if f:
            return self._where(f, "graph", t, case)
        f = judge.check_graph_keys(spec, out, len(replays)) or \
            judge.check_graph_inputs(spec, reply, replays[-1] if replays else capture)
        if f:
            return self._where(f, "graph", t, case)
        for i, merged in enumerate(replays):
            got = {k.split(".", 1)[1]: v for k, v in out.items() if k.startswith(f"r{i}.")}
            f = judge.check_outputs(spec, t.dtype, got, self._reference(merged, case.params))
            if f:
                return Failure("graph_replay", f"replay {i}: {f}", stage="graph", case=case.label, dtype=t.dtype)
        return None
