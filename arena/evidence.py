"""Execution evidence: the candidate's kernel must provably have run, on every scheduler rank.

Fail closed: coverage (seams.receipts.coverage: active, fired, completed on every expected rank,
no fallback, no load failure, no receipt from another role) AND every route swap acknowledged
by every rank, with candidate calls fired while recapturing after a swap to the candidate and
none after a swap to stock (a swap that did not change what the graphs run would make B and C
the same measurement)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from seams.receipts import coverage


@dataclass(frozen=True)
class Evidence:
    ok: bool
    problems: tuple[str, ...]
    per_rank: dict[int, Any]
    routes: dict[int, list[dict[str, Any]]]

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "problems": list(self.problems),
                "per_rank": {str(k): v for k, v in self.per_rank.items()},
                "routes": {str(k): v for k, v in self.routes.items()}}


def check(receipts: Sequence[dict[str, Any]], slot: str, ranks: Iterable[int],
          swaps: Sequence[tuple[int, str]], graphs_on: bool) -> Evidence:
    ranks = sorted(set(ranks))
    cov = coverage(receipts, [slot], ranks)
    problems = list(cov.problems)
    routes: dict[int, list[dict[str, Any]]] = {}
    for r in receipts:
        if r.get("role") == "scheduler":
            routes[int(r.get("rank", -1))] = list(r.get("routes", []))
    for rank in ranks:
        acks = {int(a["epoch"]): a for a in routes.get(rank, [])}
        for epoch, route in swaps:
            a = acks.get(epoch)
            if a is None:
                problems.append(f"rank {rank}: route swap {epoch} ({route}) not acknowledged")
                continue
            if a.get("route") != route:
                problems.append(f"rank {rank}: swap {epoch} acknowledged route {a.get('route')!r}, expected {route!r}")
            if not graphs_on:
                continue
            fired = int(a.get("fired_during_capture", {}).get(slot, 0))
            if route == "candidate" and fired <= 0:
                problems.append(f"rank {rank}: swap {epoch} to candidate recaptured graphs without calling it")
            if route == "stock" and fired != 0:
                problems.append(f"rank {rank}: swap {epoch} to stock still called the candidate {fired} times")
    return Evidence(not problems, tuple(problems), dict(cov.per_rank), routes)
