"""Runs one op's trial schedule (opplan.py) against the worker and judges every reply on the host.

The host generates every input and computes every reference (ahead of the trial: draws.py) and
decides from the output tensors it reads back alone; a reply's own flags can only fail a trial,
never pass one (judge.py).
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import torch

from cacheon_subnet import progress
from cacheon_subnet.bundle import OpEntry
from cacheon_subnet.log import get_logger
from cacheon_subnet.slots.spec import ShapeCase, SlotSpec, dtype_name, dtype_of
from cacheon_subnet.verify import judge
from cacheon_subnet.verify import protocol as P
from cacheon_subnet.verify.draws import Draws, GraphPrepared, Prepared
from cacheon_subnet.verify.opplan import GRAPH_FRAME_BYTES, OpPlan, replays_that_fit
from cacheon_subnet.verify.report import Failure
from cacheon_subnet.verify.trials import Trial

Tensors = dict[str, torch.Tensor]
log = get_logger(__name__)
__all__ = ["GRAPH_FRAME_BYTES", "OpTrials", "replays_that_fit"]


class OpTrials:
    def __init__(self, run: Any, op: OpEntry, spec: SlotSpec, plan: OpPlan, draws: Draws) -> None:
        self.run_ = run  # runner._Run: worker calls, counters, timing
        self.op, self.spec, self.plan, self.draws = op, spec, plan, draws
        self.n = 0
        self.got: dict[tuple[int, str], dict[int, Tensors]] = {}  # a pair's replies, by poison

    def run(self) -> Failure | None:
        with progress.bar(list(enumerate(self.plan.trials)), desc=f"verify {self.op.key}", unit="trial") as trials:
            for n, t in trials:
                self.n = n
                case = self.plan.planned[t.case].case
                self.run_._stage = f"{t.kind} {t.dtype} {case.label}"
                t0 = time.perf_counter()
                prepared = self.draws.get(n)
                f = getattr(self, f"_{t.kind}")(t, case, dtype_of(t.dtype), prepared)
                self.draws.done(n)
                log.debug(
                    "verify.trial",
                    op=self.op.key,
                    n=n,
                    of=len(self.plan.trials),
                    kind=t.kind,
                    dtype=t.dtype,
                    case=case.label,
                    s=round(time.perf_counter() - t0, 3),
                    failed=bool(f),
                )
                if f:
                    return f
        return None

    def _where(self, f: Failure, stage: str, t: Trial, case: ShapeCase) -> Failure:
        return Failure(f.reason, f.detail, case=case.label, dtype=t.dtype, stage=stage)

    def _call(
        self, case: ShapeCase, act: torch.dtype, p: Prepared, poison: int, watch: bool, mode: str = "eager", noise: int = 0
    ) -> tuple[judge.Reply, Tensors]:
        return self.run_.call(
            self.op,
            self.spec,
            act,
            case,
            p.inputs,
            poison,
            watch,
            mode=mode,
            noise=noise,
            frame=p.parcel.frame(),
            digests=p.digests,
        )

    # -- trials -----------------------------------------------------------------------------
    def _pair(self, t: Trial, case: ShapeCase, act: torch.dtype, p: Prepared) -> Failure | None:
        reply, tensors = self._call(case, act, p, t.poison, t.watch)
        f = judge.check_reply(reply)
        if f:
            return self._where(f, "eager", t, case)
        got = self.got.setdefault((t.case, t.dtype), {})
        got[t.poison] = tensors
        if len(got) == 2:
            f = judge.check_pair(self.spec, t.dtype, p.inputs, got[0], got[1], p.ref)
            got.clear()
            if f:
                return self._where(f, "eager", t, case)
        return None

    def _fresh(self, t: Trial, case: ShapeCase, act: torch.dtype, p: Prepared, stage: str = "eager-fresh") -> Failure | None:
        reply, tensors = self._call(case, act, p, t.poison, t.watch, noise=secrets.randbits(31))
        f = (
            judge.check_reply(reply)
            or judge.check_inputs_untouched(self.spec, p.inputs, tensors)
            or judge.check_outputs(self.spec, t.dtype, tensors, p.ref)
        )
        if f and f.reason in ("mismatch", "nan_inf"):
            f = self._diagnose(f, case, act, p)
        return self._where(f, stage, t, case) if f else None

    def _diagnose(self, f: Failure, case: ShapeCase, act: torch.dtype, p: Prepared) -> Failure:
        """The trial already failed: one more call on the same inputs with poison 1 tells an
        unwritten output (partial_write) from a wrong one. It can only rename the failure."""
        reply, tensors = self._call(case, act, p, 1, False)
        why = judge.still_poisoned(self.spec, tensors) if reply.ok else None
        return Failure("partial_write", why) if why else f

    def _twin(self, t: Trial, case: ShapeCase, act: torch.dtype, p: Prepared) -> Failure | None:
        """Inputs sharing rows with the pair's (drawn ahead: verify/draws.py); a fresh set when
        the mixture would equal them."""
        mixed = self.plan.twin_rows[self.n] is not None
        return self._fresh(t, case, act, p, stage=f"eager-twin-{t.mode}" if mixed else "eager-fresh")

    def _compile(self, t: Trial, case: ShapeCase, act: torch.dtype, p: Prepared) -> Failure | None:
        reply, tensors = self._call(case, act, p, 0, False, mode="compile")
        f = judge.check_reply(reply)
        if f:
            reason = f.reason
            if reason == "exception":  # the kernel itself, or only under torch.compile? (trial order is random)
                inputs = self.draws.draw(case, t.dtype, f"t{self.n}/retry")
                eager, _ = self.run_.call(self.op, self.spec, act, case, inputs, 0, False)
                e = judge.check_reply(eager)
                if e is not None and e.reason == "exception":
                    return Failure(
                        "exception", e.detail, stage="eager (after a failed compile trial)", case=case.label, dtype=t.dtype
                    )
                reason = "compile"
            return Failure(reason, f.detail, stage="compile", case=case.label, dtype=t.dtype)
        f = judge.check_outputs(self.spec, t.dtype, tensors, p.ref)
        if f and f.reason in ("mismatch", "nan_inf"):  # name an unwritten output as eager trials do
            f = self._diagnose(f, case, act, p)
        return self._where(f, "compile", t, case) if f else None

    def _graph(self, t: Trial, case: ShapeCase, act: torch.dtype, g: GraphPrepared) -> Failure | None:
        """Capture one call in a CUDA graph, replay it with new values in the graph-dynamic inputs
        (as many replays as the plan drew and the frame holds); every replay's outputs are judged
        against its own reference."""
        spec = self.spec
        # no replays (and so no parcel): the frame would pass the wire's limit and the worker would
        # die on it, which is not the kernel's doing
        if not g.replays or g.parcel is None:
            log.warning(
                "verify.graph_skipped",
                op=self.op.key,
                case=case.label,
                dtype=t.dtype,
                why=f"the capture alone exceeds {GRAPH_FRAME_BYTES} bytes",
            )
            return None
        alloc = {
            a.name: P.Alloc(dtype_name(a.torch_dtype(act)), tuple(a.concrete_shape(case.dims)), 0)
            for a in spec.args
            if a.role in ("out", "scratch")
        }
        msg = P.Graph(self.op.key, dict(case.params), alloc, len(g.replays), secrets.token_hex(16))
        self.run_.calls += 1 + len(g.replays)
        reply, out = self.run_.request(msg, g.parcel.frame())
        f = reply.refused or judge.check_reply(reply)
        if f:
            return self._where(f, "graph", t, case)
        f = judge.check_graph_keys(spec, out, len(g.replays)) or judge.check_graph_inputs(
            spec, reply, g.replays[-1], known=g.final
        )
        if f:
            return self._where(f, "graph", t, case)
        for i, ref in enumerate(g.refs):
            got = {k.split(".", 1)[1]: v for k, v in out.items() if k.startswith(f"r{i}.")}
            f = judge.check_outputs(spec, t.dtype, got, ref)
            if f:
                return Failure("graph_replay", f"replay {i}: {f}", stage="graph", case=case.label, dtype=t.dtype)
        return None
