"""`cacheon verify`: everything a validator would reject, checked locally and in the same way.

Order: bundle rules + manifest (on load) -> static policy -> sandboxed import with a timeout ->
per op: the shapes of shapes.py (tier cases, every arena token count on CUDA, a sample on CPU)
in every claimed dtype, run as one shuffled schedule (trials.py) drawn from the secret seed: a
random number of calls per (shape, dtype), fresh inputs every call except one identical-input
pair (poisons 0/1: partial writes, determinism) and twins that share rows with it (memo keys),
read-only inputs, aliasing, NaN/Inf, tolerance vs the fp32 reference; torch.compile(fullgraph=
True) of the dispatch path and, on CUDA, graph capture + replays with new graph-dynamic values,
interleaved at random positions (the whole plan drawn first: opplan.py). Host threads draw each
trial's inputs, reference and digests ahead of it and send them as a sealed memfd (draws.py,
shm.py). Every request carries a nonce its reply must echo; the host judges the tensors it reads
back (op_trials.py, judge.py). A bundle whose code fails the static scan is never run.
Collective slots run the same gates on one sandboxed worker per rank (multirank.py), at the
slot's declared world sizes or at `world_size` when given.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from cacheon_subnet import sandbox
from cacheon_subnet.bundle import Bundle, OpEntry
from cacheon_subnet.env import VERIFY_DRAW_DEVICE
from cacheon_subnet.errors import UsageError
from cacheon_subnet.log import get_logger
from cacheon_subnet.slots import get_slot
from cacheon_subnet.slots.gen import usable_cpus
from cacheon_subnet.slots.spec import ShapeCase, SlotSpec, dtype_name
from cacheon_subnet.verify import judge
from cacheon_subnet.verify import protocol as P
from cacheon_subnet.verify.client import (
    WorkerClient,
    WorkerConfig,
    WorkerDied,
    WorkerTimeout,
)
from cacheon_subnet.verify.draws import Draws
from cacheon_subnet.verify.multirank import load_failure, plan_ranks, verify_collective
from cacheon_subnet.verify.native_gate import has_cuda, worker_artifacts
from cacheon_subnet.verify.op_trials import OpTrials as _OpTrials
from cacheon_subnet.verify.opplan import OpPlan, op_plan, trial_plan
from cacheon_subnet.verify.report import Failure, OpResult, VerifyReport
from cacheon_subnet.verify.shapes import ArenaShapes
from cacheon_subnet.verify.shm import Frame, Parcel
from cacheon_subnet.verify.static import bound as policy_bound
from cacheon_subnet.verify.trials import Budget
from native.diag import CompileRefused

log = get_logger("cacheon.verify")
__all__ = ["OpPlan", "VerifyOptions", "op_plan", "trial_plan", "verify_bundle"]


def draw_threads() -> int:
    """Jobs that draw inputs at once (each also draws large tensors on threads: slots/gen.py):
    every usable core but the one the trial loop and the worker's wire keep busy, at most 4."""
    return max(1, min(4, usable_cpus() - 1))


@dataclass(frozen=True)
class VerifyOptions:
    device: str = "cpu"
    tier: str | None = None  # default: "verify" on CPU, "gpu" on CUDA
    call_timeout_s: float = 120.0
    import_timeout_s: float = 120.0
    compile_check: bool = True
    graph_check: bool | None = None  # default: on for CUDA
    graph_replays: int = 3
    seed: int | None = None
    max_cases: int | None = None
    world_size: int | None = None  # collective slots only; default: each slot's declared world sizes
    draw_threads: int = field(default_factory=lambda: draw_threads())  # host threads drawing inputs ahead (0: inline)
    # where those threads draw the large normals (K/V pools): None on the host's cores; "cuda" on
    # this host process's GPU (opt-in, CACHEON_VERIFY_DRAW_DEVICE; never the worker's: it runs the bundle)
    draw_device: str | None = field(default_factory=VERIFY_DRAW_DEVICE.get)
    arena: ArenaShapes | None = None  # token counts an arena runs (cacheon verify --arena CONFIG)
    budget: Budget | None = None  # calls per case / soak; default by device (trials.py)
    policy: sandbox.SandboxPolicy = field(default_factory=sandbox.SandboxPolicy)
    # the whole verify's wall budget: a bundle that answers correctly but slowly, just under every
    # call's limit, must not hold the validator's (serial) screening stage for half an hour
    deadline_s: float | None = None
    deadline_at: float | None = None  # time.monotonic() at which it is spent (set by verify_bundle)
    # CUDA ops: (op key, sealed artifact dir), compiled by verify_bundle on the host before the worker starts
    native: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.draw_device is not None and self.draw_device != "cpu" and not self.draw_device.startswith("cuda"):
            raise UsageError(f"draw device {self.draw_device!r}: cpu or cuda[:N] ({VERIFY_DRAW_DEVICE.name})")

    @property
    def resolved_tier(self) -> str:
        return self.tier or ("gpu" if self.device.startswith("cuda") else "verify")

    def call_limit_s(self, limit: float | None = None) -> float:
        """One call's limit: `limit` (default call_timeout_s) or what is left of the wall budget;
        <= 0 once the budget is spent (the caller fails the op as `timeout`)."""
        limit = self.call_timeout_s if limit is None else limit
        return limit if self.deadline_at is None else min(limit, self.deadline_at - time.monotonic())

    def spent(self) -> str:
        return f"verify's wall budget of {self.deadline_s:g} s is spent (a correct but slow kernel still fails)"


def verify_bundle(bundle: Bundle, opts: VerifyOptions = VerifyOptions()) -> VerifyReport:
    t0 = time.monotonic()
    if opts.deadline_s is not None:
        opts = dataclasses.replace(opts, deadline_at=t0 + opts.deadline_s)
    plan = plan_ranks(bundle.manifest.ops, opts.world_size, opts.device)  # usage errors before anything runs
    seed = opts.seed if opts.seed is not None else secrets.randbits(62)
    findings = policy_bound.static_check(bundle).findings  # a bounded child; the screen's result when cached
    base: dict[str, Any] = dict(
        source=bundle.source, digest=bundle.digest, device=opts.device, tier=opts.resolved_tier, seed=seed
    )
    if findings:
        ops = tuple(
            _op_result(op, "FAIL", 0, 0, Failure("not_run", "static policy scan failed; code was not executed"))
            for op in bundle.manifest.ops
        )
        return VerifyReport(
            status="FAIL",
            reasons=(f"policy: {len(findings)} finding(s)",),
            findings=findings,
            ops=ops,
            duration_s=time.monotonic() - t0,
            **base,
        )
    refused = _native_refused(bundle, opts)
    if isinstance(refused, tuple):
        opts = dataclasses.replace(opts, native=refused)
    else:
        f = Failure("native", "; ".join(d.render() for d in refused.diagnostics)[:900])
        other = Failure("not_run", "a CUDA op of this bundle did not compile; code was not executed")
        ops = tuple(_op_result(op, "FAIL", 0, 0, f if op.cuda is not None else other) for op in bundle.manifest.ops)
        reasons = tuple(f"native: {d.render()}" for d in refused.diagnostics)
        return VerifyReport(status="FAIL", reasons=reasons, findings=(), ops=ops, duration_s=time.monotonic() - t0, **base)
    results, env = _run_all(bundle, opts, seed, plan)
    reasons = tuple(f"{r.key}: {r.failure}" for r in results if r.failure)
    status = "PASS" if results and not reasons else "FAIL"
    return VerifyReport(
        status=status, reasons=reasons, findings=(), ops=tuple(results), env=env, duration_s=time.monotonic() - t0, **base
    )


def _native_refused(bundle: Bundle, opts: VerifyOptions) -> tuple[tuple[str, str], ...] | CompileRefused:
    """The CUDA ops' artifacts for the worker (compiled here, on the host, behind the lane's wall),
    or the refusal (a FAIL with file:line). Given ones (a caller that compiled) are kept."""
    if opts.native or not has_cuda(bundle):
        return opts.native
    try:
        return worker_artifacts(bundle, opts.device)
    except CompileRefused as e:
        return e


def _run_all(
    bundle: Bundle, opts: VerifyOptions, seed: int, plan: dict[int, list[OpEntry]]
) -> tuple[list[OpResult], dict[str, Any]]:
    """Single-rank ops in one worker, collective ops per world size in rank groups; results in
    manifest order (an op checked at several world sizes reports its first failure)."""
    single = [op for op in bundle.manifest.ops if not get_slot(op.slot).collective]
    found: dict[str, list[OpResult]] = {}
    env: dict[str, Any] = {}
    if single:
        run = _Run(bundle, opts, seed, single)
        try:
            results, env = run.execute()
        finally:
            run.close()
        for r in results:
            found.setdefault(r.key, []).append(r)
    for world, ops in sorted(plan.items()):
        results, rank_env = verify_collective(bundle, ops, opts, seed, world)
        env = env or rank_env
        for r in results:
            found.setdefault(r.key, []).append(r)
    merged = []
    for op in bundle.manifest.ops:
        rs = found.get(op.key, [])
        if not rs:
            continue
        failed = [r for r in rs if r.failure]
        merged.append(failed[0] if failed else dataclasses.replace(rs[-1], calls=sum(r.calls for r in rs)))
    return merged, env


def _op_result(op: OpEntry, status: str, calls: int, cases: int, failure: Failure | None, tier: int = 0) -> OpResult:
    return OpResult(op.key, op.slot, op.entry, op.dtypes, status, calls, cases, failure, tier_cases=tier)


class _Run:
    def __init__(self, bundle: Bundle, opts: VerifyOptions, seed: int, ops: list[OpEntry] | None = None) -> None:
        self.bundle = bundle
        self.ops = tuple(ops) if ops is not None else bundle.manifest.ops
        self.opts = opts
        self.seed = seed
        self.calls = 0
        self._stage = ""
        self.digests: judge.DigestCache = {}  # the host's digests of large inputs it sent
        # where a verify spends its time (verify.timing): the trial loop's own ("worker": the round
        # trips, "digest": comparing digests) and, summed over the threads that draw ahead,
        # "draw", "reference", "draw_digest", "draw_frame"; "draw_wait": the loop waiting for them
        self.timing: dict[str, float] = dict.fromkeys(("draw", "worker", "digest", "reference"), 0.0)
        self.client = WorkerClient(bundle, WorkerConfig(device=opts.device, policy=opts.policy, native=opts.native))

    def close(self) -> None:
        self.client.cleanup()

    def execute(self) -> tuple[list[OpResult], dict[str, Any]]:
        ops = self.ops
        self.client.start()
        try:
            raw, _ = self.client.request(P.request(P.load_request(ops)), None, self.opts.import_timeout_s)
            reply = P.read_reply(raw, P.Loaded)
        except WorkerTimeout:  # the budget counts calls, not the import
            f = Failure("import_timeout", f"import did not finish within {self.opts.import_timeout_s:.0f} s")
            return [_op_result(o, "FAIL", 0, 0, f) for o in ops], {}
        except WorkerDied as e:
            return [_op_result(o, "FAIL", 0, 0, Failure("crashed", str(e)[-900:])) for o in ops], {}
        except P.ProtocolError as e:
            return [_op_result(o, "FAIL", 0, 0, Failure("protocol", f"malformed load reply: {e}"[:900])) for o in ops], {}
        results: list[OpResult] = []
        for op in ops:
            loaded = reply.results.get(op.key)
            if loaded is None or not loaded.ok:
                results.append(_op_result(op, "FAIL", 0, 0, load_failure(loaded)))
                continue
            if not self.client.alive:
                results.append(_op_result(op, "FAIL", 0, 0, Failure("not_run", "worker stopped after an earlier failure")))
                continue
            results.append(self.check_op(op))
        return results, dict(reply.env or {})  # worker-reported and informational: no verdict reads it

    # -- one op ----------------------------------------------------------------------------
    def check_op(self, op: OpEntry) -> OpResult:
        spec = get_slot(op.slot)
        plan = op_plan(spec, op, self.opts, self.seed)
        if not plan.planned:
            return _op_result(op, "FAIL", 0, 0, Failure("no_cases", f"constraints {op.constraints} exclude every shape"))
        start_calls = self.calls
        log.info(
            "verify.op",
            op=op.key,
            cases=len(plan.planned),
            dtypes=list(op.dtypes),
            trials=len(plan.trials),
            heavy=[p.case.label for p in plan.planned if p.heavy],
        )  # one dtype, pair + maybe a twin, no graph
        failure = None
        draws = Draws(spec, op.key, plan, self.seed, threads=self.opts.draw_threads, device=self.opts.draw_device)
        try:
            failure = _OpTrials(self, op, spec, plan, draws).run()
        except WorkerTimeout as e:
            failure = Failure("timeout", str(e), stage=self._stage)
        except WorkerDied as e:
            failure = Failure("crashed", str(e)[-900:], stage=self._stage)
        finally:
            draws.close()
            for k, v in draws.timing.items():  # host threads' seconds, summed; "wait": the trial loop's
                key = k if k in ("draw", "reference") else f"draw_{k}"
                self.timing[key] = self.timing.get(key, 0.0) + v
        status = "FAIL" if failure else "PASS"
        log.info(
            "verify.timing",
            op=op.key,
            status=status,
            calls=self.calls - start_calls,
            **{f"{k}_s": round(v, 2) for k, v in self.timing.items()},
        )  # where a slow verify spends its time
        tier = sum(p.origin == "tier" for p in plan.planned)
        return _op_result(op, status, self.calls - start_calls, len(plan.planned), failure, tier)

    def request(
        self, msg: dict[str, Any] | P.Call | P.Graph, tensors: dict[str, torch.Tensor] | None
    ) -> tuple[judge.Reply, dict[str, torch.Tensor]]:
        """One call or graph trial; the reply as the judge reads it (judge.Reply), refused as
        protocol when it is malformed, answers some other request (its nonce: replayed, queued
        ahead or pre-computed) or returns tensors nothing asked for.
        A typed request carries its nonce; a dict gets a fresh one."""
        sent = {**msg, "nonce": secrets.token_hex(16)} if isinstance(msg, dict) else P.request(msg)
        limit = self.opts.call_limit_s()
        if limit <= 0:
            raise WorkerTimeout(self.opts.spent())
        t0 = time.perf_counter()
        raw, out = self.client.request(sent, tensors, limit)
        self.timing["worker"] += time.perf_counter() - t0  # the wire both ways and the worker's own time
        reply = judge.decoded(raw)  # the worker runs the contribution: hostile input
        if reply.result is None:
            return reply, {}
        bad = judge.check_nonce(reply.result, sent["nonce"]) or judge.check_returned(sent, tensors or {}, out)
        return (judge.refuse(bad), {}) if bad else (reply, out)

    def call(
        self,
        op: OpEntry,
        spec: SlotSpec,
        act: torch.dtype,
        case: ShapeCase,
        inputs: dict[str, torch.Tensor],
        poison: int,
        watch_sync: bool,
        mode: str = "eager",
        noise: int = 0,
        frame: Frame | None = None,
        digests: dict[str, str] | None = None,
    ) -> tuple[judge.Reply, dict[str, torch.Tensor]]:
        """One call on `inputs` (the host's tensors, judged with): the worker gets `frame`, their
        sealed copy (made here when not given), and answers large read-only inputs with digests
        the host checks against `digests` (its own, made when it drew them) or its cache."""
        alloc = {
            a.name: P.Alloc(dtype_name(a.torch_dtype(act)), tuple(a.concrete_shape(case.dims)), poison, noise)
            for a in spec.args
            if a.role in ("out", "scratch")
        }
        msg = P.Call(op.key, dict(case.params), alloc, watch_sync, P.CallMode(mode), secrets.token_hex(16))
        self.calls += 1
        parcel = Parcel(inputs) if frame is None else None
        try:
            reply, tensors = self.request(msg, parcel.frame() if parcel is not None else frame)
        finally:
            if parcel is not None:
                parcel.close()
        if reply.result is None:
            return reply, {}
        bad = judge.check_digests(spec, reply.result)
        if bad:
            return judge.refuse(bad), {}
        self._worker_share(reply.result.worker_s)
        t0 = time.perf_counter()
        reply = judge.merge_digests(reply, tensors, inputs, self.digests, known=digests)
        self.timing["digest"] += time.perf_counter() - t0
        return reply, tensors

    def _worker_share(self, share: Mapping[str, float] | None) -> None:
        """The worker's own account of its part of a call (untrusted, only summed into the timing
        log): what is left of the round trip is the wire and the worker's receive."""
        if share is not None:
            for k in ("materialise", "invoke", "digest_and_copy"):
                v = share.get(k)
                if v is not None and 0 <= v < 1e6:
                    self.timing[f"worker_{k}"] = self.timing.get(f"worker_{k}", 0.0) + float(v)
