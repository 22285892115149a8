"""One qualification, end to end: resident engine (B / C / B′ + quality samples), pristine teacher
T, evidence, quality and speed verdicts, one JSON result written after every stage."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arena import quality as q
from arena.config import SPEED_METRICS, ArenaConfig
from arena.evidence import Evidence, check
from arena.host import EngineRun, EngineSpec, run_engine
from arena.jobs import cache_env, checkpoint_job, engine_kwargs, resident_steps, teacher_steps, window_tag
from arena.speed import SpeedVerdict, Window, guard, guards_of, judge, judge_each, swaps as count_swaps
from cacheon_subnet.bundle import Bundle, OpEntry
from cacheon_subnet.bundle.engine_tree import build_tree
from cacheon_subnet.log import get_logger
from seams.receipts import read_receipts
from seams.table import adapters_for_slot, seam_environment

log = get_logger("arena.run")
VERDICTS = ("PASS", "FAIL", "NO_DECISION")


class TeacherAlignmentError(RuntimeError):
    """T's teacher-forced tokens do not line up with the role's continuation (a harness bug)."""


@dataclass(frozen=True)
class RunOptions:
    workdir: Path
    checkpoint_root: Path
    engine_factory: str | None = None  # tests only: a fake engine class "module:attr"
    isolate_network: bool = True
    control: str | None = None  # "stock-as-candidate" | "handicap" (seams/controls.py; never a crown)
    handicap_us: float = 0.0  # the handicap control's spin per baseline call


# stock-as-candidate: stock vs stock through the candidate route -> the role bias (speed only).
# handicap: B/B′ run stock + a fixed GPU spin per call, C plain stock -> a known speedup, run
# through the whole PASS path (T, confirmation): does the arena crown a gain of that size?
CONTROLS = ("stock-as-candidate", "handicap")


def stock_control_op(slot: str) -> OpEntry:
    """The op the role-bias control runs: SGLang's own kernel placed in the candidate route."""
    from cacheon_subnet.slots import get_slot

    spec = get_slot(slot)
    return OpEntry(slot=slot, slot_version=spec.version, module="stock", attr="stock", variant="stock-control",
                   dtypes=tuple(spec.dtypes))


def _sequences(role_seqs: list[dict[str, Any]], graded: list[dict[str, Any]]) -> list[q.Sequence]:
    by_key = {g["key"]: g for g in graded}
    out = []
    for s in role_seqs:
        g = by_key.get(s["key"])
        if g is None:
            raise TeacherAlignmentError(f"T returned nothing for sequence {s['key']}")
        cont, toks, top = s["cont"], g["tokens"], g["top"]
        off = next((o for o in range(3) if [t for t, _ in toks[o:o + len(cont)]] == cont), None)
        if off is None:
            raise TeacherAlignmentError(f"sequence {s['key']}: T's tokens {[t for t, _ in toks[:5]]}… "
                                        f"do not match the continuation {cont[:5]}…")
        top = top[len(top) - len(toks) + off:] if len(top) >= len(toks) else top
        own = s.get("logprobs") or []
        own_top = s.get("top") or []
        positions = []
        for i, tok in enumerate(cont):
            t_top = tuple((int(a), float(b)) for a, b in (top[i] if i < len(top) else []))
            if not t_top:
                raise TeacherAlignmentError(f"sequence {s['key']} position {i}: T returned no top-k")
            positions.append(q.Position(
                token=int(tok), role_logprob=float(own[i][1]) if i < len(own) else None,
                role_top=tuple((int(a), float(b)) for a, b in (own_top[i] if i < len(own_top) else [])),
                teacher_logprob=float(toks[off + i][1]), teacher_top=t_top))
        out.append(q.Sequence(prompt_id=int(s["key"]), positions=tuple(positions)))
    return out


class ArenaUnavailable(RuntimeError):
    """This machine cannot run the arena (no SGLang, no GPU): a usage problem, never a verdict."""


def preflight() -> None:
    import importlib.util

    if importlib.util.find_spec("sglang") is None:
        raise ArenaUnavailable("SGLang is not importable here: the GPU arena needs the `gpu` extra "
                               "(sglang==0.5.13.post1) on a CUDA machine; use --arena cpu for CPU timing")
    if not shutil.which("nvidia-smi"):
        raise ArenaUnavailable("no NVIDIA driver (nvidia-smi) on this machine: the GPU arena needs a CUDA GPU")


def candidate_blame(receipts: list[dict[str, Any]], slot: str) -> str:
    """Why a dead engine is the candidate's fault, or "" (fail closed only on real evidence):
    a recorded seam error or load failure, or a call that fired and never completed (a crash or
    hang inside the kernel)."""
    for r in receipts:
        # not the incumbent's, and not a swap that never called the challenger
        mine = [e for e in r.get("errors", []) if not e.startswith((f"{slot}@", "route@incumbent", "route@stock"))]
        if mine:
            return f"recorded by rank {r.get('rank')}: {mine[0][:300]}"
        c = r.get("slots", {}).get(slot, {})
        if c.get("load_failed"):
            return f"rank {r.get('rank')}: the bundle failed to load"
        if c.get("fired", 0) > c.get("completed", 0) + 1:  # +1: the receipt file may trail by one call
            return f"rank {r.get('rank')}: {c['fired'] - c['completed']} candidate calls never completed"
    return ""


class Qualification:
    def __init__(self, cfg: ArenaConfig, bundle: Bundle | None, op: OpEntry, opts: RunOptions,
                 incumbent: tuple[Bundle, OpEntry] | None = None) -> None:
        if (bundle is None) != (opts.control in CONTROLS):
            raise ValueError(f"a bundle is required, except for the controls {CONTROLS} (which take none)")
        if opts.control is not None and opts.control not in CONTROLS:
            raise ValueError(f"control {opts.control!r}: expected one of {CONTROLS}")
        if (opts.control == "handicap") != (opts.handicap_us > 0):
            raise ValueError("the handicap control needs handicap_us > 0 (and only it takes one)")
        if incumbent is not None and (bundle is None or incumbent[1].slot != op.slot):
            raise ValueError(f"the incumbent must serve the same slot ({op.slot}) as a real challenger")
        self.cfg, self.bundle, self.op, self.opts, self.incumbent = cfg, bundle, op, opts, incumbent
        self.baseline = "incumbent" if incumbent or opts.control == "handicap" else "stock"
        self.result: dict[str, Any] = {
            "schema": "cacheon.arena-result/1", "arena_id": cfg.arena_id, "arena": cfg.name, "control": opts.control,
            "config": cfg.path, "bundle_digest": bundle.digest if bundle else opts.control, "op": op.key, "slot": op.slot,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "stages": {}}
        self.out = opts.workdir / "result.json"
        self.result["result_path"] = str(self.out)

    def save(self) -> None:
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.result, indent=1, default=str))
        os.replace(tmp, self.out)

    def finish(self, verdict: str, reason: str) -> dict[str, Any]:
        assert verdict in VERDICTS
        if self.opts.control == "handicap":
            reason = f"control handicap (baseline +{self.opts.handicap_us:g} µs per call): {reason}"
        self.result.update(verdict=verdict, reason=reason, finished=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           wall_s=round(time.monotonic() - self.t0, 1))
        self.save()
        log.info("arena.verdict", verdict=verdict, reason=reason, arena_id=self.cfg.arena_id, op=self.op.key)
        return self.result

    def _engine(self, name: str, job: dict[str, Any], env: dict[str, str]) -> EngineRun:
        left = self.cfg.limits.total_timeout_s - (time.monotonic() - self.t0)
        run = run_engine(EngineSpec(name, job, env, timeout_s=max(30.0, left),
                                    start_timeout_s=self.cfg.limits.engine_start_timeout_s,
                                    isolate_network=self.opts.isolate_network),
                         self.opts.workdir, self.cfg.limits.gpu_free_timeout_s)
        starts = [r for r in run.records if r.get("op") in ("checkpoint", "started")]
        self.result["stages"][name] = {"wall_s": round(run.wall_s, 1), "rc": run.rc, "timed_out": run.timed_out,
                                       "gpu_free": run.gpu_free, "error": run.error, "startup": starts,
                                       "routes": [r for r in run.records if r.get("op") == "route"]}
        self.save()
        return run

    def _candidate_env(self, tree_root: Path) -> tuple[dict[str, str], str | None]:
        """Seal the challenger (and the incumbent) into a fresh engine tree; the role-bias control
        loads no contribution code at all."""
        if tree_root.exists():
            shutil.rmtree(tree_root, onerror=lambda f, p, e: (os.chmod(os.path.dirname(p), 0o755), f(p)))
        if self.opts.control == "handicap":
            return {"CACHEON_HANDICAP": f"{self.op.slot}:{self.opts.handicap_us:g}"}, None
        if self.bundle is None:
            return {"CACHEON_STOCK_AS_CANDIDATE": self.op.slot}, None
        inc = [(self.incumbent[0], [self.incumbent[1]])] if self.incumbent else []
        tree = build_tree(tree_root, [(self.bundle, [self.op])], incumbents=inc)
        return {"CACHEON_ENGINE_TREE": str(tree.root), "CACHEON_ENGINE_TREE_DIGEST": tree.digest}, tree.digest

    def _resident_outcome(self, resident: EngineRun, receipts: list[dict[str, Any]], ev: Any) -> tuple[str, str] | None:
        """A final (verdict, reason) when the resident engine already decides, else None."""
        early = next((r for r in resident.records if r.get("op") == "error" and r.get("kind") == "evidence"), None)
        if early:
            return "FAIL", "execution evidence: " + early["error"]
        if resident.error:
            blame = candidate_blame(receipts, self.op.slot)
            if blame:
                return "FAIL", f"the engine with the candidate failed ({blame}): {resident.error}"
            return "NO_DECISION", f"the engine failed before the candidate was implicated (infrastructure; retry): {resident.error}"
        if ev.problems:
            return "FAIL", "execution evidence: " + "; ".join(ev.problems[:5])
        if ev.baseline_problems:
            return "NO_DECISION", "the incumbent baseline could not be established: " + "; ".join(ev.baseline_problems[:5])
        return None

    def _timed(self, name: str, steps: list[dict[str, Any]], windows: tuple[Window, ...], base: dict[str, Any],
               env: dict[str, str]) -> tuple[EngineRun, list[tuple[Window, float]], Evidence, list[dict[str, Any]]]:
        """One engine with the candidate armed: its records, timed windows, evidence, receipts."""
        cfg, op = self.cfg, self.op
        receipts_dir = self.opts.workdir / f"receipts-{name}"
        shutil.rmtree(receipts_dir, ignore_errors=True)
        receipts_dir.mkdir()
        ranks = list(range(cfg.engine.tp_size))
        early = {"receipts_dir": str(receipts_dir), "slot": op.slot, "ranks": ranks}
        job = {**base, "steps": steps, "early_evidence": early if cfg.engine.cuda_graph else None,
               "forward_clock": {"dir": str(receipts_dir), "ranks": ranks}}
        run = self._engine(name, job, {**env, "CACHEON_RECEIPT_DIR": str(receipts_dir), "CACHEON_FORWARD_CLOCK": "1"})
        swaps = [(s["epoch"], s["route"]) for s in steps if s["op"] == "route"]
        receipts = read_receipts(receipts_dir)
        ev = check(receipts, op.slot, range(cfg.engine.tp_size), swaps, graphs_on=cfg.engine.cuda_graph,
                   incumbent=self.baseline == "incumbent")
        samples = []
        self._records = {}
        for w in windows:
            try:
                rec = run.step(window_tag(w))
            except KeyError:
                continue
            self._records[w.index] = rec
            if rec.get(cfg.speed.metric) is not None:
                samples.append((w, float(rec[cfg.speed.metric])))
        return run, samples, ev, receipts

    def _windows_json(self, samples: list[tuple[Window, float]]) -> list[dict[str, Any]]:
        recs = getattr(self, "_records", {})
        keep = ("at", "s", "gpu_s", "forwards", "decode_gpu_s", "decodes", "extend_gpu_s", "clock_error") + SPEED_METRICS
        return [{"index": w.index, "cycle": w.cycle, "role": w.role, "route": w.route, self.cfg.speed.metric: v,
                 **{k: recs[w.index][k] for k in keep if k in recs.get(w.index, {})}} for w, v in samples]

    def _samples(self, metric: str, windows: tuple[Window, ...]) -> list[tuple[Window, float]]:
        recs = getattr(self, "_records", {})
        return [(w, float(recs[w.index][metric])) for w in windows if recs.get(w.index, {}).get(metric) is not None]

    def _guard_samples(self, windows: tuple[Window, ...]) -> dict[str, list[tuple[Window, float]]]:
        return {m: self._samples(m, windows) for m in guards_of(self.cfg.speed.metric)}

    def _by_metric(self, windows: tuple[Window, ...]) -> dict[str, Any]:
        """Every metric the windows carry, judged alike: the verdict uses [speed] metric; the others
        are reported beside it (wall clock vs forward clock), never judged."""
        recs = getattr(self, "_records", {})
        rows = [(w, recs[w.index]) for w in windows if w.index in recs]
        return {m: {"ratio": v.ratio, "run_drift": v.run_drift, "noise": v.noise, "verdict": v.verdict,
                    "cycle_ratio": v.cycle_ratio, "cycle_drift": v.cycle_drift,
                    "paired_ratio": v.paired_ratio, "paired_se": v.paired_se}
                for m, v in judge_each(rows, SPEED_METRICS, self.cfg.speed).items()}

    def run(self) -> dict[str, Any]:
        self.t0 = time.monotonic()
        cfg, op, wd = self.cfg, self.op, self.opts.workdir
        wd.mkdir(parents=True, exist_ok=True)
        bindings = tuple(sorted({a.binding for a in adapters_for_slot(op.slot)}))
        if not bindings:
            return self.finish("FAIL", f"slot {op.slot} has no seam adapter: it cannot run inside the engine")
        candidate_env, tree_digest = self._candidate_env(wd / "tree")
        base = {"engine_kwargs": engine_kwargs(cfg), "engine_factory": self.opts.engine_factory,
                "checkpoint": None if self.opts.engine_factory else checkpoint_job(cfg, self.opts.checkpoint_root)}
        steps, windows = resident_steps(cfg, self.baseline)
        self.result["baseline"] = (f"incumbent {self.incumbent[0].digest} ({self.incumbent[1].key})"
                                   if self.incumbent else "stock")
        if spin_us := self.opts.handicap_us:
            self.result.update(baseline=f"stock + {spin_us:g} µs GPU spin per call (handicap control)",
                               handicap_us=spin_us)
        env = {**cache_env(), **seam_environment(bindings), **candidate_env, "CACHEON_SEAM_STRICT": "1",
               "SGLANG_PLUGINS": "cacheon"}
        self.result.update(bindings=list(bindings), tree_digest=tree_digest, swaps=count_swaps(windows, "candidate"))

        # evidence first: a kernel that never ran is never timed as a win
        resident, samples, ev, receipts = self._timed("resident", steps, windows, base, env)
        self.result.update(evidence=ev.to_json(), receipts=receipts, windows=self._windows_json(samples))
        self.save()
        stop = self._resident_outcome(resident, receipts, ev)
        if stop:
            return self.finish(*stop)
        speed = guard(judge(samples, cfg.speed), self._guard_samples(windows), cfg.speed.metric, cfg.speed)
        self.result["speed"] = speed.to_json()
        self.result["speed_by_metric"] = self._by_metric(windows)
        self.result["metric"] = cfg.speed.metric
        if self.opts.control == "stock-as-candidate":
            # stock vs stock through the candidate route: the role bias. Same kernels in both
            # roles, so there is no quality to grade and no crown to confirm.
            self.result["role_bias"] = speed.ratio - 1
            self.save()
            return self.finish(speed.verdict, f"control stock-as-candidate (role bias {speed.ratio - 1:+.3%}): "
                               + speed.reason)
        self.save()

        seqs = {"C": resident.step("quality-C")["sequences"], "B": resident.step("quality-B")["sequences"]}
        pristine = {**cache_env(), **seam_environment(())}
        teacher = self._engine("teacher", {**base, "steps": teacher_steps(cfg, seqs)}, pristine)
        if teacher.error:
            return self.finish("NO_DECISION", f"the pristine teacher engine failed (infrastructure): {teacher.error}")
        try:
            graded = {r: _sequences(seqs[r], teacher.step(f"T-{r}")["graded"]) for r in ("B", "C")}
        except TeacherAlignmentError as e:
            return self.finish("NO_DECISION", f"teacher alignment: {e}")
        mb, mc = q.metrics(graded["B"]), q.metrics(graded["C"])
        qv = q.grade(mb, mc, q.QualityPolicy.from_mapping(dict(cfg.quality.policy)))
        self.result["quality"] = q.verdict_to_json(qv)
        self.save()
        if qv.verdict != "PASS":
            return self.finish(qv.verdict, "quality: " + "; ".join(qv.reasons[:4]))
        if speed.verdict == "PASS" and cfg.speed.confirm_cycles:
            return self._confirm(speed, base, env)
        return self.finish(speed.verdict, "speed: " + speed.reason)

    def _confirm(self, first: SpeedVerdict, base: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
        """A crown is re-measured in a fresh engine on prompts never used before: a PASS that
        does not hold there is NO_DECISION, never a crown."""
        steps, windows = resident_steps(self.cfg, self.baseline, confirm=True)
        run, samples, ev, receipts = self._timed("confirm", steps, windows, base, env)
        self.result["confirm"] = {"evidence": ev.to_json(), "windows": self._windows_json(samples)}
        stop = self._resident_outcome(run, receipts, ev)
        if stop:
            return self.finish(*stop)
        again = guard(judge(samples, self.cfg.speed), self._guard_samples(windows), self.cfg.speed.metric,
                      self.cfg.speed)
        self.result["confirm"]["speed"] = again.to_json()
        self.result["confirm"]["speed_by_metric"] = self._by_metric(windows)
        if again.verdict != "PASS":
            return self.finish("NO_DECISION", f"speed PASS ({first.reason}) not confirmed in a fresh engine: {again.reason}")
        return self.finish("PASS", f"speed: {first.reason}; confirmed in a fresh engine: {again.reason}")


def qualify(cfg: ArenaConfig, bundle: Bundle | None, op: OpEntry, opts: RunOptions,
            incumbent: tuple[Bundle, OpEntry] | None = None) -> dict[str, Any]:
    """incumbent: the crowned (bundle, op) of the same slot; B and B′ then run it (head-to-head)."""
    if opts.engine_factory is None:
        preflight()
    return Qualification(cfg, bundle, op, opts, incumbent).run()
