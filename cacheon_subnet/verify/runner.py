"""`cacheon verify`: everything a validator would reject, checked locally and in the same way.

Order: bundle rules + manifest (on load) -> static policy -> sandboxed import with a timeout ->
per op, dtype and workload shape: fresh inputs every trial, poisoned outputs, read-only
inputs, aliasing, NaN/Inf, tolerance vs the fp32 reference, run-to-run determinism ->
torch.compile(fullgraph=True) of the dispatch path -> on CUDA, graph capture + replay with
new values in the graph-dynamic inputs. A bundle whose code fails the static scan is never run.
Collective slots run the same gates on one sandboxed worker per rank (multirank.py), at the
slot's declared world sizes or at `world_size` when given.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from cacheon_subnet.bundle import Bundle, OpEntry
from cacheon_subnet.log import get_logger
from cacheon_subnet.slots import get_slot
from cacheon_subnet.slots.gen import seed_generator
from cacheon_subnet.slots.spec import ShapeCase, SlotSpec, dtype_name, dtype_of
from cacheon_subnet.tensor_views import rebase
from cacheon_subnet.verify import judge, policy
from cacheon_subnet.verify.client import WorkerClient, WorkerConfig, WorkerDied, WorkerTimeout
from cacheon_subnet.verify.gates import graph_enabled, run_gates, select_cases
from cacheon_subnet.verify.multirank import plan_ranks, verify_collective
from cacheon_subnet.verify.report import Failure, OpResult, VerifyReport
from cacheon_subnet import sandbox

log = get_logger("cacheon.verify")


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
    policy: sandbox.SandboxPolicy = field(default_factory=sandbox.SandboxPolicy)

    @property
    def resolved_tier(self) -> str:
        return self.tier or ("gpu" if self.device.startswith("cuda") else "verify")


def verify_bundle(bundle: Bundle, opts: VerifyOptions = VerifyOptions()) -> VerifyReport:
    t0 = time.monotonic()
    plan = plan_ranks(bundle.manifest.ops, opts.world_size, opts.device)  # usage errors before anything runs
    seed = opts.seed if opts.seed is not None else secrets.randbits(62)
    findings = tuple(str(f) for f in policy.scan_files(bundle.files))
    base = dict(source=bundle.source, digest=bundle.digest, device=opts.device, tier=opts.resolved_tier, seed=seed)
    if findings:
        ops = tuple(_op_result(op, "FAIL", 0, 0, Failure("not_run", "static policy scan failed; code was not executed"))
                    for op in bundle.manifest.ops)
        return VerifyReport(status="FAIL", reasons=(f"policy: {len(findings)} finding(s)",), findings=findings, ops=ops,
                            duration_s=time.monotonic() - t0, **base)
    results, env = _run_all(bundle, opts, seed, plan)
    reasons = tuple(f"{r.key}: {r.failure}" for r in results if r.failure)
    status = "PASS" if results and not reasons else "FAIL"
    return VerifyReport(status=status, reasons=reasons, findings=(), ops=tuple(results), env=env,
                        duration_s=time.monotonic() - t0, **base)


def _run_all(bundle: Bundle, opts: VerifyOptions, seed: int, plan: dict[int, list[OpEntry]]
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


def _op_result(op: OpEntry, status: str, calls: int, cases: int, failure: Failure | None) -> OpResult:
    return OpResult(op.key, op.slot, op.entry, op.dtypes, status, calls, cases, failure)


class _Run:
    def __init__(self, bundle: Bundle, opts: VerifyOptions, seed: int, ops: list[OpEntry] | None = None) -> None:
        self.bundle = bundle
        self.ops = tuple(ops) if ops is not None else bundle.manifest.ops
        self.opts = opts
        self.seed = seed
        self.counter = 0
        self.calls = 0
        self.client = WorkerClient(bundle, WorkerConfig(device=opts.device, policy=opts.policy))

    def close(self) -> None:
        self.client.cleanup()

    def generator(self) -> torch.Generator:
        self.counter += 1
        return seed_generator((self.seed + 7919 * self.counter) % (2**62))

    def execute(self) -> tuple[list[OpResult], dict[str, Any]]:
        ops = self.ops
        self.client.start()
        msg = {"type": "load", "ops": [{"key": o.key, "slot": o.slot, "module": o.module, "attr": o.attr} for o in ops]}
        try:
            reply, _ = self.client.request(msg, None, self.opts.import_timeout_s)
        except WorkerTimeout:
            f = Failure("import_timeout", f"import did not finish within {self.opts.import_timeout_s:.0f} s")
            return [_op_result(o, "FAIL", 0, 0, f) for o in ops], {}
        except WorkerDied as e:
            return [_op_result(o, "FAIL", 0, 0, Failure("crashed", str(e)[-900:])) for o in ops], {}
        results: list[OpResult] = []
        for op in ops:
            loaded = reply["results"][op.key]
            if not loaded["ok"]:
                results.append(_op_result(op, "FAIL", 0, 0, Failure(loaded["reason"], loaded["error"])))
                continue
            if not self.client.alive:
                results.append(_op_result(op, "FAIL", 0, 0, Failure("not_run", "worker stopped after an earlier failure")))
                continue
            results.append(self.check_op(op))
        return results, reply.get("env", {})

    # -- one op ----------------------------------------------------------------------------
    def check_op(self, op: OpEntry) -> OpResult:
        spec = get_slot(op.slot)
        cases = select_cases(spec, op, self.opts.resolved_tier, self.opts.max_cases)
        if not cases:
            return _op_result(op, "FAIL", 0, 0, Failure("no_cases", f"constraints {op.constraints} exclude every shape"))
        start_calls = self.calls
        log.info("verify.op", op=op.key, cases=len(cases), dtypes=list(op.dtypes))
        failure = None
        try:
            failure = self._check_all(op, spec, cases)
        except WorkerTimeout as e:
            failure = Failure("timeout", str(e), stage=getattr(self, "_stage", ""))
        except WorkerDied as e:
            failure = Failure("crashed", str(e)[-900:], stage=getattr(self, "_stage", ""))
        status = "FAIL" if failure else "PASS"
        return _op_result(op, status, self.calls - start_calls, len(cases), failure)

    def _check_all(self, op: OpEntry, spec: SlotSpec, cases: list[ShapeCase]) -> Failure | None:
        return run_gates(op.dtypes, cases, compile_check=self.opts.compile_check,
                         graph_check=graph_enabled(self.opts.graph_check, self.opts.device),
                         eager=lambda act, c: self._eager_trials(op, spec, act, c),
                         compile_trial=lambda act, c: self._compile_trial(op, spec, act, c),
                         graph_trial=lambda act, c: self._graph_trial(op, spec, act, c))

    def _call(self, op: OpEntry, spec: SlotSpec, act: torch.dtype, case: ShapeCase, inputs: dict[str, torch.Tensor],
              poison: int, watch_sync: bool, mode: str = "eager") -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        alloc = {a.name: {"dtype": dtype_name(a.torch_dtype(act)), "shape": list(a.concrete_shape(case.dims)), "poison": poison}
                 for a in spec.args if a.role in ("out", "scratch")}
        msg = {"type": "call", "op": op.key, "params": dict(case.params), "alloc": alloc, "watch_sync": watch_sync, "mode": mode}
        self.calls += 1
        reply, tensors = self.client.request(msg, inputs, self.opts.call_timeout_s)
        judge.merge_digests(reply, tensors, inputs)
        return reply, tensors

    def _inputs(self, spec: SlotSpec, case: ShapeCase, act: torch.dtype) -> dict[str, torch.Tensor]:
        inputs = spec.make_inputs(case, act, self.generator())
        return {k: v for k, v in inputs.items() if spec.arg(k).role in ("in", "inout")}

    def _eager_trials(self, op: OpEntry, spec: SlotSpec, act_name: str, case: ShapeCase) -> Failure | None:
        act = dtype_of(act_name)
        where = dict(case=case.label, dtype=act_name)
        self._stage = f"eager {act_name} {case.label}"
        inputs = self._inputs(spec, case, act)
        ref = spec.reference(inputs, case.params)
        got = []
        for poison, watch in ((0, False), (1, True)):
            reply, tensors = self._call(op, spec, act, case, rebase(inputs), poison, watch)
            f = judge.check_reply(reply)
            if f:
                return Failure(f.reason, f.detail, stage="eager", **where)
            got.append(tensors)
        f = judge.check_pair(spec, act_name, inputs, got[0], got[1], ref)
        if f:
            return Failure(f.reason, f.detail, stage="eager", **where)
        fresh = self._inputs(spec, case, act)
        reply, tensors = self._call(op, spec, act, case, rebase(fresh), 0, True)
        f = judge.check_reply(reply) or judge.check_inputs_untouched(spec, fresh, tensors) or judge.check_outputs(
            spec, act_name, tensors, spec.reference(fresh, case.params))
        return Failure(f.reason, f.detail, stage="eager-fresh", **where) if f else None

    def _compile_trial(self, op: OpEntry, spec: SlotSpec, act_name: str, case: ShapeCase) -> Failure | None:
        act = dtype_of(act_name)
        self._stage = f"compile {act_name} {case.label}"
        inputs = self._inputs(spec, case, act)
        reply, tensors = self._call(op, spec, act, case, rebase(inputs), 0, False, mode="compile")
        f = judge.check_reply(reply)
        if f:
            reason = "compile" if f.reason == "exception" else f.reason
            return Failure(reason, f.detail, stage="compile", case=case.label, dtype=act_name)
        f = judge.check_outputs(spec, act_name, tensors, spec.reference(inputs, case.params))
        return Failure(f.reason, f.detail, stage="compile", case=case.label, dtype=act_name) if f else None

    def _graph_trial(self, op: OpEntry, spec: SlotSpec, act_name: str, case: ShapeCase) -> Failure | None:
        act = dtype_of(act_name)
        self._stage = f"graph {act_name} {case.label}"
        capture = self._inputs(spec, case, act)
        dynamic = {a.name for a in spec.args if a.graph_dynamic or a.role == "inout"}
        tensors = rebase(capture)
        replays = []
        for i in range(self.opts.graph_replays):
            fresh = self._inputs(spec, case, act)
            merged = {k: (fresh[k] if k in dynamic else capture[k]) for k in capture}
            replays.append(merged)
            for k, v in rebase({k: fresh[k] for k in sorted(dynamic & set(fresh))}).items():
                tensors[f"r{i}.{k}"] = v
        alloc = {a.name: {"dtype": dtype_name(a.torch_dtype(act)), "shape": list(a.concrete_shape(case.dims)), "poison": 0}
                 for a in spec.args if a.role in ("out", "scratch")}
        msg = {"type": "graph", "op": op.key, "params": dict(case.params), "alloc": alloc, "replays": len(replays)}
        self.calls += 1 + len(replays)
        reply, out = self.client.request(msg, tensors, self.opts.call_timeout_s)
        f = judge.check_reply(reply)
        if f:
            return Failure(f.reason, f.detail, stage="graph", case=case.label, dtype=act_name)
        for i, merged in enumerate(replays):
            got = {k.split(".", 1)[1]: v for k, v in out.items() if k.startswith(f"r{i}.")}
            f = judge.check_outputs(spec, act_name, got, spec.reference(merged, case.params))
            if f:
                return Failure("graph_replay", f"replay {i}: {f}", stage="graph", case=case.label, dtype=act_name)
        return None
