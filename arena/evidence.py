"""Execution evidence: the candidate's kernel must provably have run, on every scheduler rank.

Fail closed: coverage (seams.receipts.coverage: active, fired, completed on every expected rank,
no fallback, no load failure, no receipt from another role) AND every route swap acknowledged
by every rank, with candidate calls fired while recapturing after a swap to the candidate and
none after a swap to the baseline (a swap that did not change what the graphs run would make B
and C the same measurement). In a head-to-head the incumbent (receipt key `slot@incumbent`) must
likewise run in the baseline windows; a baseline that cannot be established is the arena's
problem (NO_DECISION), not the challenger's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from seams.dispatch import receipt_key
from seams.receipts import coverage


@dataclass(frozen=True)
class Evidence:
    ok: bool
    problems: tuple[str, ...]  # the challenger's: FAIL
    baseline_problems: tuple[str, ...]  # the incumbent's: NO_DECISION
    per_rank: dict[int, Any]
    routes: dict[int, list[dict[str, Any]]]

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "problems": list(self.problems), "baseline_problems": list(self.baseline_problems),
                "per_rank": {str(k): v for k, v in self.per_rank.items()},
                "routes": {str(k): v for k, v in self.routes.items()}}


def _swap_problems(acks: dict[int, dict[str, Any]], rank: int, key: str, who: str, runs_in: str,
                   swaps: Sequence[tuple[int, str]], graphs_on: bool) -> list[str]:
    out = []
    for epoch, route in swaps:
        a = acks.get(epoch)
        if a is None:
            out.append(f"rank {rank}: route swap {epoch} ({route}) not acknowledged")
            continue
        if a.get("route") != route:
            out.append(f"rank {rank}: swap {epoch} acknowledged route {a.get('route')!r}, expected {route!r}")
        if not graphs_on:
            continue
        fired = int(a.get("fired_during_capture", {}).get(key, 0))
        if route == runs_in and fired <= 0:
            out.append(f"rank {rank}: swap {epoch} to {route} recaptured graphs without calling the {who}")
        if route != runs_in and route != "candidate" and fired != 0:
            out.append(f"rank {rank}: swap {epoch} to {route} still called the {who} {fired} times")
    return out


def check(receipts: Sequence[dict[str, Any]], slot: str, ranks: Iterable[int],
          swaps: Sequence[tuple[int, str]], graphs_on: bool, incumbent: bool = False) -> Evidence:
    ranks = sorted(set(ranks))
    cov = coverage(receipts, [slot], ranks)
    problems = list(cov.problems)
    baseline: list[str] = []
    inc_key = receipt_key(slot, "incumbent")
    if incumbent:
        baseline += [p for p in coverage(receipts, [inc_key], ranks).problems if inc_key in p]
    routes: dict[int, list[dict[str, Any]]] = {}
    for r in receipts:
        if r.get("role") == "scheduler":
            routes[int(r.get("rank", -1))] = list(r.get("routes", []))
    for rank in ranks:
        acks = {int(a["epoch"]): a for a in routes.get(rank, [])}
        problems += _swap_problems(acks, rank, slot, "candidate", "candidate", swaps, graphs_on)
        if incumbent:
            baseline += [p for p in _swap_problems(acks, rank, inc_key, "incumbent", "incumbent", swaps, graphs_on)
                         if "not acknowledged" not in p and "acknowledged route" not in p]
    return Evidence(not problems and not baseline, tuple(problems), tuple(baseline), dict(cov.per_rank), routes)
