#!/usr/bin/env python3
"""Replay the sequential test (arena/verdict/sequential.py, Wald's SPRT) on recorded H200 arena runs: after
each cycle, what `early_stop` would have decided from the windows so far, and at which cycle a
run would have ended, against the fixed-sample verdict the run really got.

Why: issue 19 item 2 asks that the SPRT keep the false-crown rate <= 1 % and still crown a 1 %
gain. Simulation (tests/arena/test_sequential.py) checks the model; this reads the real per-cycle
noise of recorded runs (a post-hoc reading of a few runs, never a rate: stock-vs-stock runs are
too few for a 1 % bound).

    python scripts/sprt_replay.py docs/results/*/h200-*.json [--config configs/arena/dense.toml] [--json]
        [--stop-on-pass]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


@dataclass(frozen=True)
class Replay:
    file: str
    run: str
    control: str
    metric: str
    cycles: int  # timed cycles the run recorded
    fixed: str  # the fixed-sample verdict on all of them (arena.verdict.speed.judge)
    ratio: float
    decision: str  # the SPRT's first decision, or CONTINUE when it never decided
    stopped_at: int  # cycles it needed (= cycles when undecided)


def replay(windows: list[dict[str, Any]], metric: str, speed: Any, policy: Any) -> tuple[str, int, int, str, float]:
    from arena.verdict import sequential as seq
    from arena.verdict.speed import Window, judge

    rows = [
        (Window(w["index"], w["cycle"], w["role"], w.get("route", "")), w)
        for w in windows
        if w.get("role") != "warmup" and w.get(metric) is not None
    ]
    cycles = sorted({w.cycle for w, _ in rows if w.cycle >= 0})
    fixed = judge([(w, float(r[metric])) for w, r in rows], speed)
    for c in cycles:
        samples = [(w, float(r[metric])) for w, r in rows if w.cycle <= c]
        try:
            decision, _ = seq.early_stop(samples, speed, policy)
        except ValueError:  # a cycle without both roles yet
            continue
        if decision != "CONTINUE":
            return decision, c + 1, len(cycles), fixed.verdict, fixed.ratio
    return "CONTINUE", len(cycles), len(cycles), fixed.verdict, fixed.ratio


def main(argv: list[str] | None = None) -> int:
    from arena.config import load_config
    from arena.verdict import sequential as seq

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument(
        "--config",
        default=str(REPO / "configs" / "arena" / "dense.toml"),
        help="its [speed] and [sequential] policies judge every run",
    )
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--stop-on-pass",
        action="store_true",
        help="let a PASS end the run early too (the config's [sequential] stop_on_pass; off in every "
        "shipped config, where only FAIL stops early: docs/arena.md says why)",
    )
    a = ap.parse_args(argv)
    cfg = load_config(a.config)
    policy = seq.policy_of(cfg.sequential)
    if a.stop_on_pass:
        from dataclasses import replace

        policy = replace(policy, stop_on_pass=True)
    out: list[Replay] = []
    for f in a.results:
        try:
            doc = json.loads(Path(f).read_text())
        except (OSError, ValueError):
            continue  # not a result JSON (a monitor log, a bench file)
        runs = doc.get("runs") if isinstance(doc.get("runs"), list) else [doc]
        for r in runs:
            windows = r.get("windows") if isinstance(r, dict) else None
            if not windows or not isinstance(windows, list):
                continue
            metric = next(
                (
                    m
                    for m in (r.get("metric"), doc.get("metric"), cfg.speed.metric)
                    if m and any(isinstance(w, dict) and w.get(m) is not None for w in windows)
                ),
                None,
            )
            if metric is None:
                continue
            try:
                d, at, n, fixed, ratio = replay(windows, metric, cfg.speed, policy)
            except (KeyError, TypeError, ValueError):
                continue  # an older record layout
            out.append(
                Replay(
                    Path(f).name,
                    str(r.get("run", r.get("op", ""))),
                    str(r.get("control") or doc.get("control") or ""),
                    metric,
                    n,
                    fixed,
                    ratio,
                    d,
                    at,
                )
            )
    if a.json:
        print(json.dumps([x.__dict__ for x in out], indent=1))
        return 0
    print(f"policy: {policy}")
    for x in out:
        print(
            f"{x.file[:44]:44} {x.control[:20]:20} {x.metric[:24]:24} fixed {x.fixed:11} C/B {x.ratio:.4f}"
            f" | SPRT {x.decision:8} after {x.stopped_at}/{x.cycles} cycles"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
