"""What a timed engine's run decides before any speed or quality verdict: forging, a stopped or
failed engine, evidence, baseline leaks, and (a resident timed engine) its post-condition.
Split from arena/run.py."""

from __future__ import annotations

from typing import Any

from arena.engine.host import EngineRun
from arena.prepare import candidate_blame
from arena.records import TimedStage


def outcome(
    name: str, run: EngineRun, receipts: list[dict[str, Any]], stage: TimedStage, slot: str, incumbent: bool
) -> tuple[str, str] | None:
    """A final (verdict, reason) when a timed engine already decides, else None. Forging is
    the candidate's (FAIL); an engine fault is only when the receipts implicate it."""
    if run.forgery:
        return "FAIL", f"forging attempt in the {name} engine: {run.forgery}"
    if disk := getattr(run, "disk", None):  # a stand-in run of a test may not carry one
        kind, why = disk
        if kind == "reserve":
            return "NO_DECISION", f"the host's disk is nearly full (infrastructure: free space, then retry): {why}"
        if incumbent:  # both trees ran in that engine: the writes are not attributable
            return "NO_DECISION", f"the {name} engine was stopped (challenger and incumbent both loaded): {why}"
        return "FAIL", f"the {name} engine with the candidate was stopped: {why}"
    early = next(
        (r for r in run.records if r.get("op") == "error" and r.get("kind") in ("evidence", "abi", "arena-gap")), None
    )
    if early and early.get("kind") == "arena-gap":
        return "NO_DECISION", (
            "the engine driver refused a message of the engine's own packages (an arena "
            "defect, not the candidate's; report it): " + str(early.get("error"))[:600]
        )
    if early and early.get("kind") == "abi":
        return "NO_DECISION", (
            "the engine called the slot with arguments outside its ABI, so the kernel never ran "
            "in the captured graphs (an arena defect, not the candidate's; report it): " + early["error"]
        )
    if early:
        return "FAIL", "execution evidence: " + early["error"]
    if run.error:
        blame = candidate_blame(receipts, slot)
        if blame:
            return "FAIL", f"the engine with the candidate failed ({blame}): {run.error}"
        return "NO_DECISION", f"the engine failed before the candidate was implicated (infrastructure; retry): {run.error}"
    if stage.leaks:
        return "FAIL", "baseline leak: " + "; ".join(stage.leaks[:3])
    ev = stage.evidence
    if ev.problems:
        return "FAIL", "execution evidence: " + "; ".join(ev.problems[:5])
    if ev.baseline_problems:
        return "NO_DECISION", "the incumbent baseline could not be established: " + "; ".join(ev.baseline_problems[:5])
    if ev.arena_problems:
        return "NO_DECISION", (
            "the engine called the slot with arguments outside its ABI, so the kernel did not run "
            "everywhere it was timed (an arena defect, not the candidate's; report it): " + "; ".join(ev.arena_problems[:3])
        )
    return None


def after_post(decided: tuple[str, str] | None, post: Any) -> tuple[str, str] | None:
    """A resident timed engine whose post-condition failed after this contribution (arena/
    postcondition.py): the engine is restarted and this verdict is NO_DECISION, never a verdict
    measured in an engine whose state moved. What the run already decided stands: a FAIL on forging,
    on a stopped or failed engine the receipts blame on the candidate, on its own evidence or leaks
    (all read from this contribution's own nonce-bound answers, so never charged to another one),
    and a NO_DECISION with its own reason (an engine fault)."""
    if post is None or post.ok or decided:
        return decided
    return "NO_DECISION", (
        "the resident timed engine's post-condition failed after this contribution, so the "
        "engine was restarted and this verdict is not decided (infrastructure; retried in a "
        f"fresh engine): {post.reason}"
    )
