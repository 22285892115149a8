"""Crown settlement for one target: a pure function of recorded evidence.

Every validator runs this on its own measurements; because it is a pure function (no I/O,
no clock, no chain, no torch) and processes evidence in a canonical order, the same
evidence gives the same crown and the same decisions on every machine, whatever order
the caller passes it in.

Rules (and why):

* Only a PASS with ``quality_ok`` can crown. FAIL (the contribution is wrong, or quality
  failed) and NO_DECISION (the box could not judge) never crown and stay apart in the
  decisions: one blames the contribution, the other the measurement.
* Speed bar ``1 + max(margin, k * noise)``: a win must clear both a fixed minimum (so a
  quiet box cannot crown a 0.1 % blip) and ``k`` times the noise band measured from B vs
  B' (so a noisy box cannot crown its own noise). ``speedup`` is C/B against the current
  incumbent stack, so the bar is applied to it directly; with no incumbent, B is the stock
  engine and the same bar is applied against 1.0 (a stock-equivalent kernel never crowns).
* Several qualifying challengers in one settlement are walked in commit-block order
  (ties: contribution_id). A later one replaces the provisional crown only if its speedup
  clears the bar *relative to the earlier one's* (with the larger of the two noise
  bands, since their ratio carries both errors); otherwise the earlier commit keeps it.
  This is earlier-commit priority: copying a crown and adding noise earns nothing.
* Comparisons are strict (``>``): an exact tie at the bar is not a win, so the incumbent
  and then the earlier commit win ties.
* Arenas: a speedup only means something inside the arena (engine pin, model, GPU,
  config) it was measured in, and ``speedup_vs_stock`` chains ratios, so mixing arenas
  would multiply incomparable numbers. PASS rows from a different arena than the
  incumbent's are therefore ``no_decision`` ("re-measure in arena X"). Moving to a new
  arena is the caller's job: re-measure the incumbent there and re-base its Crown. With
  no incumbent, the reference arena is the one of the latest PASS evaluation (latest
  ``evaluated_block``; ties: greatest arena_id), i.e. the arena the validator runs now.
* Staleness: C/B is only meaningful against the incumbent it was measured against.
  Evidence evaluated at or before ``incumbent.crowned_block`` was measured against an
  older stack and is ``no_decision`` (re-measure). This also makes settlement idempotent:
  re-settling the same evidence after a crown changes nothing.
* Reproduction: several rows with one contribution_id are independent passes. Any FAIL
  (or quality failure) fails it; PASS rows must reach ``policy.min_passes`` usable passes;
  the settled speedup is the minimum and the noise the maximum over them (conservative).
* Baseline: a row that names the B it was measured against (``Evidence.baseline``) is usable
  only while that is still the holder (the incumbent, or stock with none); otherwise
  ``no_decision`` (re-measure), whatever its evaluated block.
* Sanity: a non-finite or non-positive speedup, a negative noise, a noise band above
  ``max_noise`` (box too noisy to judge) or a speedup above ``max_speedup`` (implausible
  end-to-end; flagged for re-measurement rather than accused) is ``no_decision``.

Assumption: identical content is deduplicated upstream (bundle identity is a hash of the
content; a later copy of an earlier contribution never reaches settlement as a separate
contribution_id). Earlier-commit priority above is the second line of defence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from cacheon_subnet.errors import CacheonError


class Verdict(StrEnum):
    """What one measurement says. A str enum: the state DB, the API and every log keep these
    strings; it lives here because settlement (floor 1) reads it, and records re-exports it."""

    PASS = "PASS"
    FAIL = "FAIL"
    NO_DECISION = "NO_DECISION"


Outcome = Literal["crowned", "below_bar", "failed", "no_decision", "beaten_by_earlier", "superseded"]
VERDICTS: tuple[str, ...] = tuple(v.value for v in Verdict)
OUTCOMES: tuple[str, ...] = ("crowned", "below_bar", "failed", "no_decision", "beaten_by_earlier", "superseded")


UNCHECKED = "*"  # Evidence.baseline when the caller does not say what B was


class ScoringError(CacheonError, ValueError):
    """Malformed scoring input: a caller bug, never a property of a contribution."""


def _finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


@dataclass(frozen=True)
class SpeedPolicy:
    """How much faster a challenger must be, and when a measurement is too poor to judge."""

    margin: float = 0.0075  # minimum relative win, whatever the noise
    k: float = 2.0  # multiples of the measured noise band a win must clear
    min_passes: int = 1  # usable PASS reproductions required (the leading system uses 2)
    max_noise: float = 0.05  # noise band above this: box too noisy, no decision
    max_speedup: float = 3.0  # end-to-end ratio above this is implausible: re-measure

    def __post_init__(self) -> None:
        if not (_finite(self.margin) and self.margin >= 0):
            raise ScoringError(f"SpeedPolicy.margin: must be finite and >= 0, got {self.margin!r}")
        if not (_finite(self.k) and self.k >= 0):
            raise ScoringError(f"SpeedPolicy.k: must be finite and >= 0, got {self.k!r}")
        if not (isinstance(self.min_passes, int) and self.min_passes >= 1):
            raise ScoringError(f"SpeedPolicy.min_passes: must be an int >= 1, got {self.min_passes!r}")
        if not (_finite(self.max_noise) and self.max_noise > 0):
            raise ScoringError(f"SpeedPolicy.max_noise: must be finite and > 0, got {self.max_noise!r}")
        if not (_finite(self.max_speedup) and self.max_speedup > 1):
            raise ScoringError(f"SpeedPolicy.max_speedup: must be finite and > 1, got {self.max_speedup!r}")

    def bar(self, noise: float) -> float:
        """The factor a speedup must exceed: 1 + max(margin, k * noise)."""
        return 1.0 + max(self.margin, self.k * noise)

    def bar_text(self, noise: float) -> str:
        """The bar with its ingredients, for decision reasons."""
        return f"{self.bar(noise):.4f} (1+max({self.margin:.4f}, {self.k:g}*{noise:.4f}))"


@dataclass(frozen=True)
class Evidence:
    """One recorded evaluation pass of one contribution for one target."""

    contribution_id: str
    target: str
    hotkey: str
    commit_block: int
    verdict: Verdict
    quality_ok: bool
    speedup: float  # C/B throughput against the current incumbent stack; > 1 is faster
    noise: float  # relative noise band from B vs B'
    arena_id: str
    evaluated_block: int
    # the contribution the arena ran as B (None: stock); UNCHECKED where the caller does not know
    baseline: str | None = UNCHECKED

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ScoringError(f"Evidence.verdict: {self.verdict!r} not in {VERDICTS} ({self.contribution_id})")


@dataclass(frozen=True)
class Crown:
    """The settled holder of one target. speedup_vs_stock chains measured ratios."""

    target: str
    hotkey: str
    contribution_id: str
    commit_block: int
    crowned_block: int
    measured_speedup: float  # vs the incumbent it beat (vs stock for the first crown)
    speedup_vs_stock: float  # product of measured speedups along the chain of crowns
    arena_id: str

    def __post_init__(self) -> None:
        for name in ("measured_speedup", "speedup_vs_stock"):
            value = getattr(self, name)
            if not (_finite(value) and value > 0):
                raise ScoringError(f"Crown.{name}: must be finite and > 0, got {value!r} ({self.target})")


@dataclass(frozen=True)
class Decision:
    contribution_id: str
    outcome: Outcome
    reason: str


@dataclass(frozen=True)
class Settlement:
    """The crown after settlement (the incumbent if nobody won) and one decision per contribution."""

    crown: Crown | None
    decisions: tuple[Decision, ...]

    def outcome_of(self, contribution_id: str) -> Outcome:
        for decision in self.decisions:
            if decision.contribution_id == contribution_id:
                return decision.outcome
        raise KeyError(contribution_id)


@dataclass(frozen=True)
class _Candidate:
    """A contribution whose passes were usable: its conservative speedup and noise."""

    contribution_id: str
    hotkey: str
    commit_block: int
    speedup: float
    noise: float
    passes: int


def _canonical(rows: Sequence[Evidence]) -> list[Evidence]:
    return sorted(
        rows,
        key=lambda e: (
            e.commit_block,
            e.contribution_id,
            e.evaluated_block,
            e.arena_id,
            e.verdict,
            e.quality_ok,
            repr(e.speedup),
            repr(e.noise),
        ),
    )


def _group(target: str, evidence: Sequence[Evidence], block: int) -> dict[str, list[Evidence]]:
    groups: dict[str, list[Evidence]] = {}
    for e in _canonical(evidence):
        if e.target != target:
            raise ScoringError(f"Evidence.target: {e.contribution_id} is for {e.target!r}, settling {target!r}")
        if e.evaluated_block > block:
            raise ScoringError(
                f"Evidence.evaluated_block: {e.contribution_id} evaluated at {e.evaluated_block}, "
                f"after the settlement block {block}"
            )
        rows = groups.setdefault(e.contribution_id, [])
        if rows and (rows[0].hotkey, rows[0].commit_block) != (e.hotkey, e.commit_block):
            raise ScoringError(f"Evidence: passes of {e.contribution_id} disagree on hotkey/commit_block")
        rows.append(e)
    return groups


def _reference_arena(incumbent: Crown | None, evidence: Sequence[Evidence]) -> str | None:
    if incumbent is not None:
        return incumbent.arena_id
    passes = [e for e in evidence if e.verdict == Verdict.PASS and e.quality_ok]
    if not passes:
        return None
    return max(passes, key=lambda e: (e.evaluated_block, e.arena_id)).arena_id


def _unusable_reason(e: Evidence, incumbent: Crown | None, arena: str | None, policy: SpeedPolicy) -> str | None:
    """Why a PASS row cannot be used for a speed decision, or None if it can."""
    if e.arena_id != arena:
        return f"measured in arena {e.arena_id!r}, not comparable with arena {arena!r}; re-measure there"
    holder = incumbent.contribution_id if incumbent is not None else None
    if e.baseline != UNCHECKED and e.baseline != holder:
        # C/B is a ratio against the B it ran: a pool of arenas can return a ratio against stock
        # after a crown was settled meanwhile (red team: 1.10x over stock dethroned a 1.50x crown)
        return f"measured against {e.baseline or 'stock'}, not the current holder {holder or 'stock'}; re-measure"
    if incumbent is not None and e.evaluated_block <= incumbent.crowned_block:
        return (
            f"evaluated at block {e.evaluated_block}, not after the incumbent's crown at block "
            f"{incumbent.crowned_block}: measured against an older stack; re-measure"
        )
    if not (_finite(e.speedup) and e.speedup > 0):
        return f"speedup {e.speedup!r} is not a finite positive number"
    if not (_finite(e.noise) and e.noise >= 0):
        return f"noise {e.noise!r} is not a finite non-negative number"
    if e.noise > policy.max_noise and e.speedup * (1 + policy.k * e.noise) >= 1.0:
        # Too noisy to judge -- unless even the top of the noise band is slower than parity:
        # "clearly slower" is a decision (below the bar), not a reason to re-measure.
        return f"noise band {e.noise:.4f} above max_noise {policy.max_noise:.4f}: box too noisy to judge"
    if e.speedup > policy.max_speedup:
        return f"speedup {e.speedup:.4f} above max_speedup {policy.max_speedup:.4f}: implausible, re-measure"
    return None


def _assess(
    cid: str, rows: list[Evidence], incumbent: Crown | None, arena: str | None, policy: SpeedPolicy
) -> _Candidate | Decision:
    """Merge the passes of one contribution into a candidate, or decide it outright."""
    if incumbent is not None and cid == incumbent.contribution_id:
        return Decision(cid, "no_decision", "is the incumbent itself; nothing to settle")
    n = len(rows)
    fails = [e for e in rows if e.verdict == Verdict.FAIL]
    if fails:
        return Decision(cid, "failed", f"verdict FAIL in {len(fails)} of {n} pass(es)")
    bad_quality = [e for e in rows if e.verdict == Verdict.PASS and not e.quality_ok]
    if bad_quality:
        return Decision(cid, "failed", f"verdict PASS but quality check failed in {len(bad_quality)} of {n} pass(es)")
    usable: list[Evidence] = []
    problems: list[str] = []
    undecided = sum(1 for e in rows if e.verdict == Verdict.NO_DECISION)
    for e in rows:
        if e.verdict != Verdict.PASS:
            continue
        why = _unusable_reason(e, incumbent, arena, policy)
        if why is None:
            usable.append(e)
        elif why not in problems:
            problems.append(why)
    if len(usable) < policy.min_passes:
        detail = f"{len(usable)} usable PASS of {policy.min_passes} required ({n} pass(es), {undecided} NO_DECISION)"
        return Decision(cid, "no_decision", "; ".join([detail, *problems]))
    return _Candidate(
        cid,
        rows[0].hotkey,
        rows[0].commit_block,
        speedup=min(e.speedup for e in usable),
        noise=max(e.noise for e in usable),
        passes=len(usable),
    )


def settle_target(
    target: str, incumbent: Crown | None, evidence: Sequence[Evidence], policy: SpeedPolicy, block: int
) -> Settlement:
    """Settle one target at `block`: who holds the crown, and why each contribution won or lost."""
    if incumbent is not None and incumbent.target != target:
        raise ScoringError(f"Crown.target: incumbent is for {incumbent.target!r}, settling {target!r}")
    if incumbent is not None and incumbent.crowned_block > block:
        raise ScoringError(f"Crown.crowned_block: {incumbent.crowned_block} is after the settlement block {block}")
    groups = _group(target, evidence, block)
    arena = _reference_arena(incumbent, evidence)
    holder = incumbent.contribution_id if incumbent is not None else "stock"
    decisions: dict[str, Decision] = {}
    best: _Candidate | None = None
    for cid, rows in groups.items():  # canonical order: commit_block, contribution_id
        assessed = _assess(cid, rows, incumbent, arena, policy)
        if isinstance(assessed, Decision):
            decisions[cid] = assessed
            continue
        c = assessed
        bar = policy.bar(c.noise)
        if not c.speedup > bar:
            decisions[cid] = Decision(
                cid,
                "below_bar",
                f"speedup {c.speedup:.4f} over {holder} does not exceed "
                f"bar {policy.bar_text(c.noise)} ({c.passes} pass(es))",
            )
            continue
        cleared = f"speedup {c.speedup:.4f} over {holder} > bar {policy.bar_text(c.noise)}"
        if best is None:
            best = c
            decisions[cid] = Decision(cid, "crowned", cleared)
            continue
        noise = max(c.noise, best.noise)
        need = best.speedup * policy.bar(noise)
        vs = (
            f"earlier {best.contribution_id} (commit {best.commit_block}): needs {best.speedup:.4f} "
            f"x bar {policy.bar_text(noise)} = {need:.4f}, has {c.speedup:.4f}"
        )
        if c.speedup > need:
            decisions[best.contribution_id] = Decision(
                best.contribution_id,
                "superseded",
                decisions[best.contribution_id].reason + f"; superseded by later {cid} (commit {c.commit_block}) "
                f"at {c.speedup:.4f} > {need:.4f}",
            )
            decisions[cid] = Decision(cid, "crowned", f"{cleared}; beats {vs}")
            best = c
        else:
            decisions[cid] = Decision(cid, "beaten_by_earlier", f"{cleared}, but does not beat {vs}")
    crown = incumbent
    if best is not None:
        base = incumbent.speedup_vs_stock if incumbent is not None else 1.0
        assert arena is not None  # a candidate exists only if some PASS row matched the arena
        crown = Crown(
            target=target,
            hotkey=best.hotkey,
            contribution_id=best.contribution_id,
            commit_block=best.commit_block,
            crowned_block=block,
            measured_speedup=best.speedup,
            speedup_vs_stock=base * best.speedup,
            arena_id=arena,
        )
        won = decisions[best.contribution_id]
        decisions[best.contribution_id] = Decision(
            won.contribution_id,
            "crowned",
            won.reason + f"; speedup_vs_stock {base:.4f}*{best.speedup:.4f}="
            f"{crown.speedup_vs_stock:.4f} in arena {arena!r} at block {block}",
        )
    return Settlement(crown=crown, decisions=tuple(decisions.values()))
