"""Collective verify: every trial runs on all ranks at once and is judged rank by rank.

Same gates as single-rank verify (runner.py), applied to each rank's own arguments: fresh
per-rank inputs every trial, poisoned outputs (two runs, two poisons), read-only inputs, NaN/Inf,
tolerance against the fp32 reference computed from *all* ranks' inputs, run-to-run
determinism, torch.compile of the dispatch op, CUDA graph replay on CUDA. Plus one gate only a
collective has: outputs the slot declares replicated must be bit-identical on every rank. A
failure names the rank it was seen on; a stuck rank (e.g. one that skipped the collective the
others entered) ends the run by timeout and every rank process is killed (ranks.py).
"""

from __future__ import annotations

import dataclasses
import random
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from cacheon_subnet.bundle import Bundle, OpEntry
from cacheon_subnet.errors import UsageError
from cacheon_subnet.log import get_logger
from cacheon_subnet.slots import get_slot
from cacheon_subnet.slots.gen import seed_generator
from cacheon_subnet.slots.spec import ShapeCase, SlotSpec, dtype_name, dtype_of
from cacheon_subnet.tensor_views import rebase
from cacheon_subnet.verify import judge
from cacheon_subnet.verify import protocol as P
from cacheon_subnet.verify.client import WorkerConfig
from cacheon_subnet.verify.gates import graph_enabled, run_gates, select_cases
from cacheon_subnet.verify.ranks import RankDied, RankGroup, RankTimeout
from cacheon_subnet.verify.report import Failure, OpResult
from cacheon_subnet.verify.shapes import plan_cases

log = get_logger("cacheon.verify")
MAX_WORLD = 8
PerRank = list[dict[str, torch.Tensor]]
Judged = tuple[judge.Reply, dict[str, torch.Tensor]]  # a rank's reply as the judge reads it, its tensors


def plan_ranks(ops: Sequence[OpEntry], world_size: int | None, device: str = "cpu") -> dict[int, list[OpEntry]]:
    """{world size: collective ops to check at it}. Default: each slot's declared world sizes.
    An explicit `world_size` must name a collective-only bundle and at least 2 ranks."""
    collective = [op for op in ops if get_slot(op.slot).collective]
    if world_size is None:
        plan: dict[int, list[OpEntry]] = {}
        for op in collective:
            for ws in get_slot(op.slot).world_sizes:
                plan.setdefault(ws, []).append(op)
        return plan
    single = sorted({op.slot for op in ops if op not in collective})
    if single:
        raise UsageError(
            f"--world-size is for collective slots only; {', '.join(single)} run(s) on one rank (drop --world-size)"
        )
    if world_size < 2 or world_size > MAX_WORLD:
        declared = sorted({ws for op in collective for ws in get_slot(op.slot).world_sizes})
        raise UsageError(
            f"--world-size {world_size}: collective slot(s) {', '.join(sorted({o.slot for o in collective}))} "
            f"need 2..{MAX_WORLD} ranks (they declare {declared})"
        )
    if device.startswith("cuda"):
        have = torch.cuda.device_count()
        if world_size > have:
            raise UsageError(f"--world-size {world_size} needs {world_size} GPUs, {have} visible")
    return {world_size: list(collective)}


def verify_collective(
    bundle: Bundle, ops: Sequence[OpEntry], opts: Any, seed: int, world_size: int
) -> tuple[list[OpResult], dict[str, Any]]:
    """Check `ops` on `world_size` ranks (opts: runner.VerifyOptions). Too few GPUs for a slot's
    declared world size fails closed (not_run), it never shrinks the world."""
    have = torch.cuda.device_count() if opts.device.startswith("cuda") else world_size
    if have < world_size:
        f = Failure(
            "not_run",
            f"needs {world_size} GPUs (one per rank), {have} visible; "
            "verify on --device cpu (gloo) or on a host with enough GPUs",
        )
        return [OpResult(op.key, op.slot, op.entry, op.dtypes, "FAIL", 0, 0, f, world_size) for op in ops], {}
    run = _RankRun(bundle, ops, opts, seed, world_size)
    try:
        return run.execute()
    finally:
        run.group.cleanup()


def _at(f: Failure, rank: int | None = None, **where: str) -> Failure:
    detail = f.detail if rank is None or f.detail.startswith(f"rank {rank}") else f"rank {rank}: {f.detail}"
    return dataclasses.replace(f, detail=detail, rank=f.rank if rank is None else rank, **where)


def _each(n: int, check: Callable[[int], Failure | None]) -> Failure | None:
    """The first failure over ranks 0..n-1, tagged with its rank."""
    for r in range(n):
        f = check(r)
        if f:
            return _at(f, r)
    return None


class _RankRun:
    def __init__(self, bundle: Bundle, ops: Sequence[OpEntry], opts: Any, seed: int, world_size: int) -> None:
        self.ops = tuple(ops)
        self.opts = opts
        self.seed = seed
        self.world = world_size
        self.counter = 0
        self.calls = 0
        self._stage = ""
        config = WorkerConfig(device=opts.device, policy=opts.policy)
        # the group's own timeout outlives the host's deadline: the host names the stuck rank first
        self.group = RankGroup(bundle, config, world_size, pg_timeout_s=opts.call_timeout_s + 60)

    def result(self, op: OpEntry, status: str, calls: int, cases: int, failure: Failure | None) -> OpResult:
        return OpResult(op.key, op.slot, op.entry, op.dtypes, status, calls, cases, failure, self.world, tier_cases=cases)

    def execute(self) -> tuple[list[OpResult], dict[str, Any]]:
        self.group.start()
        msg = P.request(P.load_request(self.ops))
        replies: list[P.Loaded] = []
        try:
            answers = self.group.request_all([msg] * self.world, [None] * self.world, self.opts.import_timeout_s)
            for raw, _ in answers:
                replies.append(P.read_reply(raw, P.Loaded))
        except RankTimeout as e:
            f = Failure("import_timeout", f"import / process-group rendezvous: {e}", rank=e.ranks[0])
            return [self.result(o, "FAIL", 0, 0, f) for o in self.ops], {}
        except RankDied as e:
            return [self.result(o, "FAIL", 0, 0, Failure("crashed", str(e)[-900:], rank=e.rank)) for o in self.ops], {}
        except P.ProtocolError as e:
            rank = len(replies)  # the first whose reply did not decode
            f = Failure("protocol", f"rank {rank}: malformed load reply: {e}"[:900], rank=rank)
            return [self.result(o, "FAIL", 0, 0, f) for o in self.ops], {}
        results = []
        for op in self.ops:
            bad = next(((r, rep.results.get(op.key)) for r, rep in enumerate(replies) if not _loaded(rep, op.key)), None)
            if bad is not None:
                r, loaded = bad
                results.append(self.result(op, "FAIL", 0, 0, _at(load_failure(loaded), r)))
            elif not self.group.alive:
                results.append(self.result(op, "FAIL", 0, 0, Failure("not_run", "ranks stopped after an earlier failure")))
            else:
                results.append(self.check_op(op))
        env = {**(replies[0].env or {}), "world_size": self.world}
        return results, env

    def check_op(self, op: OpEntry) -> OpResult:
        spec = get_slot(op.slot)
        tier = self.opts.resolved_tier
        cases = select_cases(spec, op, tier, self.opts.max_cases)
        if not cases:
            return self.result(op, "FAIL", 0, 0, Failure("no_cases", f"constraints {op.constraints} exclude every shape"))
        # the single-rank shape plan (arena and odd sizes) in a secret order; each case's trial
        # repeated a random number of times (runner.py runs the full shuffled schedule)
        self.rng = random.Random(f"{self.seed}:{op.key}:{self.world}")
        pool = [c for c in spec.cases(tier) if op.eligible(c.dims)]
        cases = [
            p.case
            for p in plan_cases(
                spec,
                cases,
                op.dtypes,
                self.rng,
                gpu=self.opts.device.startswith("cuda"),
                arena=self.opts.arena,
                eligible=op.eligible,
                pool=pool,
            )
        ]
        self.rng.shuffle(cases)
        start = self.calls
        log.info("verify.op", op=op.key, cases=len(cases), dtypes=list(op.dtypes), world_size=self.world)
        try:
            failure = self._check_all(op, spec, cases)
        except RankTimeout as e:
            failure = _timeout_failure(e, self._stage)
        except RankDied as e:
            failure = Failure("crashed", str(e)[-900:], stage=self._stage, rank=e.rank)
        return self.result(op, "FAIL" if failure else "PASS", self.calls - start, len(cases), failure)

    def _check_all(self, op: OpEntry, spec: SlotSpec, cases: list[ShapeCase]) -> Failure | None:
        return run_gates(
            op.dtypes,
            cases,
            compile_check=self.opts.compile_check,
            graph_check=graph_enabled(self.opts.graph_check, self.opts.device),
            eager=lambda act, c: self._eager_repeated(op, spec, act, c),
            compile_trial=lambda act, c: self._compile(op, spec, act, c),
            graph_trial=lambda act, c: self._graph(op, spec, act, c),
        )

    # -- plumbing ---------------------------------------------------------------------------
    def _inputs(self, spec: SlotSpec, case: ShapeCase, act: torch.dtype) -> PerRank:
        self.counter += 1
        g = seed_generator((self.seed + 7919 * self.counter + 104729 * self.world) % (2**62))
        assert spec.make_rank_inputs is not None
        ranks = spec.make_rank_inputs(case, act, g, self.world)
        return [{k: v for k, v in r.items() if spec.arg(k).role in ("in", "inout")} for r in ranks]

    def _refs(self, spec: SlotSpec, inputs: PerRank, case: ShapeCase) -> list[dict[str, torch.Tensor]]:
        assert spec.rank_reference is not None
        return spec.rank_reference(inputs, case.params)

    def _alloc(self, spec: SlotSpec, act: torch.dtype, case: ShapeCase, poison: int) -> dict[str, P.Alloc]:
        return {
            a.name: P.Alloc(dtype_name(a.torch_dtype(act)), tuple(a.concrete_shape(case.dims)), poison)
            for a in spec.args
            if a.role in ("out", "scratch")
        }

    def _call(
        self,
        op: OpEntry,
        spec: SlotSpec,
        act: torch.dtype,
        case: ShapeCase,
        inputs: PerRank,
        poison: int,
        watch_sync: bool,
        mode: str = "eager",
    ) -> list[Judged]:
        alloc = self._alloc(spec, act, case, poison)
        msg = P.Call(op.key, dict(case.params), alloc, watch_sync, P.CallMode(mode), secrets.token_hex(16))
        self.calls += 1
        replies = self._request(P.request(msg), [rebase(i) for i in inputs])
        return [(judge.merge_digests(reply, got, sent), got) for (reply, got), sent in zip(replies, inputs)]

    def _request(self, msg: dict[str, Any], tensors: Sequence[dict[str, torch.Tensor]]) -> list[Judged]:
        """One request (a protocol wire dict with its nonce) to every rank; each rank's reply as
        the judge reads it. A rank whose reply does not decode as a result (verify/protocol.py),
        lacks this call's nonce (it answered another request) or returns tensors nothing asked
        for is turned into a protocol failure (judge.check_reply reports it)."""
        limit = self.opts.call_limit_s()
        if limit <= 0:
            raise RankTimeout(self.opts.spent(), list(range(self.world)))
        replies = self.group.request_all([msg] * self.world, list(tensors), limit)
        out: list[Judged] = []
        for (raw, got), sent in zip(replies, tensors):
            reply = judge.decoded(raw)
            if reply.result is None:
                out.append((reply, {}))
                continue
            bad = judge.check_nonce(reply.result, msg["nonce"]) or judge.check_returned(msg, sent, got)
            out.append((judge.refuse(bad), {}) if bad else (reply, got))
        return out

    # -- trials -----------------------------------------------------------------------------
    def _eager_repeated(self, op: OpEntry, spec: SlotSpec, act_name: str, case: ShapeCase) -> Failure | None:
        """1..2 (CPU) or 1..4 (CUDA) rounds of the pair + fresh trial: 3 to 12 calls per case."""
        for _ in range(self.rng.randint(1, 4 if self.opts.device.startswith("cuda") else 2)):
            f = self._eager(op, spec, act_name, case)
            if f:
                return f
        return None

    def _eager(self, op: OpEntry, spec: SlotSpec, act_name: str, case: ShapeCase) -> Failure | None:
        act = dtype_of(act_name)
        where: dict[str, Any] = dict(case=case.label, dtype=act_name)
        self._stage = f"eager {act_name} {case.label}"
        inputs = self._inputs(spec, case, act)
        refs = self._refs(spec, inputs, case)
        got: list[list[dict[str, torch.Tensor]]] = []
        for poison, watch in ((0, False), (1, True)):
            replies = self._call(op, spec, act, case, inputs, poison, watch)
            f = _each(self.world, lambda r: judge.check_reply(replies[r][0]))  # noqa: B023 - called at once
            if f:
                return _at(f, stage="eager", **where)
            got.append([t for _, t in replies])
        f = _each(
            self.world, lambda r: judge.check_pair(spec, act_name, inputs[r], got[0][r], got[1][r], refs[r])
        ) or judge.check_replicated(spec, got[1])
        if f:
            return _at(f, stage="eager", **where)
        fresh = self._inputs(spec, case, act)
        fresh_refs = self._refs(spec, fresh, case)
        replies = self._call(op, spec, act, case, fresh, 0, True)
        f = _each(
            self.world,
            lambda r: (
                judge.check_reply(replies[r][0])
                or judge.check_inputs_untouched(spec, fresh[r], replies[r][1])
                or judge.check_outputs(spec, act_name, replies[r][1], fresh_refs[r])
            ),
        ) or judge.check_replicated(spec, [t for _, t in replies])
        return _at(f, stage="eager-fresh", **where) if f else None

    def _compile(self, op: OpEntry, spec: SlotSpec, act_name: str, case: ShapeCase) -> Failure | None:
        act = dtype_of(act_name)
        self._stage = f"compile {act_name} {case.label}"
        inputs = self._inputs(spec, case, act)
        refs = self._refs(spec, inputs, case)
        replies = self._call(op, spec, act, case, inputs, 0, False, mode="compile")

        def check(r: int) -> Failure | None:
            f = judge.check_reply(replies[r][0])
            if f:
                return dataclasses.replace(f, reason="compile") if f.reason == "exception" else f
            return judge.check_outputs(spec, act_name, replies[r][1], refs[r])

        f = _each(self.world, check) or judge.check_replicated(spec, [t for _, t in replies])
        return _at(f, stage="compile", case=case.label, dtype=act_name) if f else None

    def _graph(self, op: OpEntry, spec: SlotSpec, act_name: str, case: ShapeCase) -> Failure | None:
        """CUDA only: every rank captures one call in a graph at the same time, then replays it
        with new values in the graph-dynamic inputs (a new collective per replay)."""
        act = dtype_of(act_name)
        self._stage = f"graph {act_name} {case.label}"
        capture = self._inputs(spec, case, act)
        dynamic = {a.name for a in spec.args if a.graph_dynamic or a.role == "inout"}
        sent = [rebase(c) for c in capture]
        replays: list[PerRank] = []
        for i in range(self.opts.graph_replays):
            fresh = self._inputs(spec, case, act)
            merged = [{k: (fresh[r][k] if k in dynamic else capture[r][k]) for k in capture[r]} for r in range(self.world)]
            replays.append(merged)
            for r in range(self.world):
                for k, v in rebase({k: fresh[r][k] for k in sorted(dynamic & set(fresh[r]))}).items():
                    sent[r][f"r{i}.{k}"] = v
        msg = P.Graph(op.key, dict(case.params), self._alloc(spec, act, case, 0), len(replays), secrets.token_hex(16))
        self.calls += 1 + len(replays)
        replies = self._request(P.request(msg), sent)
        last = replays[-1] if replays else capture
        f = _each(
            self.world, lambda r: judge.check_reply(replies[r][0]) or judge.check_graph_inputs(spec, replies[r][0], last[r])
        )
        if f:
            return _at(f, stage="graph", case=case.label, dtype=act_name)
        for i, merged in enumerate(replays):
            refs = self._refs(spec, merged, case)
            outs = [_replay(replies[r][1], i) for r in range(self.world)]
            f = (
                _each(self.world, lambda r: judge.check_outputs(spec, act_name, outs[r], refs[r]))  # noqa: B023
                or judge.check_replicated(spec, outs)
            )
            if f:
                return _at(
                    dataclasses.replace(f, reason="graph_replay", detail=f"replay {i}: {f.detail}"),
                    stage="graph",
                    case=case.label,
                    dtype=act_name,
                )
        return None


def _timeout_failure(e: RankTimeout, stage: str) -> Failure:
    """A rank that raised (or broke the protocol) while its peers waited in a collective is the
    root cause, not the hang."""
    for r, (raw, _) in sorted(e.answered.items()):
        reply = judge.decoded(raw)
        f = judge.check_reply(reply)
        if f and not reply.ok:
            return Failure(f.reason, f"rank {r}: {f.detail[-600:]} (then: {e})", stage=stage, rank=r)
    return Failure("timeout", str(e), stage=stage, rank=e.ranks[0])


def _loaded(reply: P.Loaded, key: str) -> bool:
    res = reply.results.get(key)
    return res is not None and res.ok


def load_failure(loaded: P.LoadResult | None) -> Failure:
    """A rank's own import failure, or protocol when its load reply lacks the op or gives no reason."""
    if loaded is not None and loaded.reason in (P.Reason.IMPORT_ERROR, P.Reason.ENTRY_MISSING):
        return Failure(str(loaded.reason), (loaded.error or "")[-900:])
    return Failure("protocol", f"malformed load reply for this op: {str(loaded)[:200]}")


def _replay(out: Mapping[str, torch.Tensor], i: int) -> dict[str, torch.Tensor]:
    return {k.split(".", 1)[1]: v for k, v in out.items() if k.startswith(f"r{i}.")}
