"""One qualification, end to end: resident engine (B / C / B′, its timed windows also the graded
ones), a confirmation engine for a speed PASS, the pristine teacher T grading a sample the host
drew from the timed windows, evidence, quality and speed verdicts; a typed result
(arena/records.py) written after every stage."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from arena.config import ArenaConfig
from arena.engine.host import EngineRun
from arena.engine.postcondition import PostCondition
from arena.engine.stage import StageContext, resident_stage, run_stage
from arena.jobs import resident_steps, teacher_steps
from arena.prepare import (  # noqa: F401 - re-exported: callers import them from arena.run
    CONTROLS,
    SPIN_CONTROLS,
    ArenaUnavailable,
    RunOptions,
    candidate_blame,
    engine_base,
    preflight,
    stock_control_op,
)
from arena.records import ArenaIdentity, ArenaResult, ArenaSetup, QualityRecord
from arena.timed_stages import TimedStages
from arena.verdict import calibrate, grading
from arena.verdict import quality as q
from arena.verdict import sequential as seq
from arena.verdict.outcome import after_post
from arena.verdict.speed import swaps as count_swaps
from cacheon_subnet.bundle import Bundle, OpEntry
from cacheon_subnet.bundle.engine_tree import build_tree
from cacheon_subnet.env import (
    ENGINE_TREE,
    ENGINE_TREE_DIGEST,
    HANDICAP,
    SEAM_STRICT,
    SLOWDOWN,
    STOCK_AS_CANDIDATE,
)
from cacheon_subnet.errors import BundleError
from cacheon_subnet.log import get_logger
from cacheon_subnet.records import Verdict
from cacheon_subnet.slots import get_slot
from seams.table import adapters_for_slot, seam_environment

log = get_logger("arena.run")
VERDICTS = tuple(v.value for v in Verdict)
TeacherAlignmentError = grading.TeacherAlignmentError


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Qualification(TimedStages):
    def __init__(
        self,
        cfg: ArenaConfig,
        bundle: Bundle | None,
        op: OpEntry,
        opts: RunOptions,
        incumbent: tuple[Bundle, OpEntry] | None = None,
    ) -> None:
        if (bundle is None) != (opts.control in CONTROLS):
            raise ValueError(f"a bundle is required, except for the controls {CONTROLS} (which take none)")
        if opts.control is not None and opts.control not in CONTROLS:
            raise ValueError(f"control {opts.control!r}: expected one of {CONTROLS}")
        if (opts.control in SPIN_CONTROLS) != (opts.handicap_us > 0):
            raise ValueError(f"the controls {SPIN_CONTROLS} need handicap_us > 0 (and only they take one)")
        if incumbent is not None and (bundle is None or incumbent[1].slot != op.slot):
            raise ValueError(f"the incumbent must serve the same slot ({op.slot}) as a real challenger")
        self.cfg, self.bundle, self.op, self.opts, self.incumbent = cfg, bundle, op, opts, incumbent
        self.baseline = "incumbent" if incumbent or opts.control == "handicap" else "stock"
        self.out = opts.workdir / "result.json"
        self.result = ArenaResult(
            identity=ArenaIdentity(
                arena_id=cfg.arena_id,
                arena=cfg.name,
                control=opts.control,
                config=cfg.path,
                bundle_digest=bundle.digest if bundle else opts.control,
                op=op.key,
                slot=op.slot,
                started=_now(),
                result_path=str(self.out),
            ),
            metric=cfg.speed.metric,
        )
        self.samples: dict[str, tuple[tuple[str, str, int], ...]] = {}
        self.sampled: dict[str, dict[str, list[dict[str, Any]]]] = {}
        self._files: dict[str, list[dict[str, Any]]] = {}
        self.stopped: tuple[str, seq.SprtState] | None = None  # the sequential test ended the cycles
        self.install: dict[str, str] = {}  # what the resident timed engine installs ([engine] resident)
        self.post: PostCondition | None = None  # its post-condition after this contribution (arena/engine/postcondition.py)

    @property
    def sequential_on(self) -> bool:
        """The SPRT gates the resident engine's cycles (not the role-bias control: it measures all)."""
        return self.cfg.sequential.enabled and self.opts.control != "stock-as-candidate"

    def save(self) -> None:
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.result.to_json(), indent=1, default=str))
        os.replace(tmp, self.out)

    def update(self, **kw: Any) -> None:
        self.result = replace(self.result, **kw)
        self.save()

    def finish(self, verdict: str, reason: str) -> ArenaResult:
        assert verdict in VERDICTS
        if self.opts.control == "handicap":
            reason = f"control handicap (baseline +{self.opts.handicap_us:g} µs per call): {reason}"
        elif self.opts.control == "slowdown":
            reason = f"control slowdown (candidate +{self.opts.handicap_us:g} µs per call): {reason}"
        self.update(verdict=verdict, reason=reason, finished=_now(), wall_s=round(time.monotonic() - self.t0, 1))
        log.info("arena.verdict", verdict=verdict, reason=reason, arena_id=self.cfg.arena_id, op=self.op.key)
        return self.result

    def _engine(
        self,
        name: str,
        job: dict[str, Any],
        env: dict[str, str],
        ranks: tuple[int, ...] = (),
        choose: Any = None,
        rw: tuple[str, ...] = (),
        gate: Any = None,
    ) -> EngineRun:
        """One engine behind the sandbox wall (arena/engine/stage.py); its record joins the result."""
        ctx = StageContext(self.cfg, self.opts.workdir, self.t0, self.opts.devices, self.opts.isolate_network)
        run, record = run_stage(ctx, name, job, env, ranks=ranks, choose=choose, rw=rw, gate=gate)
        self.result = self.result.with_stage(record)
        self.save()
        return run

    def _teacher(self, job: dict[str, Any], env: dict[str, str]) -> EngineRun:
        """T in a fresh engine, or in the resident one ([teacher] resident: arena/engine/resident.py)."""
        if not self.cfg.teacher.resident:
            self._release_timed()  # a fresh T takes the timed engine's share of the GPU
            return self._engine("teacher", job, env)
        from arena.engine import resident

        ctx = StageContext(self.cfg, self.opts.workdir, self.t0, self.opts.devices, self.opts.isolate_network)
        runs = resident_stage(ctx, "teacher", job, env, self.opts.teachers or resident.POOL)
        for _, record in runs:
            self.result = self.result.with_stage(record)
        self.save()
        return runs[-1][0]

    def _candidate_env(self, tree_root: Path) -> tuple[dict[str, str], str | None]:
        """Seal the challenger (and the incumbent) into a fresh engine tree; the role-bias control
        loads no contribution code at all."""
        if tree_root.exists():

            def writable_then_retry(f: Any, p: str, _: Any) -> None:
                os.chmod(os.path.dirname(p), 0o755)
                f(p)

            shutil.rmtree(tree_root, onerror=writable_then_retry)
        if self.opts.control in SPIN_CONTROLS:
            name = HANDICAP.name if self.opts.control == "handicap" else SLOWDOWN.name
            return {name: f"{self.op.slot}:{self.opts.handicap_us:g}"}, None
        if self.bundle is None:
            return {STOCK_AS_CANDIDATE.name: self.op.slot}, None
        inc = [(self.incumbent[0], [self.incumbent[1]])] if self.incumbent else []
        from cacheon_subnet.verify.native_gate import tree_artifacts  # CUDA ops: compiled on the host, sealed in the tree

        arts = tree_artifacts([(self.bundle, [self.op]), *inc])
        tree = build_tree(tree_root, [(self.bundle, [self.op])], incumbents=inc, artifacts=arts)
        return {ENGINE_TREE.name: str(tree.root), ENGINE_TREE_DIGEST.name: tree.digest}, tree.digest

    def run(self) -> ArenaResult:
        self.t0 = time.monotonic()
        cfg, op, wd = self.cfg, self.op, self.opts.workdir
        wd.mkdir(parents=True, exist_ok=True)
        bindings = tuple(sorted({a.binding for a in adapters_for_slot(op.slot)}))
        if not bindings:
            return self.finish("FAIL", f"slot {op.slot} has no seam adapter: it cannot run inside the engine")
        if (worlds := get_slot(op.slot).world_sizes) and cfg.engine.tp_size not in worlds:
            return self.finish(
                "NO_DECISION",
                f"slot {op.slot} is verified at world sizes {worlds}; this arena "
                f"runs tp_size {cfg.engine.tp_size}: not qualified here",
            )
        try:
            candidate_env, tree_digest = self._candidate_env(wd / "tree")
        except BundleError as e:  # the static allowlist (or a bad package): nothing is ever started
            if e.rule != "policy":
                raise
            return self.finish(
                "FAIL", f"policy: the bundle's sources fail the static allowlist, so it never enters an engine: {e.detail}"
            )
        base, why = engine_base(cfg, self.opts, self._engine)
        if base is None:
            return self.finish("NO_DECISION", why)
        graded = self.opts.control != "stock-as-candidate"  # the role-bias control has nothing to grade
        steps, windows = resident_steps(cfg, self.baseline, quality=graded, gates=self.sequential_on)
        setup = ArenaSetup(
            baseline=f"incumbent {self.incumbent[0].digest} ({self.incumbent[1].key})" if self.incumbent else "stock"
        )
        if (spin_us := self.opts.handicap_us) and self.opts.control == "handicap":
            setup = replace(
                setup, baseline=f"stock + {spin_us:g} µs GPU spin per call (handicap control)", handicap_us=spin_us
            )
        elif spin_us:
            setup = replace(
                setup,
                candidate_control=f"stock + {spin_us:g} µs GPU spin per call (slowdown control)",
                handicap_us=spin_us,
            )
        env = {**seam_environment(bindings), SEAM_STRICT.name: "1", "SGLANG_PLUGINS": "cacheon"}
        self.install = candidate_env  # the resident timed engine installs it; a fresh engine starts with it
        fresh_env = {**env, **candidate_env}
        armed = self._resident_bindings(bindings)
        resident_env = {**env, **seam_environment(armed)}
        setup = replace(
            setup,
            bindings=bindings,
            tree_digest=tree_digest,
            swaps=count_swaps(windows, "candidate"),
            armed=armed if self.cfg.engine.resident else None,
        )
        self.update(setup=setup)

        # evidence first: a kernel that never ran is never timed as a win
        resident, stage, receipts = self._timed(
            "resident",
            steps,
            windows,
            base,
            resident_env if self.cfg.engine.resident else fresh_env,
            gate=self._gate(windows) if self.sequential_on else None,
        )
        self.update(resident=stage, receipts=tuple(receipts))
        stop = after_post(self._outcome("resident", resident, receipts, stage), self.post)
        if stop:
            return self.finish(*stop)
        stage = self._judged(stage, windows)
        self.update(resident=stage)
        speed = stage.speed
        assert speed is not None
        if self.stopped and self.stopped[0] == "FAIL":
            # decided: slower than a crown at the configured error rates. No teacher, no
            # confirmation: a slower kernel is FAIL whatever its quality
            state = self.stopped[1]
            self.update(
                resident=replace(stage, speed=replace(speed, verdict="FAIL", reason=f"{state.reason}; {speed.reason}"))
            )
            return self.finish(
                "FAIL",
                f"speed (sequential stop after {state.cycles} of {cfg.workload.cycles} "
                f"cycles): {state.reason}; {speed.reason}",
            )
        if not graded:
            # stock vs stock through the candidate route: the role bias. Same kernels in both
            # roles, so there is no quality to grade and no crown to confirm.
            self.update(role_bias=speed.ratio - 1)
            return self.finish(
                speed.verdict, f"control stock-as-candidate (role bias {speed.ratio - 1:+.3%}): " + speed.reason
            )
        confirm = None
        if speed.verdict == "PASS" and cfg.speed.confirm_cycles:
            c_steps, c_windows = resident_steps(cfg, self.baseline, confirm=True)
            self._release_timed()  # a crown is confirmed in a fresh engine, alone on the GPU
            c_run, confirm, c_receipts = self._timed("confirm", c_steps, c_windows, base, fresh_env)
            self.update(confirm=confirm)
            stop = self._outcome("confirm", c_run, c_receipts, confirm)
            if stop:
                return self.finish(*stop)
            confirm = self._judged(confirm, c_windows)
            self.update(confirm=confirm)
        if speed.verdict != "PASS" and not self.opts.grade_always:
            return self.finish(
                speed.verdict, f"speed: {speed.reason} (quality not graded: only a speed PASS goes to the teacher)"
            )
        stop = self._grade(base)
        if stop:
            return self.finish(*stop)
        if speed.verdict != "PASS" or confirm is None:
            return self.finish(speed.verdict, "speed: " + speed.reason)
        again = confirm.speed
        assert again is not None
        if again.verdict != "PASS":
            return self.finish("NO_DECISION", f"speed PASS ({speed.reason}) not confirmed in a fresh engine: {again.reason}")
        return self.finish("PASS", f"speed: {speed.reason}; confirmed in a fresh engine: {again.reason}")

    def _grade(self, base: dict[str, Any]) -> tuple[str, str] | None:
        """T scores the sampled outputs of every timed engine; a stage that is not PASS decides."""
        try:
            seqs = {
                name: grading.role_sequences(self.samples.get(name, ()), self.sampled.get(name, {}))
                for name in ("resident", "confirm")
                if name in self.samples or name == "resident"
            }
        except grading.TeacherAlignmentError as e:
            return "NO_DECISION", f"quality sample: {e}"
        if not all(s["C"] for s in seqs.values()):
            return "NO_DECISION", "quality sample: no output of a timed C window came back to be graded"
        flat = {f"{name}-{role}": v for name, by in seqs.items() for role, v in by.items()}
        pristine = seam_environment(())
        teacher = self._teacher({**base, "steps": teacher_steps(self.cfg, flat)}, pristine)
        if teacher.forgery:
            return "FAIL", f"forging attempt in the teacher engine's records: {teacher.forgery}"
        if teacher.error:
            return "NO_DECISION", f"the pristine teacher engine failed (infrastructure): {teacher.error}"
        policy = q.QualityPolicy.from_mapping(dict(self.cfg.quality.policy))
        for name, by in seqs.items():
            try:
                g = {r: grading.sequences(by[r], teacher.step(f"T-{name}-{r}")["graded"]) for r in ("B", "C")}
            except grading.TeacherAlignmentError as e:
                return "NO_DECISION", f"teacher alignment: {e}"
            qv = q.grade(q.metrics(g["B"]), q.metrics(g["C"]), policy)
            # B-vs-B′ spread of this sample, beside the verdict (never judged): arena/verdict/calibrate.py
            spread = calibrate.stock_spread(g["B"], [b for _, b, _ in self.samples[name]])
            if spread is not None:
                qv = replace(qv, metrics={**qv.metrics, "stock_spread": spread})
            rec = QualityRecord(qv, self.samples[name])
            self.update(**{"quality" if name == "resident" else "confirm_quality": rec})
            if qv.verdict != "PASS":
                where = "" if name == "resident" else " (confirmation engine)"
                return qv.verdict, f"quality{where}: " + "; ".join(qv.reasons[:4])
        return None


def run_arena(
    cfg: ArenaConfig, bundle: Bundle | None, op: OpEntry, opts: RunOptions, incumbent: tuple[Bundle, OpEntry] | None = None
) -> ArenaResult:
    """One qualification, typed: what arena/qualifier.py turns into the validator's QualifyResult.
    incumbent: the crowned (bundle, op) of the same slot; B and B′ then run it (head-to-head)."""
    if opts.engine_factory is None:
        preflight()
    return Qualification(cfg, bundle, op, opts, incumbent).run()


def qualify(
    cfg: ArenaConfig, bundle: Bundle | None, op: OpEntry, opts: RunOptions, incumbent: tuple[Bundle, OpEntry] | None = None
) -> dict[str, Any]:
    """run_arena's result as the result file holds it (`cacheon arena run` prints it; scripts read it)."""
    return run_arena(cfg, bundle, op, opts, incumbent).to_json()
