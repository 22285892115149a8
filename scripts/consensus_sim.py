"""Do honest validators on different H200s crown the same contribution? (issue 34 item 4)

    python3 scripts/consensus_sim.py extract          # docs/results -> configs/consensus/h200-stock-windows.json
    python3 scripts/consensus_sim.py run [--arena qwen3-moe-mini] [--rounds 300] [--validators 8] [--seed 0]
        [--margin M] [--arena-margin M] [--remeasures N] [--no-band] [--bar G] [--scan]

`run` feeds the recorded stock-vs-stock windows into N validators (arena/verdict/consensus.py):
the real judge, confirmation, settlement, weights and Yuma. Contributions: a loser, stock, a
clear win and five borderline ones at bar-2σ .. bar+2σ (σ: one validator's spread of C/B).
--margin overrides the settlement margin (SpeedPolicy.margin), --arena-margin the arena's [speed]
margin, --remeasures the validator's max_remeasure (default 2); --no-band reads the judge's
"over the margin, under the noise-raised bar" NO_DECISION as the FAIL it was before 2026-12-05;
--bar centres the borderline contributions on G instead of this run's g50 (to hold them fixed
across settings); --scan tries margins until every borderline one is decided alike in >= 99 %.
"re-meas/100": arena runs (GPU verdicts) spent on re-measures per 100 validator measurements.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from arena.config import load_config  # noqa: E402
from arena.verdict.consensus import (  # noqa: E402
    SCHEMA,
    Contribution,
    SimConfig,
    load_windows,
    ratio_sigma,
    simulate,
)

FIXTURE = REPO / "configs" / "consensus" / "h200-stock-windows.json"
METRIC = "decode_gpu_tokens_per_s"
# every stock-vs-stock run on the decode-step clock recorded on the H200 (the role-bias control:
# the stock kernel of `slot` placed in the candidate route), per arena
SOURCES = {
    "qwen3-0.6b-dense": (
        "configs/arena/dense.toml",
        "norm.rmsnorm",
        (
            "docs/results/2026-11-29/h200-decodeclock-rolebias-x2.json",
            "docs/results/2026-12-01/h200-wall-rolebias.json",
            "docs/results/2026-12-01/h200-wall-rolebias2.json",
            "docs/results/2026-12-03/h200-s11-sprt-rolebias.json",
        ),
    ),
    "qwen3-moe-mini": (
        "configs/arena/moe.toml",
        "norm.rmsnorm",
        (
            "docs/results/2026-11-29/h200-moe-topk-faithful-rolebias.json",
            "docs/results/2026-11-29/h200-moe-handicap15-rolebias.json",
            "docs/results/2026-11-29/h200-moe-rolebias-wrong.json",
        ),
    ),
}


def _stock_runs(doc: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    runs = doc["runs"] if "runs" in doc else [doc]
    out = []
    for r in runs:
        name = r.get("run") or r.get("control") or "?"
        if name not in ("role-bias", "stock-as-candidate") and r.get("control") != "stock-as-candidate":
            continue
        out.append((name, r.get("windows") or []))
    return out


def extract() -> int:
    arenas: dict[str, Any] = {}
    for arena, (config, slot, files) in SOURCES.items():
        runs = []
        for f in files:
            doc = json.loads((REPO / f).read_text())
            for i, (name, windows) in enumerate(_stock_runs(doc)):
                by: dict[int, dict[str, list[float]]] = {}
                for w in windows:
                    if w["role"] != "warmup" and w.get(METRIC) is not None:
                        by.setdefault(int(w["cycle"]), {}).setdefault(w["role"], []).append(float(w[METRIC]))
                cycles = [by[c] for c in sorted(by) if all(by[c].get(r) for r in ("B", "C", "B'"))]
                if cycles:
                    runs.append({"source": f"{f} run {i} ({name})", "cycles": cycles})
        arenas[arena] = {"config": config, "slot": slot, "runs": runs}
    doc = {
        "schema": SCHEMA,
        "metric": METRIC,
        "about": "stock-vs-stock windows (role-bias control) on the H200, extracted by scripts/consensus_sim.py extract",
        "arenas": arenas,
    }
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {FIXTURE.relative_to(REPO)}: " + ", ".join(f"{a}: {len(v['runs'])} runs" for a, v in arenas.items()))
    return 0


def contributions(bar: float, sigma: float) -> list[Contribution]:
    out = [Contribution("loser -2%", 0.98), Contribution("stock", 1.0), Contribution("clear +3%", 1.03)]
    out += [Contribution(f"bar{k:+d}σ", bar + k * sigma) for k in (-2, -1, 0, 1, 2)]
    return out


def table(report: Any, title: str) -> None:
    print(f"\n{title}  ({report.rounds} rounds; every contribution decided alike by all: {report.all_agree:.1%})")
    print(
        f"{'contribution':<12} {'gain':>7} {'crowned':>8} {'unanimous':>9} {'Yuma paid':>9} {'paid|all':>8} "
        f"{'re-meas/100':>11} {'undecided':>9}"
    )
    for r in report.rows:
        print(
            f"{r.name:<12} {r.gain:>7.4f} {r.crown_rate:>8.1%} {r.unanimous:>9.1%} {r.paid:>9.3f} {r.paid_if_all:>8.3f} "
            f"{r.remeasures:>11.1f} {r.undecided:>9.1%}"
        )
    near = [r for r in report.rows if r.name.startswith("bar")]
    if near:
        cost = sum(r.remeasures for r in near) / len(near)
        print(f"borderline (bar ± 2σ): {cost:.1f} re-measures per 100 contributions a validator measures")


def curve(arena: Any, cfg: SimConfig, rounds: int, seed: int) -> tuple[float, float, float]:
    """(g50, reject99, crown99) over a grid of gains: the gain half the validators crown, the largest
    gain every validator rejects in >= 99 % of rounds, the smallest every validator crowns in >= 99 %."""
    grid = [1 + 0.0005 * i for i in range(61)]
    rows = simulate(arena, [Contribution(f"{g:.4f}", g) for g in grid], cfg, rounds, seed).rows
    g50 = next((r.gain for r in rows if r.crown_rate >= 0.5), float("nan"))
    reject = max((r.gain for r in rows if r.crown_rate == 0 or (r.unanimous >= 0.99 and r.crown_rate < 0.5)), default=1.0)
    ok = [r.unanimous >= 0.99 and r.crown_rate > 0.5 for r in rows]
    crown = next((rows[i].gain for i in range(len(rows)) if all(ok[i:])), float("nan"))
    return g50, reject, crown


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("verb", choices=("extract", "run"))
    ap.add_argument("--arena", default="qwen3-moe-mini")
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--validators", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kernel-skew", type=float, default=0.0, help="see arena/verdict/consensus.py (default 0)")
    ap.add_argument("--margin", type=float, default=None, help="settlement margin (default: SpeedPolicy's)")
    ap.add_argument("--arena-margin", type=float, default=None, help="the arena's [speed] margin (default: the config's)")
    ap.add_argument("--remeasures", type=int, default=2, help="the validator's max_remeasure (default 2)")
    ap.add_argument("--no-band", action="store_true", help="the rule before 2026-12-05: under the noise-raised bar is FAIL")
    ap.add_argument("--bar", type=float, default=None, help="centre the borderline contributions here (default: g50)")
    ap.add_argument("--scan", action="store_true", help="raise the margin until the borderline ones agree >= 99 %%")
    a = ap.parse_args(argv)
    if a.verb == "extract":
        return extract()
    arena = load_windows(FIXTURE)[a.arena]
    speed = load_config(REPO / arena.config).speed
    if a.arena_margin is not None:
        speed = replace(speed, margin=a.arena_margin)
    cfg = SimConfig(
        speed=speed, validators=a.validators, kernel_skew=a.kernel_skew, remeasures=a.remeasures, band=not a.no_band
    )
    if a.margin is not None:
        cfg = replace(cfg, settle=replace(cfg.settle, margin=a.margin))
    sigma = ratio_sigma(arena, cfg, 400, a.seed)
    g50, reject, crown = curve(arena, cfg, a.rounds, a.seed)
    print(
        f"arena {a.arena} ({len(arena.runs)} recorded runs, {arena.config}); {a.validators} validators; "
        f"kernel skew {a.kernel_skew}; arena margin {cfg.speed.margin}, k {cfg.speed.k_noise}; settlement margin "
        f"{cfg.settle.margin}, k {cfg.settle.k}; max_remeasure {cfg.remeasures}; "
        f"{'band re-measured' if cfg.band else 'no band (before 2026-12-05)'}\none validator's C/B SD σ = {sigma:.4%}; half the validators crown at "
        f"{g50:.4f}; all reject (>= 99 % of rounds) up to {reject:.4f}; all crown (>= 99 %) from {crown:.4f}"
    )
    centre = g50 if a.bar is None else a.bar
    cons = contributions(centre, sigma)
    table(simulate(arena, cons, cfg, a.rounds, a.seed), f"bar ({'g50' if a.bar is None else 'given'}) {centre:.4f}")
    if a.scan:
        fixed = [c for c in cons if c.name.startswith("bar")]
        margin = cfg.settle.margin
        while margin < 0.05:
            margin = round(margin + 0.0025, 4)
            trial = replace(cfg, settle=replace(cfg.settle, margin=margin))
            r = simulate(arena, fixed, trial, a.rounds, a.seed)
            print(f"settlement margin {margin:.4f}: the five borderline ones decided alike in {r.all_agree:.1%} of rounds")
            if r.all_agree >= 0.99:
                t50, treject, tcrown = curve(arena, trial, a.rounds, a.seed)
                print(
                    f"  at margin {margin:.4f}: half crown at {t50:.4f}; all reject up to {treject:.4f}; "
                    f"all crown from {tcrown:.4f} (the smallest gain crowned with agreement)"
                )
                moved = [c for c in contributions(t50, sigma) if c.name.startswith("bar")]
                table(simulate(arena, moved, trial, a.rounds, a.seed), f"margin {margin:.4f}: the new bar's own ±2σ")
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
