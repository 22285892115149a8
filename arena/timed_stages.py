"""The timed engines of a qualification (mixed into arena.run.Qualification): arm the candidate,
run the engine, gate its cycles, gather its evidence, judge its windows.

A timed engine is the resident stage (B / C / B′ cycles, in a fresh engine or the timed engine kept
across contributions) or the confirmation of a speed PASS. What it yields is only what the host
can trust: windows read from nonce-bound records, evidence from nonce-bound answers (plus the
receipt files of roles that must never load the candidate), leaks and tampering, the sequential
test's go/stop after each cycle, and the speed verdict with its physical-floor guard. It sits
apart from arena/run.py, which orders the stages and turns their outcomes into the verdict, so
the one file that says in what order a qualification decides stays short.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arena.config import ArenaConfig
from arena.config_sections import SPEED_METRICS
from arena.engine.host import EngineRun
from arena.engine.postcondition import PostCondition
from arena.engine.stage import StageContext, resident_timed_stage
from arena.jobs import mirror, window_tag
from arena.prepare import RunOptions
from arena.records import ArenaResult, GatedCycle, TimedStage, WindowRecord
from arena.verdict import floor_arena, grading
from arena.verdict import sequential as seq
from arena.verdict.evidence import check, leaks, receipts_from_answers, tampering
from arena.verdict.outcome import outcome
from arena.verdict.speed import Window, guard, guards_of, judge, judge_each
from cacheon_subnet.bundle import Bundle, OpEntry
from cacheon_subnet.env import FORWARD_CLOCK, RECEIPT_DIR
from cacheon_subnet.sandbox import remove_tree
from seams.receipts import read_receipts
from seams.table import local_bindings


class TimedStages:
    """Needs from the host class (arena.run.Qualification) the state and methods declared here."""

    cfg: ArenaConfig
    op: OpEntry
    opts: RunOptions
    incumbent: tuple[Bundle, OpEntry] | None
    baseline: str  # "incumbent" or "stock": what B and B′ run
    result: ArenaResult
    t0: float  # time.monotonic() when run() began: every stage's clock
    samples: dict[str, tuple[tuple[str, str, int], ...]]
    sampled: dict[str, dict[str, list[dict[str, Any]]]]
    _files: dict[str, list[dict[str, Any]]]
    stopped: tuple[str, seq.SprtState] | None
    install: dict[str, str]
    post: PostCondition | None

    if TYPE_CHECKING:

        def save(self) -> None: ...
        def _engine(
            self,
            name: str,
            job: dict[str, Any],
            env: dict[str, str],
            ranks: tuple[int, ...] = (),
            choose: Any = None,
            rw: tuple[str, ...] = (),
            gate: Any = None,
        ) -> EngineRun: ...

    def _gate(self, windows: tuple[Window, ...]) -> Any:
        """The host's go/stop after each cycle (arena/engine/record_reader.py calls it)."""
        policy, metric = seq.policy_of(self.cfg.sequential), self.cfg.speed.metric

        def gate(records: tuple[dict[str, Any], ...]) -> bool:
            by_tag = {r["step"]: r for r in records if "step" in r}
            samples = [
                (w, float(by_tag[t][metric]))
                for w in windows
                if w.role != "warmup" and (t := window_tag(w)) in by_tag and by_tag[t].get(metric) is not None
            ]
            decision, state = seq.early_stop(samples, self.cfg.speed, policy)
            self.result = replace(self.result, sequential=self.result.sequential + (GatedCycle(state, decision),))
            if decision == "CONTINUE":
                return True
            self.stopped = (decision, state)
            return False

        return gate

    def _outcome(
        self, name: str, run: EngineRun, receipts: list[dict[str, Any]], stage: TimedStage
    ) -> tuple[str, str] | None:
        return outcome(name, run, receipts + self._files.get(name, []), stage, self.op.slot, bool(self.incumbent))

    def _timed(
        self,
        name: str,
        steps: list[dict[str, Any]],
        windows: tuple[Window, ...],
        base: dict[str, Any],
        env: dict[str, str],
        gate: Any = None,
    ) -> tuple[EngineRun, TimedStage, list[dict[str, Any]]]:
        """One engine with the candidate armed: its records, windows, evidence, leaks, receipts."""
        cfg, op = self.cfg, self.op
        receipts_dir = self.opts.workdir / f"receipts-{name}"
        remove_tree(receipts_dir)  # an earlier run's, whatever it left (any depth)
        receipts_dir.mkdir()
        ranks = tuple(range(cfg.engine.tp_size))
        early = {"slot": op.slot, "ranks": list(ranks)}
        job = {
            **base,
            "steps": steps,
            "early_evidence": early if cfg.engine.cuda_graph else None,
            "forward_clock": True,
            "answers": {"dir": str(receipts_dir)},
        }
        pairs = {window_tag(windows[c]): window_tag(windows[b]) for c, b in mirror(windows).items()}

        def choose(ready: dict[str, Any]) -> dict[str, Any]:
            self.samples[name] = grading.choose(ready.get("kept", {}), pairs, cfg.quality.prompts)
            return grading.request(self.samples[name])

        if name == "resident" and self.cfg.engine.resident:  # one engine across contributions
            run = self._resident_timed(job, env, ranks, receipts_dir, choose, gate)
        else:
            run = self._engine(
                name,
                job,
                {**env, RECEIPT_DIR.name: str(receipts_dir), FORWARD_CLOCK.name: "1"},
                ranks,
                choose,
                rw=(str(receipts_dir),),
                gate=gate,
            )
        records = tuple(r for r in run.records if not str(r.get("step", "")).startswith("post-"))
        ran = {r.get("step") for r in records}
        stopped = records and any(s.get("gate") for s in steps) and self.stopped is not None
        # a run the sequential test stopped early owes acks only for the swaps it reached
        swaps = [(s["epoch"], s["route"]) for s in steps if s["op"] == "route" and (not stopped or s["tag"] in ran)]
        # verdict inputs come only from nonce-bound answers; the receipt files add only what no
        # answer can show (a receipt from a process role that must never load the candidate)
        files = read_receipts(receipts_dir)
        receipts = receipts_from_answers(records) + [r for r in files if r.get("role") != "scheduler"]
        ev = check(receipts, op.slot, ranks, swaps, graphs_on=cfg.engine.cuda_graph, incumbent=self.baseline == "incumbent")
        mine, theirs = leaks(records, op.slot)
        if theirs:
            ev = replace(ev, ok=False, baseline_problems=ev.baseline_problems + tuple(theirs))
        wrote, wrote_inc = tampering(records, op.slot)  # engine state a kernel was handed
        if wrote or wrote_inc:
            ev = replace(
                ev, ok=False, problems=ev.problems + tuple(wrote), baseline_problems=ev.baseline_problems + tuple(wrote_inc)
            )
        recs = []
        for w in windows:
            try:
                recs.append(WindowRecord.of(w, run.step(window_tag(w)), SPEED_METRICS))
            except KeyError:
                continue
        stage = TimedStage(tuple(recs), ev, tuple(mine))
        sample = run.lifecycle("sample")
        if sample:
            self.sampled[name] = sample["sequences"]
        # blame for a dead engine may also read the files (an error a rank recorded before dying):
        # blame only turns a fault into the candidate's FAIL, never into a PASS
        self._files[name] = files
        return run, stage, receipts

    def _resident_timed(
        self, job: dict[str, Any], env: dict[str, str], ranks: tuple[int, ...], receipts_dir: Path, choose: Any, gate: Any
    ) -> EngineRun:
        """The resident stage in the timed engine kept across contributions (arena/engine/resident_timed.py)."""
        from arena.engine import resident_timed

        ctx = StageContext(self.cfg, self.opts.workdir, self.t0, self.opts.devices, self.opts.isolate_network)
        pool = self.opts.timed_engines or resident_timed.POOL
        run, record, self.post = resident_timed_stage(
            ctx, "resident", job, env, self.install, pool, ranks=ranks, receipts_dir=receipts_dir, choose=choose, gate=gate
        )
        self.result = replace(self.result.with_stage(record), resident_engine=self.post)
        self.save()
        return run

    def _release_timed(self) -> None:
        """Another engine needs the GPU (confirmation, a fresh T): the resident timed engine goes first."""
        if self.cfg.engine.resident:
            from arena.engine import resident_timed

            (self.opts.timed_engines or resident_timed.POOL).release(self.opts.devices)

    def _resident_bindings(self, bindings: tuple[str, ...]) -> tuple[str, ...]:
        """What the resident timed engine arms: every local adapter when this slot's are local, so
        one engine (its key includes the armed set) serves every local slot in turn instead of
        restarting whenever the queue changes slot (measured on the H200, 2026-12-05: each verdict
        of a mixed queue paid a ~112 s start). B and C share the armed set, the others routed to
        stock (all local hooks stock-routed vs pristine read 0.9985x, docs/benchmarks.md); a
        fresh engine (confirmation, no resident engine) arms this slot's bindings alone."""
        local = local_bindings()
        if not self.cfg.engine.resident or not set(bindings) <= set(local):
            return bindings
        return local

    def _judged(self, stage: TimedStage, windows: tuple[Window, ...]) -> TimedStage:
        cfg = self.cfg
        speed = guard(
            judge(stage.samples(cfg.speed.metric), cfg.speed),
            {m: stage.samples(m) for m in guards_of(cfg.speed.metric)},
            cfg.speed.metric,
            cfg.speed,
        )
        # the physical-floor guard: a PASS its kernel could not deliver is NO_DECISION (arena/verdict/floor_arena.py)
        spin_on_b = self.opts.handicap_us if self.opts.control == "handicap" else 0.0
        speed, note = floor_arena.check(speed, cfg, self.op.slot, spin_on_b)
        floor = (*self.result.setup.floor, note)  # one note a judged stage: resident, then confirm
        self.result = replace(self.result, setup=replace(self.result.setup, floor=floor))
        rows = [(r.window, dict(r.readings)) for r in stage.windows]
        return replace(stage, speed=speed, by_metric=judge_each(rows, SPEED_METRICS, cfg.speed))
