"""The engine driver: one process per engine, started by the arena host in its own process group.

    python -m arena.engine_child JOB.json

It builds the synthetic checkpoint if needed, starts one `sglang.Engine` (the Engine spawns the
scheduler ranks; only they load contribution code, and only when the host set the seam
environment), runs the job's steps in order and appends one JSON line per step to the job's
result file as soon as the step ends, so a crash or a kill loses at most the step in flight.

This process holds the timer: it never imports contribution code (the plugin's driver role is a
pass-through; candidates load only inside `Scheduler.__init__`).

Steps:
  {"op": "generate", "tag", "prompts": {seed, n, len, low, high}, "max_new_tokens", "top_k",
   "timed": bool, "keep_outputs": bool}
  {"op": "route", "route": "candidate" | "stock", "epoch"}      -> Engine.collective_rpc
  {"op": "teacher", "tag", "sequences": [{"key", "prompt", "cont"}], "top_k"}
Job key "forward_clock": {"dir", "ranks"} -> each timed window also reports the GPU seconds of its
forward passes and of its decode steps alone (seams/forward_clock.py): `gpu_tokens_per_s`,
`decode_gpu_tokens_per_s`.
"""

from __future__ import annotations

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


def make_prompts(seed: int, n: int, length: int, low: int, high: int) -> list[list[int]]:
    """Fresh token-id prompts (never repeated across windows: the radix cache would skip prefill)."""
    r = random.Random(seed)
    return [[r.randrange(low, high) for _ in range(length)] for _ in range(n)]


def _pairs(items: Any) -> list[list[float | int]]:
    """SGLang logprob tuples (logprob, token_id, text) -> [token_id, logprob]; None stays None."""
    return [[int(t[1]), float(t[0])] for t in (items or []) if t is not None and t[0] is not None]


class EvidenceError(RuntimeError):
    """The candidate provably never ran (fail closed before any timing)."""


class Driver:
    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.out = Path(job["result_path"])
        self.engine: Any = None

    def emit(self, record: dict[str, Any]) -> None:
        record["t"] = time.time()
        with open(self.out, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def start(self) -> None:
        kwargs = dict(self.job["engine_kwargs"])
        ckpt = self.job.get("checkpoint")
        if ckpt:
            t = time.perf_counter()
            if ckpt.get("kind") == "trained":
                from arena.train import train_checkpoint

                info = train_checkpoint(ckpt["hf_config"], Path(ckpt["dir"]), int(ckpt["seed"]),
                                        device=ckpt.get("device", "cuda"), steps=int(ckpt["steps"]))
            else:
                from arena.checkpoint import write_checkpoint

                info = write_checkpoint(ckpt["hf_config"], Path(ckpt["dir"]), int(ckpt["seed"]),
                                        device=ckpt.get("device", "cuda"))
            kwargs["model_path"] = str(info.path)
            self.emit({"op": "checkpoint", "path": str(info.path), "recipe_digest": info.recipe_digest,
                       "n_params": info.n_params, "s": round(time.perf_counter() - t, 2)})
        factory = self.job.get("engine_factory")
        t = time.perf_counter()
        if factory:
            mod, _, attr = factory.partition(":")
            cls = getattr(importlib.import_module(mod), attr)
        else:
            from sglang.srt.entrypoints.engine import Engine as cls  # noqa: N813
        self.engine = cls(**kwargs)
        self.emit({"op": "started", "s": round(time.perf_counter() - t, 2), "pid": os.getpid()})
        self.early_evidence()
        # no collector pauses inside timed windows: freeze what exists now (driver and, where
        # SGLang offers it, its tokenizer manager)
        gc.collect()
        gc.freeze()
        if hasattr(self.engine, "freeze_gc"):
            self.engine.freeze_gc()

    def early_evidence(self) -> None:
        """With CUDA graphs on, start-up captured the graphs through the candidate route: a
        candidate that did not fire then never will. Stop now instead of timing 20 windows."""
        ev = self.job.get("early_evidence")
        if not ev:
            return
        fired = {}
        for p in Path(ev["receipts_dir"]).glob("receipt-scheduler-*.json"):
            doc = json.loads(p.read_text())
            fired[doc["rank"]] = doc.get("slots", {}).get(ev["slot"], {}).get("fired", 0)
        missing = [r for r in ev["ranks"] if not fired.get(r)]
        if missing:
            raise EvidenceError(f"{ev['slot']}: no candidate call while capturing graphs on scheduler rank(s) "
                                f"{missing} (receipts: {fired or 'none'}): the kernel never runs in this engine")

    def prompts(self, p: dict[str, Any]) -> list[list[int]]:
        if p.get("source") == "corpus":
            from arena.train import corpus_sequences, load_corpus

            if not hasattr(self, "_corpus"):
                self._corpus = load_corpus()
            return corpus_sequences(self._corpus, p["n"], p["len"], p["seed"])
        return make_prompts(p["seed"], p["n"], p["len"], p["low"], p["high"])

    def generate(self, step: dict[str, Any]) -> dict[str, Any]:
        prompts = self.prompts(step["prompts"])
        sp = {"max_new_tokens": int(step["max_new_tokens"]), "ignore_eos": True, "temperature": 0.0}
        k = int(step.get("top_k", 0))
        extra = {"return_logprob": True, "top_logprobs_num": k} if k else {}
        clock = self.job.get("forward_clock") if step.get("timed") else None
        if clock:  # drop the spans of everything since the last read (swaps, settle windows)
            self.engine.collective_rpc("cacheon_clock", tag=f"{step['tag']}:before")
        wall = time.time()
        t = time.perf_counter()
        outs = self.engine.generate(input_ids=prompts, sampling_params=sp, **extra)
        dt = time.perf_counter() - t
        n_out = sum(len(o["output_ids"]) for o in outs)
        rec: dict[str, Any] = {"op": "generate", "tag": step["tag"], "s": dt, "out_tokens": n_out, "at": round(wall, 3),
                               "in_tokens": sum(len(x) for x in prompts),
                               "output_tokens_per_s": n_out / dt, "total_tokens_per_s": (n_out + sum(map(len, prompts))) / dt}
        if clock:
            rec.update(self.read_clock(step["tag"], clock, n_out, rec["in_tokens"]))
        if step.get("keep_outputs"):
            seqs = []
            for i, (prompt, o) in enumerate(zip(prompts, outs)):
                s = {"key": i, "prompt": prompt, "cont": list(o["output_ids"])}
                if k:
                    mi = o.get("meta_info", {})
                    s["logprobs"] = _pairs(mi.get("output_token_logprobs"))
                    s["top"] = [_pairs(x) for x in mi.get("output_top_logprobs") or []]
                seqs.append(s)
            rec["sequences"] = seqs
        return rec

    def read_clock(self, tag: str, clock: dict[str, Any], n_out: int, n_in: int) -> dict[str, Any]:
        """The forward clock's GPU seconds for this window: the slowest rank bounds a TP step.
        A missing rank leaves the window without the metric (the judge then lacks it: never a win)."""
        from seams.forward_clock import read_clock

        self.engine.collective_rpc("cacheon_clock", tag=tag)
        recs = read_clock(clock["dir"], tag)
        ranks = {r["rank"]: r for r in recs}
        if sorted(ranks) != sorted(clock["ranks"]) or any(r["forwards"] == 0 or r["gpu_s"] <= 0 for r in ranks.values()):
            return {"clock_error": f"forward clock: ranks {sorted(ranks)} of {clock['ranks']} reported "
                                   f"({[(r['rank'], r['forwards']) for r in recs]})"}
        gpu_s = max(r["gpu_s"] for r in ranks.values())
        out = {"gpu_s": gpu_s, "forwards": max(r["forwards"] for r in ranks.values()), "gpu_tokens_per_s": n_out / gpu_s}
        decode_s = max(r.get("decode_gpu_s", 0.0) for r in ranks.values())
        if decode_s > 0 and all(r.get("decodes") for r in ranks.values()):  # decode steps (graph replays)
            out.update(decode_gpu_s=decode_s, decodes=max(r["decodes"] for r in ranks.values()),
                       decode_gpu_tokens_per_s=n_out / decode_s)
            # the rest of the forward spans: the prefill (eager extend forwards), per prompt token
            extend_s = max(r["gpu_s"] - r.get("decode_gpu_s", 0.0) for r in ranks.values())
            if extend_s > 0 and n_in > 0:
                out.update(extend_gpu_s=extend_s, extend_gpu_tokens_per_s=n_in / extend_s)
        return out

    def teacher(self, step: dict[str, Any]) -> dict[str, Any]:
        """Teacher-force each (prompt, cont): T's logprob of every cont token and its top-k there."""
        seqs = step["sequences"]
        k = int(step["top_k"])
        t = time.perf_counter()
        outs = self.engine.generate(
            input_ids=[s["prompt"] + s["cont"] for s in seqs],
            sampling_params={"max_new_tokens": 1, "temperature": 0.0, "ignore_eos": True},
            return_logprob=True, top_logprobs_num=k,
            # SGLang reports input logprobs as [None] + values[:-1] from logprob_start_len on
            # (logprob_result_processor.py:37), so start one token early to get every cont token
            logprob_start_len=[len(s["prompt"]) - 1 for s in seqs])
        graded = []
        for s, o in zip(seqs, outs):
            mi = o.get("meta_info", {})
            graded.append({"key": s["key"], "tokens": _pairs(mi.get("input_token_logprobs")),
                           "top": [_pairs(x) for x in mi.get("input_top_logprobs") or []]})
        return {"op": "teacher", "tag": step["tag"], "s": time.perf_counter() - t, "graded": graded}

    def route(self, step: dict[str, Any]) -> dict[str, Any]:
        t = time.perf_counter()
        self.engine.collective_rpc("cacheon_route", route=step["route"], epoch=int(step["epoch"]))
        return {"op": "route", "route": step["route"], "epoch": step["epoch"], "s": time.perf_counter() - t}

    def run(self) -> int:
        try:
            self.start()
            for step in self.job["steps"]:
                rec = getattr(self, step["op"])(step)
                rec["step"] = step.get("tag", step["op"])
                self.emit(rec)
            self.emit({"op": "done"})
            return 0
        except BaseException as e:  # noqa: BLE001 - the host reads the reason from the result file
            self.emit({"op": "error", "kind": "evidence" if isinstance(e, EvidenceError) else "engine",
                       "error": str(e)[-2000:] if isinstance(e, EvidenceError) else repr(e)[-2000:],
                       "trace": traceback.format_exc()[-4000:]})
            return 3
        finally:
            if self.engine is not None:
                try:
                    self.engine.shutdown()
                except Exception:  # noqa: BLE001
                    pass


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[1]).read_text())
    return Driver(job).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
