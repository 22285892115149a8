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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from seams.dispatch import receipt_key
from seams.receipts import coverage


@dataclass(frozen=True)
class Evidence:
    ok: bool
    problems: tuple[str, ...]  # the challenger's: FAIL
    baseline_problems: tuple[str, ...]  # the incumbent's: NO_DECISION
    per_rank: dict[int, Any]
    routes: dict[int, list[dict[str, Any]]]
    # the engine handed the slot arguments outside its ABI, so the candidate could not run there
    # (a seam defect, not the candidate's): NO_DECISION, never a verdict on a half-measured kernel
    arena_problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # calls the bundle's own dtypes/constraints left to stock

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "problems": list(self.problems),
            "baseline_problems": list(self.baseline_problems),
            "arena_problems": list(self.arena_problems),
            "notes": list(self.notes),
            "per_rank": {str(k): v for k, v in self.per_rank.items()},
            "routes": {str(k): v for k, v in self.routes.items()},
        }


def _declines(receipt: dict[str, Any], key: str, who: str) -> tuple[list[str], list[str]]:
    """Routed calls the candidate did not take (seams/dispatch.py), split by whose they are."""
    rank = receipt.get("rank")
    took = int(((receipt.get("slots") or {}).get(key) or {}).get("fired", 0))
    abi: list[str] = []
    notes: list[str] = []
    for reason, n in sorted(((receipt.get("declines") or {}).get(key) or {}).items()):
        line = f"rank {rank}: the {who} took {took} call(s) and declined {n} ({reason})"
        (abi if str(reason).startswith("abi:") else notes).append(line)
    return abi, notes


def _swap_problems(
    acks: dict[int, dict[str, Any]],
    rank: int,
    key: str,
    who: str,
    runs_in: str,
    swaps: Sequence[tuple[int, str]],
    graphs_on: bool,
) -> list[str]:
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


def check(
    receipts: Sequence[dict[str, Any]],
    slot: str,
    ranks: Iterable[int],
    swaps: Sequence[tuple[int, str]],
    graphs_on: bool,
    incumbent: bool = False,
) -> Evidence:
    ranks = sorted(set(ranks))
    cov = coverage(receipts, [slot], ranks)
    problems = list(cov.problems)
    baseline: list[str] = []
    inc_key = receipt_key(slot, "incumbent")
    if incumbent:
        baseline += [p for p in coverage(receipts, [inc_key], ranks).problems if inc_key in p]
    routes: dict[int, list[dict[str, Any]]] = {}
    arena: list[str] = []
    notes: list[str] = []
    keys = ((slot, "candidate"), (inc_key, "incumbent")) if incumbent else ((slot, "candidate"),)
    for r in receipts:
        if r.get("role") == "scheduler":
            routes[int(r.get("rank", -1))] = list(r.get("routes", []))
            for key, who in keys:
                abi, info = _declines(r, key, who)
                arena += abi
                notes += info
    for rank in ranks:
        acks = {int(a["epoch"]): a for a in routes.get(rank, [])}
        problems += _swap_problems(acks, rank, slot, "candidate", "candidate", swaps, graphs_on)
        if incumbent:
            baseline += [
                p
                for p in _swap_problems(acks, rank, inc_key, "incumbent", "incumbent", swaps, graphs_on)
                if "not acknowledged" not in p and "acknowledged route" not in p
            ]
    return Evidence(
        not problems and not baseline and not arena,
        tuple(problems),
        tuple(baseline),
        dict(cov.per_rank),
        routes,
        tuple(arena),
        tuple(notes),
    )


def answer_trail(records: Sequence[dict[str, Any]]) -> dict[int, list[tuple[str, dict[str, Any]]]]:
    """Per rank, every nonce-bound answer in the order the driver collected it, labelled by step."""
    trail: dict[int, list[tuple[str, dict[str, Any]]]] = {}
    for rec in records:
        for name, by_rank in (rec.get("answers") or {}).items():
            for r, a in by_rank.items():
                trail.setdefault(int(r), []).append((f"{rec.get('step', rec.get('op'))}/{name}", a))
    return trail


def receipts_from_answers(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Receipt-shaped documents (as seams.receipts.coverage reads them) built only from answers
    that echoed the host's nonces: the last answer's counts and errors, every route ack."""
    out = []
    for rank, answers in sorted(answer_trail(records).items()):
        last = answers[-1][1]
        out.append(
            {
                "role": "scheduler",
                "rank": rank,
                "pid": last.get("pid"),
                "slots": last.get("counts", {}),
                "errors": list(last.get("errors", [])),
                "declines": last.get("declines") or {},
                "routes": [a["ack"] for _, a in answers if a.get("kind") == "route"],
            }
        )
    return out


def _fired(counts: dict[str, Any], key: str) -> int:
    return int((counts.get(key) or {}).get("fired", 0))


def leaks(records: Sequence[dict[str, Any]], slot: str) -> tuple[list[str], list[str]]:
    """(challenger leaks, incumbent leaks): calls made between two answers while a route that
    must not run them was in force. The challenger may run only under the route "candidate";
    the incumbent under "candidate" or "incumbent". A challenger call in a baseline window means
    contribution code reached B/B′: FAIL. (Graph capture inside a swap is the ack's business.)"""
    mine, theirs = [], []
    inc = receipt_key(slot, "incumbent")
    for rank, answers in sorted(answer_trail(records).items()):
        route, prev, prev_label = "candidate", None, "start"
        for label, a in answers:
            now = a.get("counts_before", a.get("counts", {})) if a.get("kind") == "route" else a.get("counts", {})
            if prev is not None:
                d_mine, d_inc = _fired(now, slot) - _fired(prev, slot), _fired(now, inc) - _fired(prev, inc)
                span = f"rank {rank}, between {prev_label} and {label} (route {route})"
                if route != "candidate" and d_mine:
                    mine.append(f"{span}: {d_mine} challenger calls while the baseline ran: contribution code reached B/B′")
                if route not in ("candidate", "incumbent") and d_inc:
                    theirs.append(f"{span}: {d_inc} incumbent calls under route {route}")
            if a.get("kind") == "route":
                route = str(a.get("ack", {}).get("route"))
            prev, prev_label = a.get("counts", {}), label
    return mine, theirs


def tampering(records: Sequence[dict[str, Any]], slot: str) -> tuple[list[str], list[str]]:
    """(challenger's, incumbent's, or the arena's): static inputs (engine state a kernel is handed:
    seams/integrity.py) whose values changed, each named once per rank at the first answer that
    saw it, with the route in force since the previous answer. A route answer carries two watches:
    `static_before`, taken before the swap (the old route's interval), and `static`, after its
    recapture (the new route's warm-up runs); one without `static_before` is not ours and charges
    the challenger. Only the incumbent's route, or only
    incumbent calls in the interval, make it the incumbent's (NO_DECISION: the baseline is not
    the one claimed); any other change is the challenger's (FAIL). Inputs too large to watch are
    the arena's: the baseline cannot be established (NO_DECISION)."""
    mine: list[str] = []
    theirs: list[str] = []
    inc = receipt_key(slot, "incumbent")
    for rank, answers in sorted(answer_trail(records).items()):
        route, prev_label, seen = "candidate", "start", set()
        prev: dict[str, Any] = {}
        for label, a in answers:
            views = [(a.get("static") or {}, a.get("counts", {}), label)]
            if a.get("kind") == "route":
                if "static_before" in a:  # the interval before the swap ran the old route
                    views.insert(0, (a.get("static_before") or {}, a.get("counts_before", {}), f"{label} (before)"))
                else:
                    route = str(a.get("ack", {}).get("route"))
            for i, (static, counts, where) in enumerate(views):
                if i and a.get("kind") == "route":
                    route = str(a.get("ack", {}).get("route"))
                new = [n for n in static.get("tampered", []) if n not in seen]
                seen.update(new)
                if new:
                    d_mine, d_inc = _fired(counts, slot) - _fired(prev, slot), _fired(counts, inc) - _fired(prev, inc)
                    who = "incumbent" if route == "incumbent" or (d_inc and not d_mine) else "challenger"
                    if a.get("kind") == "route" and "static_before" not in a:
                        who = "challenger"  # seams/route.py always writes both watches: never the incumbent's
                    (theirs if who == "incumbent" else mine).append(
                        f"rank {rank}, between {prev_label} and {where} (route {route}): static input "
                        f"{', '.join(sorted(new))} changed: the {who} wrote into engine state every kernel reads"
                    )
                prev, prev_label = counts, where
            static = a.get("static") or {}
            for n in static.get("unwatched", []):
                if f"unwatched {n}" not in seen:
                    seen.add(f"unwatched {n}")
                    theirs.append(f"rank {rank}: static input {n} too large to watch for writes")
    return mine, theirs
