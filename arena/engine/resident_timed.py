"""A timed engine kept across contributions (issue 30 item 4; `[engine] resident`; docs/arena.md
"Resident timed engine").

Why: every verdict started its own timed engine (39 + 36 + 34 s of engine starts in a crowning
verdict on the H200), most of a clear loser's time. Here one engine per GPU (per arena, bindings and
devices) runs consecutive contributions: each one's sealed tree is installed and removed through
validator-owned RPCs (seams/resident.py, nonce-bound answers from every rank, in an answers dir of
its own), and after each one the post-condition (arena/engine/postcondition.py) must hold before the
engine runs another: the stock canary window bit for bit as the engine's first, the weights and
buffers digest unchanged, nothing of the contribution left in the ranks or on the host's side.
Any difference (or any engine failure) stops the engine; the next verdict starts a fresh one.

The confirmation engine and a fresh teacher never share the GPU with it (arena/run.py releases it
first): a crown is still confirmed in a fresh engine.
"""

from __future__ import annotations

import atexit
import hashlib
import itertools
import json
import os
import secrets
import shutil
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from arena.engine import postcondition as pc
from arena.engine.host import EngineRun, EngineSpec, _wait_gpu_free, gpu_memory_used_mib
from arena.engine.postcondition import PostCondition
from arena.engine.resident import ResidentEngine
from cacheon_subnet import sandbox
from cacheon_subnet.env import ENGINE_TREE, FORWARD_CLOCK, RECEIPT_DIR
from cacheon_subnet.log import get_logger
from cacheon_subnet.sandbox.fsview import reclaim_tree
from seams.activate import RESIDENT_ENV
from seams.resident import ANSWERS_ENV, TREES_ENV

log = get_logger("arena.engine.resident_timed")
Choose = Callable[[dict[str, Any]], dict[str, Any]]
Gate = Callable[[tuple[dict[str, Any], ...]], bool]


def _failed(run: EngineRun, why: str) -> EngineRun:
    """The run as an engine failure (never read as a verdict's windows)."""
    return replace(run, records=run.records + ({"op": "error", "kind": "engine", "error": why},))


def move(src: Path, dst: Path) -> None:
    """A job's answers dir into the verdict's workdir, for the record (the host's from now on)."""
    sandbox.remove_tree(dst)
    try:
        os.rename(src, dst)
    except OSError:  # another filesystem
        shutil.copytree(src, dst, symlinks=True)
        sandbox.remove_tree(src)
    reclaim_tree(dst)


class TimedEngine:
    """One timed engine in serve mode and what its contributions are checked against."""

    def __init__(self, spec: EngineSpec, home: Path, key: str, canary: dict[str, Any], post: list[dict[str, Any]]) -> None:
        self.home, self.key, self.canary, self.post = home, key, canary, post
        self.answers, self.trees = home / "answers", home / "trees"
        start = self.answers / "start"
        for d in (start, self.trees):
            d.mkdir(parents=True, exist_ok=True)
        os.chmod(self.trees, 0o755)
        env = {
            **spec.env,
            RESIDENT_ENV: "1",
            TREES_ENV: str(self.trees),
            ANSWERS_ENV: str(self.answers),
            RECEIPT_DIR.name: str(start),
            FORWARD_CLOCK.name: "1",
        }
        spec = replace(spec, env=env, rw_paths=(str(self.answers),), ro_paths=(*spec.ro_paths, str(self.trees)))
        self.visible = spec.env.get("CUDA_VISIBLE_DEVICES")
        self.gpu_baseline = gpu_memory_used_mib(self.visible)  # what its GPUs held before it: back to that at close
        self.engine = ResidentEngine(spec, home, watch_disk=True)
        st = os.stat(self.answers)
        self.owner = (st.st_uid, st.st_gid)  # the engine's uid: the wall handed it the root at launch
        os.chown(self.answers, os.getuid(), os.getgid())  # the root is the host's again: the engine
        os.chmod(self.answers, 0o755)  # writes only into the job dirs the host makes there
        self.ranks = spec.ranks
        self.reference: dict[str, Any] | None = None
        self.contributions = 0
        self.cache_files: set[str] = set()
        self.start_dir: dict[str, tuple[int, int]] = {}
        self.scratch: dict[str, tuple[int, int]] = {}

    def start(self, base: dict[str, Any], workdir: Path, timeout_s: float) -> EngineRun:
        """The engine's first job, before any contribution: the canary and digest every later one must equal."""
        first = {k: v for k, v in base.items() if k != "early_evidence"}  # nothing is installed yet
        job = {**first, "steps": [self.canary, *self.post[-1:]], "answers": {"dir": str(self.answers / "start")}}
        run = self.engine.run("resident-reference", job, workdir, timeout_s, ranks=self.ranks)
        self.reference = None if run.error else pc.reading(run)
        self.cache_files = pc.files_of(self.engine.caches)
        self.start_dir = pc.listing(self.answers / "start")  # written once, by this job: never again
        self.scratch = self._scratch()
        return run

    def run(
        self,
        name: str,
        base: dict[str, Any],
        steps: list[dict[str, Any]],
        install: dict[str, str],
        workdir: Path,
        receipts_dir: Path,
        timeout_s: float,
        choose: Choose | None,
        gate: Gate | None,
    ) -> tuple[EngineRun, PostCondition]:
        """One contribution: install, the verdict's steps, the post-condition steps; then the host's checks."""
        assert self.reference is not None
        jobdir = self.job_dir()
        env, tree = dict(install), None
        if install.get(ENGINE_TREE.name):  # a copy in the dir the engine sees read-only
            tree = self.trees / f"t-{jobdir.name}"
            shutil.copytree(install[ENGINE_TREE.name], tree, symlinks=True)
            env[ENGINE_TREE.name] = str(tree)
        job = {
            **base,
            "steps": [{"op": "install", "tag": "install", "env": env}, *steps, *self.post],
            "answers": {"dir": str(jobdir)},
        }
        self.contributions += 1
        try:
            run = self.engine.run(name, job, workdir, timeout_s, ranks=self.ranks, choose=choose, gate=gate)
        finally:
            held = pc.open_under(
                sandbox.members(self.engine.proc) if self.engine.proc.poll() is None else [],
                [p for p in (jobdir, tree) if p],
            )
            if self.engine.watch is not None and self.engine.watch.breach:  # what it wrote must not outlive it
                sandbox.remove_tree(jobdir)
                sandbox.remove_tree(receipts_dir)
                receipts_dir.mkdir(parents=True)
            else:
                move(jobdir, receipts_dir)
            if tree is not None:
                sandbox.remove_tree(tree)
        reasons = self.verify(run, held)
        scratch, self.scratch = self.scratch, self._scratch()
        added = sorted(set(self.scratch) - set(scratch))  # advisory: SGLang may write its scratch (H200)
        deleted, self.cache_files = pc.sweep(self.engine.caches, self.cache_files)
        timing = {t: run.step(t).get("s") for t in ("install", *pc.POST_TAGS) if _has(run, t)}
        post = PostCondition(
            not reasons,
            tuple(reasons),
            self.contributions,
            self.contributions > 1,
            {
                "seconds": timing,
                "cache_files_deleted": deleted,
                "engine_pid": self.engine.proc.pid,
                "scratch_added": len(added),
                "scratch_added_names": added[:10],
            },
        )
        if not post.ok:
            self.engine.poisoned = self.engine.poisoned or f"post-condition: {post.reason}"
        return run, post

    def _scratch(self) -> dict[str, tuple[int, int]]:
        """What the engine's scratch, /tmp and /dev/shm hold (host-side: the tmpfs the wall mounted
        for it, or the scratch dir itself in weak mode). Read after each job, reported, not judged."""
        fs = getattr(self.engine.proc, "cacheon_fs", None)
        roots = [Path(fs) / d for d in ("scratch", "tmp", "shm")] if fs else [self.home / "scratch"]
        return {f"{r.name}/{k}": v for r in roots for k, v in pc.listing(r).items()}

    def job_dir(self) -> Path:
        """A fresh answers dir for one contribution, under a name nothing could guess before now,
        the engine's to write: nothing an earlier contribution's turn wrote is ever read as its."""
        d = self.answers / f"job-{secrets.token_hex(8)}"
        d.mkdir(mode=0o755)
        os.chown(d, *self.owner)
        return d

    def verify(self, run: EngineRun, held: list[str]) -> list[str]:
        """The post-condition (arena/engine/postcondition.py): the ranks' answers against the engine's first
        reading, then what the host sees of the engine's processes and dirs."""
        assert self.reference is not None
        why = (
            [f"the engine failed during the job: {str(run.error)[:300]}"]
            if run.error
            else pc.check(run, self.reference, self.ranks)
        )
        why += [f"an engine process holds a file of the contribution's dirs open: {h}" for h in held[:3]]
        why += [
            f"an entry the host did not make in the engine's answers dir: {n}"
            for n in pc.unexpected(self.answers, ("start",))
        ]
        if pc.listing(self.answers / "start") != self.start_dir:
            why.append("the engine's first answers dir changed after its reference job (only a job's own dir is written)")
        return why + [
            f"an entry the host did not make in the engine's trees dir: {n}" for n in pc.unexpected(self.trees, ())
        ]

    def close(self) -> None:
        """Stop it, then wait until its GPUs hold what they held before it (the confirmation engine
        or a fresh T starts next on them, as after a one-shot engine)."""
        self.engine.close()
        for d in (self.answers, self.trees):
            sandbox.remove_tree(d)  # the log stays
        free = _wait_gpu_free(self.gpu_baseline, 30.0, self.visible)
        if free is False:
            log.warning("arena.engine.resident_timed.gpu_busy", home=str(self.home))


def _has(run: EngineRun, tag: str) -> bool:
    try:
        run.step(tag)
        return True
    except KeyError:
        return False


def timed_key(spec: EngineSpec) -> str:
    """What makes two timed engines the same: the job base (engine kwargs, checkpoint, factory,
    prompt source), the environment (armed bindings, strictness, devices), the ranks and the view."""
    doc = {
        "job": {k: v for k, v in spec.job.items() if k not in ("steps", "answers", "early_evidence")},
        "env": dict(spec.env),
        "isolate_network": spec.isolate_network,
        "ro": list(spec.ro_paths),
        "ranks": list(spec.ranks),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]


class TimedPool:
    """The resident timed engines of this process: at most one per device set (they hold the GPU)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._engines: dict[str, TimedEngine] = {}
        self._started = itertools.count(1)  # next() is atomic: engines of two devices start at once

    def _slot(self, devices: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(devices, threading.Lock())

    def run(
        self,
        spec: EngineSpec,
        steps: list[dict[str, Any]],
        install: dict[str, str],
        *,
        workdir: Path,
        receipts_dir: Path,
        home: Path,
        canary: dict[str, Any],
        post: list[dict[str, Any]],
        max_jobs: int,
        start_timeout_s: float | None,
        choose: Choose | None = None,
        gate: Gate | None = None,
    ) -> tuple[list[EngineRun], PostCondition]:
        """Run one contribution in the resident engine of spec's devices (a fresh one when there is
        none, its key differs, it is spent or unusable). Returns the engine's runs for this verdict
        (its reference job first, when it started now) and the post-condition."""
        devices, key = spec.env.get("CUDA_VISIBLE_DEVICES", ""), timed_key(spec)
        base = {k: v for k, v in spec.job.items() if k != "steps"}
        runs: list[EngineRun] = []
        with self._slot(devices):
            t = self._engines.get(devices)
            if t is not None and (t.key != key or not t.engine.alive or t.contributions >= max_jobs):
                self._drop(devices)
                t = None
            if t is None:
                name = "".join(c if c.isalnum() else "-" for c in devices) or "any"
                t = self._engines[devices] = TimedEngine(
                    spec, home / name / f"{os.getpid()}-{next(self._started)}", key, canary, post
                )
                try:
                    ref = t.start(base, workdir, spec.timeout_s + (start_timeout_s or 0.0))
                except BaseException:
                    self._drop(devices)
                    raise
                runs.append(ref)
                if t.reference is None:
                    self._drop(devices)
                    why = f"the resident timed engine did not read its first canary and digest: {ref.error or 'no reading'}"
                    return [_failed(ref, why)], PostCondition(False, (why,))
            try:
                run, result = t.run("resident", base, steps, install, workdir, receipts_dir, spec.timeout_s, choose, gate)
            except BaseException:  # a shutdown (or a host bug): this engine runs nothing more
                self._drop(devices)
                raise
            runs.append(run)
            if not result.ok:
                log.warning("arena.engine.resident_timed.restart", devices=devices, why=result.reason[:300])
                self._drop(devices)
            return runs, result

    def release(self, devices: str | None) -> bool:
        """Stop the resident engine of these devices (another engine needs the GPU: confirmation, T)."""
        d = devices or ""
        with self._slot(d):
            had = d in self._engines
            self._drop(d)
            return had

    def _drop(self, devices: str) -> None:
        t = self._engines.pop(devices, None)
        if t is not None:
            t.close()

    def close_all(self) -> None:
        with self._lock:
            keys = list(self._engines)
        for k in keys:
            with self._slot(k):
                self._drop(k)

    def __enter__(self) -> TimedPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_all()


POOL = TimedPool()
atexit.register(POOL.close_all)
