"""The contamination test's contributions and runner (docs/arena.md "Resident timed engine";
tests/arena/test_resident_contamination.py). A plain module, not a conftest.

Contribution A tries, one variant per bundle, to outlive its turn in a resident timed engine;
B (arena_harness.torch_bundle) runs next. Each variant says whether the static allowlist admits it
(POLICY_CLEAN, checked by the test) and, when it cannot, why, and how it maps to the CPU fake
engine. Variants the allowlist refuses are sealed unscanned, as the arena corpus does
(tests/adversarial/test_arena_corpus.py): they test the resident engine's own guards as if the
first wall had been breached.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import arena_harness as h

from arena.engine import postcondition as pc
from arena.engine.host import EngineRun, EngineSpec
from arena.engine.resident_timed import TimedPool
from arena.jobs import engine_kwargs, resident_steps
from cacheon_subnet.bundle import Bundle, bundle_from_files
from cacheon_subnet.bundle.engine_tree import build_tree
from seams.table import adapters_for_slot, seam_environment

MANIFEST = """schema = "cacheon.bundle/2"

[bundle]
name = "contamination-{name}"

[[ops]]
slot = "norm.rmsnorm"
entry = "kernel:rmsnorm"
dtypes = ["bfloat16"]
"""

FAITHFUL = """    xf = x.to(torch.float32)
    out.copy_(xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.to(torch.float32))
"""

VARIANTS: dict[str, str] = {
    # The only state a policy-clean kernel keeps beyond its call is engine state it is handed
    # (docs/security.md "Wall 1": no globals, no attribute stores, immutable module constants; the
    # Autotuner keys / Heuristics values channel is closed). So "module globals mutated per call"
    # takes its strongest policy-clean form here: a call counter kept in the norm gain.
    "counter_in_weight": '''"""Faithful RMSNorm that scales the norm gain it is handed by 1 + 2**-7 after every call."""

import torch


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
'''
    + FAITHFUL
    + """    weight.mul_(1.0078125)
""",
    # Refused by the allowlist (P004 attribute store on a module, P014 a mutable module global):
    # a module-global counter and a patched function of a module B also uses. Removal purges A's
    # modules, but torch keeps A's function: it stays alive, and B's kernel calls it.
    "patched_torch": '''"""Faithful itself; on every call it counts in a module global and replaces torch.linalg.vector_norm
(which B's kernel uses) with a version 1/64 too large."""

import torch

_CALLS = [0]
_ORIGINAL = torch.linalg.vector_norm


def _skewed(*args, **kwargs):
    _CALLS[0] += 1
    return _ORIGINAL(*args, **kwargs) * (1.0 + 2.0 ** -6)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    torch.linalg.vector_norm = _skewed
'''
    + FAITHFUL,
    # Refused (imports of threading/time/sys, a mutable global): a tensor reference kept past the
    # call and written after the turn ends. On the H200 the same shape is a long kernel launched at
    # the last call; on CPU no policy-clean code leaves work running (torch's CPU ops return when
    # done, and a thread needs an import the allowlist refuses), so a thread stands for it.
    "late_writer": '''"""Faithful; keeps the norm gain it is handed and, once its package is removed, writes into it
from a thread every 20 ms (a kept reference written after its turn; work left running)."""

import sys
import threading
import time

import torch

_KEPT = []


def _after_my_turn() -> None:
    me = __name__
    while me in sys.modules:
        time.sleep(0.01)
    while True:
        for w in _KEPT:
            w.mul_(1.0078125)
        time.sleep(0.02)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    if not _KEPT:
        _KEPT.append(weight)
        threading.Thread(target=_after_my_turn, daemon=True).start()
'''
    + FAITHFUL,
    # Refused (no file I/O: open, os, json are not allowlisted): an extra receipt for B's slot,
    # written by a process role that must never load a candidate, into the answers dir it was
    # given; read as B's it would FAIL B's evidence ("candidate code outside a scheduler rank").
    "stray_receipt": '''"""Faithful; on every call writes a receipt for norm.rmsnorm as the detokenizer into its answers dir."""

import json
import os

import torch

from seams.dispatch import REGISTRY


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
'''
    + FAITHFUL
    + """    d = REGISTRY.receipts.directory
    doc = {"role": "detokenizer", "rank": 0, "pid": 1, "slots": {"norm.rmsnorm": {"fired": 1}}, "errors": []}
    with open(os.path.join(d, "receipt-detokenizer-0-1.json"), "w") as f:
        json.dump(doc, f)
""",
    # Refused (a mutable module global): a call counter in its own module, which the next install
    # of the same package (the incumbent runs in every head-to-head job) would find again if the
    # removal left the module in sys.modules.
    "global_counter": '''"""RMSNorm whose gain is scaled by 1 + 2**-7 * (calls so far), counted in a module global."""

import torch

_CALLS = [0]


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    _CALLS[0] += 1
    xf = x.to(torch.float32)
    out.copy_(xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.to(torch.float32)
              * (1.0 + _CALLS[0] * 2.0 ** -7))
''',
}
POLICY_CLEAN = {
    "counter_in_weight": True,
    "patched_torch": False,
    "late_writer": False,
    "stray_receipt": False,
    "global_counter": False,
}


def bundle(name: str) -> Bundle:
    files = {"manifest.toml": MANIFEST.format(name=name).encode(), "kernel.py": VARIANTS[name].encode()}
    return bundle_from_files(files, source=f"<contamination {name}>")


@dataclass(frozen=True)
class Contribution:
    """One contribution's job in a resident timed engine, as the host saw it."""

    name: str
    run: EngineRun
    post: pc.PostCondition
    receipts_dir: Path


class Runner:
    """Contributions one after another in one TimedPool, with the arena's own job (every window's
    outputs inline: `keep_outputs`), as arena/engine/stage.py's resident_timed_stage builds it."""

    def __init__(self, tmp: Path, pool: TimedPool, engine: str = "FakeEngine", cfg: Any = None) -> None:
        self.tmp, self.pool, self.engine = tmp, pool, engine
        self.cfg = cfg or h.small_config(prompts=2, output=4, cycles=2)
        self.n = 0

    def run(self, b: Bundle, scan: bool = True) -> Contribution:
        self.n += 1
        name = f"{self.n}-{b.manifest.name}"
        work = self.tmp / name
        work.mkdir(parents=True)
        tree = build_tree(work / "tree", [(b, b.manifest.ops)], scan_policy=scan)
        op = b.manifest.ops[0]
        steps, _ = resident_steps(self.cfg, "stock")
        for s in steps:
            if s["op"] == "generate":
                s["keep_outputs"] = True
        bindings = tuple(sorted({a.binding for a in adapters_for_slot(op.slot)}))
        env = {**seam_environment(bindings), "CACHEON_SEAM_STRICT": "1", "SGLANG_PLUGINS": "cacheon"}
        base = {
            "engine_kwargs": engine_kwargs(self.cfg),
            "engine_factory": f"tests.arena.fake_engine:{self.engine}",
            "checkpoint": None,
            "early_evidence": {"slot": op.slot, "ranks": [0]},
            "forward_clock": True,
        }
        spec = EngineSpec("resident", base, env, timeout_s=300, start_timeout_s=120, ranks=(0,))
        install = {"CACHEON_ENGINE_TREE": str(tree.root), "CACHEON_ENGINE_TREE_DIGEST": tree.digest}
        receipts = work / "receipts-resident"
        runs, post = self.pool.run(
            spec,
            steps,
            install,
            workdir=work,
            receipts_dir=receipts,
            home=self.tmp / "home",
            canary=pc.canary_step(self.cfg),
            post=pc.post_steps(self.cfg),
            max_jobs=100,
            start_timeout_s=120,
        )
        return Contribution(name, runs[-1], post, receipts)


ANSWER_FIELDS = ("counts", "errors", "declines", "static", "ack", "packages")


def fingerprint(run: EngineRun) -> list[dict[str, Any]]:
    """Everything of a job B's verdict reads that must not depend on what ran before it: every
    window's outputs (tokens, logprobs, top-k), every rank's counts, errors, declines, static-input
    watch and route acks, step by step (nonces, pids and clocks left out)."""
    out = []
    for r in run.records:
        step = str(r.get("step", ""))
        if not step or step.startswith("post-"):
            continue
        item: dict[str, Any] = {"step": step, "op": r.get("op"), "sequences": r.get("sequences")}
        for name, by_rank in (r.get("answers") or {}).items():
            item[name] = {k: {f: a.get(f) for f in ANSWER_FIELDS} for k, a in sorted(by_rank.items())}
        out.append(item)
    return out
