"""The engine driver: one process per engine, started by the arena host in its own process group.

    python -m arena.engine.child --job-fd J --record-fd R

The job arrives as one JSON line on fd J (a pipe the host owns, never a file: it lists which
windows are timed and the host's nonces); one JSON line per record leaves on fd R (a pipe the
host reads and persists). Both fds are made non-inheritable at once and the process makes itself
non-dumpable (prctl(PR_SET_DUMPABLE, 0)): the scheduler ranks SGLang spawns from here run the
same uid and import the bundle, and this way they can neither inherit these pipes, ptrace this
process nor open /proc/<driver>/fd/* or its memory. No record is ever written to a file.

It builds the synthetic checkpoint if needed, starts one `sglang.Engine` (its scheduler ranks
load contribution code, and only when the host set the seam environment), and runs the steps in
order. Every record carries a nonce from the job (a step's own nonce, or the next lifecycle
nonce): the host accepts nothing else. Every RPC to the schedulers carries a nonce from the job
and is accepted only with exactly one answer per rank echoing it (seams/answers.py); anything
else is a forging attempt and ends the run with an error record of kind "forgery".

The "started" record carries "diag" (arena/engine/startdiag.py): where the start's time went as this
driver saw it (import vs Engine(), cache files compiled despite the seeds, compiler processes,
the ranks' CPU). It is ADVISORY: the scheduler ranks run contribution code under this uid and can
shape all of it, so no verdict reads it (job "start_diag": false turns it off).

Its job, its steps, the host's control lines (go/stop after a gate step, the quality sample, a
resident engine's next job) and every record it writes are defined in arena/engine/protocol.py,
which also reads the control lines here: anything else on the job pipe is forging.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib
import json
import os
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from arena.engine import protocol as P
from arena.engine import unpickle_guard
from arena.engine.protocol import clock_metrics
from arena.engine.startdiag import StartDiag, one_line

PR_SET_DUMPABLE = 4


def make_prompts(seed: int, n: int, length: int, low: int, high: int) -> list[list[int]]:
    """Fresh token-id prompts (never repeated across windows: the radix cache would skip prefill)."""
    r = random.Random(seed)
    return [[r.randrange(low, high) for _ in range(length)] for _ in range(n)]


class EvidenceError(RuntimeError):
    """The candidate provably never ran (fail closed before any timing)."""


class AbiError(EvidenceError):
    """It never ran because the engine's calls are outside the slot's ABI: the arena's defect."""


def harden(fds: tuple[int, ...]) -> None:
    """Non-dumpable, and the host's pipes closed in every exec'd child."""
    for fd in fds:
        os.set_inheritable(fd, False)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


class Driver:
    def __init__(self, job: dict[str, Any], record_fd: int, job_file: Any = None) -> None:
        self.job, self.fd, self.job_file = job, record_fd, job_file
        self.engine: Any = None
        self._life = list(job.get("lifecycle_nonces", []))
        self.kept: dict[str, dict[str, Any]] = {}
        self.answers: Any = _reader(job)

    def write(self, record: dict[str, Any]) -> None:
        data = (json.dumps(record) + "\n").encode()
        while data:
            data = data[os.write(self.fd, data) :]

    def emit(self, record: dict[str, Any], nonce: str | None = None) -> None:
        """A step record carries its step's nonce; any other the next lifecycle nonce. Nothing
        but the error record once a pickle from the engine's processes was refused (whatever
        SGLang made of the exception: arena/engine/unpickle_guard.py)."""
        if unpickle_guard.refused and record.get("op") != "error":
            raise unpickle_guard_error()
        if nonce is None:
            nonce = self._life.pop(0) if self._life else ""
        record["nonce"] = nonce
        record["t"] = time.time()
        self.write(record)

    def rpc(self, method: str, nonce: str | None, kind: str, **kw: Any) -> dict[int, dict[str, Any]]:
        """One collective RPC with the host's nonce; exactly one answer per rank echoing it.
        (An engine without answer ranks gets none: its RPCs cannot feed a verdict.)"""
        if not self.answers:
            self.engine.collective_rpc(method, **kw)
            return {}
        try:
            self.engine.collective_rpc(method, nonce=nonce, **kw)
        except Exception:
            self.answers.audit()  # a failure provoked by tampering with the answer logs is forging
            raise
        return self.answers.collect(nonce, kind)

    def start(self) -> None:
        kwargs = dict(self.job["engine_kwargs"])
        ckpt = self.job.get("checkpoint")
        if ckpt:
            t = time.perf_counter()
            if ckpt.get("kind") == "real":  # installed and verified by the host before any engine
                from types import SimpleNamespace

                info: Any = SimpleNamespace(path=Path(ckpt["dir"]), recipe_digest=ckpt["digest"], n_params=None)
            elif ckpt.get("kind") == "trained":
                from arena.model.train import train_checkpoint

                info = train_checkpoint(
                    ckpt["hf_config"],
                    Path(ckpt["dir"]),
                    int(ckpt["seed"]),
                    device=ckpt.get("device", "cuda"),
                    steps=int(ckpt["steps"]),
                )
            else:
                from arena.model.checkpoint import write_checkpoint

                info = write_checkpoint(
                    ckpt["hf_config"], Path(ckpt["dir"]), int(ckpt["seed"]), device=ckpt.get("device", "cuda")
                )
            kwargs["model_path"] = str(info.path)
            self.emit(
                {
                    "op": "checkpoint",
                    "path": str(info.path),
                    "recipe_digest": info.recipe_digest,
                    "n_params": info.n_params,
                    "s": round(time.perf_counter() - t, 2),
                }
            )
        if self.job.get("checkpoint_only"):  # the pristine step that writes it; engines see it read-only
            return
        import tempfile

        from cacheon_subnet.sockpath import check_tmpdir

        check_tmpdir(tempfile.gettempdir(), "arena engine")  # SGLang's ZMQ sockets: say why, not a bind error
        factory = self.job.get("engine_factory")
        diag = StartDiag() if self.job.get("start_diag", True) else None  # advisory: arena/engine/startdiag.py
        t = time.perf_counter()
        if factory:
            mod, _, attr = factory.partition(":")
            cls: Any = getattr(importlib.import_module(mod), attr)
        else:
            from sglang.srt.entrypoints.engine import Engine

            cls = Engine
        if diag:
            diag.phase("import_s")
        self.engine = cls(**kwargs)
        started: dict[str, Any] = {
            "op": "started",
            "s": round(time.perf_counter() - t, 2),
            "pid": os.getpid(),
            "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }  # GPU(s) this arena owns
        if diag:
            diag.phase("engine_s")
            started["diag"] = diag.finish()  # never read by a verdict: the ranks can shape all of it
            print(one_line(started["diag"]), file=sys.stderr, flush=True)
        self.emit(started)
        if self.answers:
            snap = self.rpc("cacheon_clock", self.job["start_rpc"], "clock")
            self.emit({"op": "snapshot", "answers": {"start": _str_keys(snap)}})
            self.early_evidence(snap)
        # no collector pauses inside timed windows: freeze what exists now (driver and, where
        # SGLang offers it, its tokenizer manager)
        gc.collect()
        gc.freeze()
        if hasattr(self.engine, "freeze_gc"):
            self.engine.freeze_gc()

    def early_evidence(self, snap: dict[int, dict[str, Any]]) -> None:
        """With CUDA graphs on, start-up captured the graphs through the candidate route: a
        candidate that did not fire then never will. Stop now instead of timing 20 windows."""
        ev = self.job.get("early_evidence")
        if not ev:
            return
        fired = {r: a.get("counts", {}).get(ev["slot"], {}).get("fired", 0) for r, a in snap.items()}
        missing = [r for r in ev["ranks"] if not fired.get(r)]
        abi = {
            r: {
                why: n for why, n in ((a.get("declines") or {}).get(ev["slot"]) or {}).items() if str(why).startswith("abi:")
            }
            for r, a in snap.items()
        }
        if missing and any(abi.get(r) for r in missing):
            raise AbiError(
                f"{ev['slot']}: every call while capturing graphs on scheduler rank(s) {missing} was "
                f"outside the slot's ABI ({ {r: abi[r] for r in missing if abi.get(r)} })"
            )
        if missing:
            raise EvidenceError(
                f"{ev['slot']}: no candidate call while capturing graphs on scheduler rank(s) "
                f"{missing} (answers: {fired or 'none'}): the kernel never runs in this engine"
            )

    def prompts(self, p: dict[str, Any]) -> list[list[int]]:
        if p.get("source") == "text":
            from arena.model.prompts import text_prompts

            return text_prompts(self.job["text_tokens"], p["seed"], p["n"], p["len"])
        if p.get("source") == "corpus":
            from arena.model.train import corpus_sequences, load_corpus

            if not hasattr(self, "_corpus"):
                self._corpus = load_corpus()
            return corpus_sequences(self._corpus, p["n"], p["len"], p["seed"])
        return make_prompts(p["seed"], p["n"], p["len"], p["low"], p["high"])

    def generate(self, step: dict[str, Any]) -> dict[str, Any]:
        prompts = self.prompts(step["prompts"])
        sp = {"max_new_tokens": int(step["max_new_tokens"]), "ignore_eos": True, "temperature": 0.0}
        k = int(step.get("top_k", 0))
        extra = {"return_logprob": True, "top_logprobs_num": k} if k else {}
        rpc = step.get("rpc") or []
        before = self.rpc("cacheon_clock", rpc[0], "clock") if self.answers else {}
        wall = time.time()
        t = time.perf_counter()
        outs = self.engine.generate(input_ids=prompts, sampling_params=sp, **extra)
        dt = time.perf_counter() - t
        n_out = sum(len(o["output_ids"]) for o in outs)
        rec: dict[str, Any] = {
            "op": "generate",
            "tag": step["tag"],
            "s": dt,
            "out_tokens": n_out,
            "at": round(wall, 3),
            "in_tokens": sum(len(x) for x in prompts),
            "output_tokens_per_s": n_out / dt,
            "total_tokens_per_s": (n_out + sum(map(len, prompts))) / dt,
        }
        if self.answers:
            after = self.rpc("cacheon_clock", rpc[1], "clock")
            rec["answers"] = {"before": _str_keys(before), "after": _str_keys(after)}
            if self.job.get("forward_clock"):
                rec.update(clock_metrics(after, sorted(self.answers.ranks), n_out, rec["in_tokens"]))
        if step.get("keep"):
            self.kept[step["tag"]] = {"prompts": step["prompts"], "outs": [P.compact(o, k) for o in outs]}
            rec["kept"] = len(outs)
        if step.get("keep_outputs"):  # scripts' inline outputs (seam proof); never a graded window
            rec["sequences"] = [{"key": i, "prompt": p, **P.compact(o, k)} for i, (p, o) in enumerate(zip(prompts, outs))]
        return rec

    def teacher(self, step: dict[str, Any]) -> dict[str, Any]:
        """Teacher-force each (prompt, cont): T's logprob of every cont token and its top-k there."""
        seqs = step["sequences"]
        k = int(step["top_k"])
        t = time.perf_counter()
        outs = self.engine.generate(
            input_ids=[s["prompt"] + s["cont"] for s in seqs],
            sampling_params={"max_new_tokens": 1, "temperature": 0.0, "ignore_eos": True},
            return_logprob=True,
            top_logprobs_num=k,
            # SGLang reports input logprobs as [None] + values[:-1] from logprob_start_len on
            # (logprob_result_processor.py:37), so start one token early to get every cont token
            logprob_start_len=[len(s["prompt"]) - 1 for s in seqs],
        )
        graded = []
        for s, o in zip(seqs, outs):
            mi = o.get("meta_info", {})
            graded.append(
                {
                    "key": s["key"],
                    "tokens": P.pairs(mi.get("input_token_logprobs")),
                    "top": [P.pairs(x) for x in mi.get("input_top_logprobs") or []],
                }
            )
        return {"op": "teacher", "tag": step["tag"], "s": time.perf_counter() - t, "graded": graded}

    def install(self, step: dict[str, Any]) -> dict[str, Any]:
        """A resident timed engine: the job's contribution into the ranks (seams/resident.py). Its
        capture is an engine start's: a candidate that did not fire then never will."""
        t = time.perf_counter()
        ans = self.rpc(
            "cacheon_install",
            (step.get("rpc") or [None])[0],
            "install",
            env=dict(step["env"]),
            answers=self.job["answers"]["dir"],
        )
        self.early_evidence(ans)
        return {"op": "install", "s": time.perf_counter() - t, "answers": {"install": _str_keys(ans)}}

    def remove(self, step: dict[str, Any]) -> dict[str, Any]:
        t = time.perf_counter()
        ans = self.rpc("cacheon_remove", (step.get("rpc") or [None])[0], "remove")
        return {"op": "remove", "s": time.perf_counter() - t, "answers": {"remove": _str_keys(ans)}}

    def state(self, step: dict[str, Any]) -> dict[str, Any]:
        t = time.perf_counter()
        ans = self.rpc("cacheon_state", (step.get("rpc") or [None])[0], "state")
        return {"op": "state", "s": time.perf_counter() - t, "answers": {"state": _str_keys(ans)}}

    def canary(self, step: dict[str, Any]) -> dict[str, Any]:
        """Fixed prompts on the stock route, every output token with its logprob and top-k: the host
        compares them bit for bit with the engine's first canary (arena/engine/resident_timed.py)."""
        prompts = self.prompts(step["prompts"])
        k = int(step["top_k"])
        t = time.perf_counter()
        outs = self.engine.generate(
            input_ids=prompts,
            sampling_params={"max_new_tokens": int(step["max_new_tokens"]), "ignore_eos": True, "temperature": 0.0},
            return_logprob=True,
            top_logprobs_num=k,
        )
        return {"op": "canary", "s": time.perf_counter() - t, "outputs": [P.compact(o, k) for o in outs]}

    def route(self, step: dict[str, Any]) -> dict[str, Any]:
        t = time.perf_counter()
        ans = self.rpc(
            "cacheon_route", (step.get("rpc") or [None])[0], "route", route=step["route"], epoch=int(step["epoch"])
        )
        return {
            "op": "route",
            "route": step["route"],
            "epoch": step["epoch"],
            "s": time.perf_counter() - t,
            "answers": {"route": _str_keys(ans)},
        }

    def go(self, step: dict[str, Any]) -> bool:
        """After a gate step: one line on the job pipe, the host's go/stop with the step's gate nonce."""
        line = self.job_file.readline() if self.job_file else ""
        if not line:
            raise RuntimeError(f"the host closed the job pipe at gate {step.get('tag')}")
        return P.read_gate(line, step.get("gate_nonce"), step.get("tag"))

    def sample(self) -> None:
        """The host names the sequences to grade only now, after every window has run."""
        self.emit({"op": "outputs_ready", "kept": {tag: len(v["outs"]) for tag, v in self.kept.items()}})
        line = self.job_file.readline() if self.job_file else ""
        if not line:
            raise RuntimeError("the host closed the job pipe before naming the quality sample")
        want = P.read_sample(line, self.job.get("sample_nonce"))
        seqs: dict[str, list[dict[str, Any]]] = {}
        for tag, keys in want.items():
            kept = self.kept[tag]
            prompts = self.prompts(kept["prompts"])
            seqs[tag] = [{"key": int(i), "prompt": prompts[int(i)], **kept["outs"][int(i)]} for i in keys]
        self.emit({"op": "sample", "sequences": seqs})

    def steps(self) -> None:
        stopped = False
        for step in self.job["steps"]:
            if stopped and not step.get("post"):
                continue  # the host's sequential test decided: no more windows (a post-condition still runs)
            rec = getattr(self, P.StepOp(step["op"]).value)(step)  # a closed set: never any other method
            rec["step"] = step.get("tag", step["op"])
            self.emit(rec, step["nonce"])
            if step.get("gate") and not self.go(step):
                stopped = True
        if self.kept:
            self.sample()
        self.emit({"op": "done"})

    def next_job(self) -> dict[str, Any] | None:
        """A resident engine (arena/engine/resident.py): after "done", one line on the job pipe hands
        over the next job, echoing this job's `serve` nonce; a stop, or the pipe closed, ends it."""
        line = self.job_file.readline() if self.job_file else ""
        return P.read_next(line, self.job.get("serve")) if line else None

    def run(self) -> int:
        try:
            self.start()
            while True:
                self.steps()
                if not self.job.get("serve"):
                    return 0
                nxt = self.next_job()
                if nxt is None:
                    return 0
                # the same engine, a new job: its own nonces and answers dir; nothing kept from the last one
                self.job, self._life, self.kept = nxt, list(nxt.get("lifecycle_nonces", [])), {}
                self.answers = _reader(nxt)
        except BaseException as e:  # noqa: BLE001 - the host reads the reason from the record pipe
            from seams.answers import ForgeryError

            if unpickle_guard.refused and not isinstance(e, ForgeryError):  # whatever SGLang made of the refusal
                e = unpickle_guard_error(e)
            kind = (
                "abi"
                if isinstance(e, AbiError)
                else "evidence"
                if isinstance(e, EvidenceError)
                else "forgery"
                if isinstance(e, ForgeryError)
                else "arena-gap"
                if isinstance(e, unpickle_guard.AllowlistGap)
                else "engine"
            )
            self.emit(
                {
                    "op": "error",
                    "kind": kind,
                    "error": str(e)[-2000:] if kind != "engine" else repr(e)[-2000:],
                    "trace": traceback.format_exc()[-4000:],
                }
            )
            return 3
        finally:
            if self.engine is not None:
                try:
                    self.engine.shutdown()
                except Exception:  # noqa: BLE001
                    pass


def unpickle_guard_error(cause: BaseException | None = None) -> Exception:
    """What the driver ends with once its unpickle guard refused something (arena/engine/unpickle_guard.py):
    code is forging; a class of the engine's own packages the allowlist lacks is the arena's gap
    (NO_DECISION naming it, never a FAIL charged to the candidate whose kernel happened to run)."""
    from seams.answers import ForgeryError

    why = f" ({cause!r})" if cause is not None else ""
    if unpickle_guard.forged:
        return ForgeryError(
            f"the engine's processes sent the driver code to unpickle: {unpickle_guard.forged[:3]}{why}"[:2000]
        )
    return unpickle_guard.AllowlistGap(
        f"the driver's unpickle allowlist (arena/engine/unpickle_guard.py) lacks the message "
        f"class(es) {unpickle_guard.refused[:3]}{why}"[:2000]
    )


def _reader(job: dict[str, Any]) -> Any:
    """The job's nonce-bound answer reader (None: its engine answers no RPC)."""
    ans = job.get("answers")
    if not ans:
        return None
    from seams.answers import AnswerReader

    return AnswerReader(ans["dir"], list(ans["ranks"]))


def _str_keys(d: dict[int, Any]) -> dict[str, Any]:
    return {str(k): v for k, v in d.items()}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="arena.engine.child")
    ap.add_argument("--job-fd", type=int, required=True)
    ap.add_argument("--record-fd", type=int, required=True)
    a = ap.parse_args(argv[1:])
    os.set_inheritable(a.job_fd, False)
    os.set_inheritable(a.record_fd, False)
    job_file = os.fdopen(a.job_fd, "r", encoding="utf-8")
    job = json.loads(job_file.readline())  # before any engine process exists
    driver = Driver(job, a.record_fd, job_file)
    try:
        harden((a.job_fd, a.record_fd))
    except OSError as e:  # fail closed: no engine starts in a driver others could read
        driver.emit({"op": "error", "kind": "harden", "error": f"cannot harden the driver: {e}"})
        return 4
    unpickle_guard.install()  # the engine's processes run contribution code: their pickles are data only
    return driver.run()


if __name__ == "__main__":
    from cacheon_subnet.procs import run_main

    run_main(lambda: main(sys.argv))  # the engine is shut down by now: skip the interpreter's teardown
