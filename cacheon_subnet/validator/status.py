"""`cacheon status`: what the validator knows, read from its state DB (read-only, safe while it runs).

One function builds a JSON-able report (the contract for tools), one renders it for humans.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from cacheon_subnet.validator import bumps
from cacheon_subnet.validator.state import STATES, StateDB
from cacheon_subnet.words import (
    ID_NOTE,
    baseline_name,
    block,
    evidence_words,
    fractions,
    printable,
    speed_words,
    state_label,
    state_name,
)


def _short(cid: str | None) -> str:
    return "-" if not cid else cid if cid.startswith("malformed:") else cid[:12]


def collect(state_dir: str | Path) -> dict[str, Any]:
    """Queue counts, every contribution with its verdicts and reason, crowns, weights, errors."""
    db = StateDB(state_dir, readonly=True)
    try:
        con = db.con
        evidence: dict[str, list[dict[str, Any]]] = {}
        for r in con.execute(
            "SELECT contribution_id, target, round, verdict, speedup, speedup_vs_stock, noise,"
            " arena_id, label, evaluated_block, settled, outcome, outcome_reason, reason"
            " FROM evidence ORDER BY id"
        ):
            evidence.setdefault(r["contribution_id"], []).append(dict(r))
        contributions = []
        for r in con.execute("SELECT * FROM contributions ORDER BY commit_block, id"):
            contributions.append(
                {
                    "id": r["id"],
                    "hotkey": r["hotkey"],
                    "uid": r["uid"],
                    "commit_block": r["commit_block"],
                    "state": r["state"],
                    "rule": r["rule"],
                    "reason": r["reason"],
                    "attempts": r["attempts"],
                    "url": r["url"],
                    "digest": r["digest"],
                    "todo": json.loads(r["todo"]),
                    "evidence": evidence.get(r["id"], []),
                }
            )
        crowns = [dict(r) for r in con.execute("SELECT * FROM crowns ORDER BY target")]
        remeasured = bumps.report(con)  # crowns re-measured after an arena change (a pin bump)
        weights = [dict(r) for r in con.execute("SELECT * FROM weights ORDER BY id DESC LIMIT 5")]
        for w in weights:
            w["uids"], w["vals"] = json.loads(w["uids"]), json.loads(w["vals"])
            w["readback"] = json.loads(w["readback"]) if w["readback"] else None
        err = con.execute("SELECT * FROM chain_errors ORDER BY id DESC LIMIT 1").fetchone()
        n_err = con.execute("SELECT COUNT(*) FROM chain_errors").fetchone()[0]
        kv = {r["key"]: r["value"] for r in con.execute("SELECT key, value FROM kv")}
        return {
            "state_dir": str(db.dir),
            "schema_version": db.schema_version(),
            "counts": db.counts(),
            "contributions": contributions,
            "crowns": crowns,
            "remeasured": remeasured,
            "weights": weights[0] if weights else None,
            "recent_weights": weights,
            "chain_errors": n_err,
            "last_chain_error": dict(err) if err else None,
            "last_sync_block": int(kv["last_sync_block"]) if "last_sync_block" in kv else None,
            "last_sync_at": float(kv["last_sync_at"]) if "last_sync_at" in kv else None,
            "last_pass_at": float(kv["last_pass_at"]) if "last_pass_at" in kv else None,
            "last_pass_ok": kv.get("last_pass_ok") == "1" if "last_pass_ok" in kv else None,
            "last_pass_problems": json.loads(kv.get("last_pass_problems") or "[]"),
            "chain_failures_consecutive": int(kv.get("chain_failures_consecutive") or 0),
            "weights_blocked": json.loads(kv["weights_blocked"]) if kv.get("weights_blocked") else None,
        }
    finally:
        db.close()


DEFAULT_MAX_PASS_AGE_MIN = 30.0
CHAIN_FAILURES_UNHEALTHY = 3


def health(
    report: dict[str, Any], max_pass_age_min: float = DEFAULT_MAX_PASS_AGE_MIN, now: float | None = None
) -> list[str]:
    """Why the validator is unhealthy (empty: healthy). Rules, each a reason an operator acts on:
    no completed pass within `max_pass_age_min`; the last pass failed (its problems); set_weights
    refused or the latest weights failed read-back; `CHAIN_FAILURES_UNHEALTHY` passes in a row
    with chain errors."""
    now = time.time() if now is None else now
    out: list[str] = []
    at = report.get("last_pass_at")
    if at is None:
        out.append("no completed pass recorded yet")
    elif now - at > max_pass_age_min * 60:
        out.append(f"no completed pass for {(now - at) / 60:.0f} min (limit {max_pass_age_min:g} min)")
    if report.get("last_pass_ok") is False:
        problems = "; ".join(report.get("last_pass_problems") or []) or "see the log"
        out.append(f"last pass failed: {problems}")
    blocked = report.get("weights_blocked")
    if blocked:
        out.append(
            f"set_weights refused (definitive, not retried until block "
            f"{blocked['block']} + hold): {blocked['reason']}: {blocked['detail']}"
        )
    w = report.get("weights")
    if w is not None and w["state"] == "failed" and not blocked:
        out.append(f"set_weights failing: weights #{w['id']} {w['reason']}")
    n = report.get("chain_failures_consecutive") or 0
    if n >= CHAIN_FAILURES_UNHEALTHY:
        err = report.get("last_chain_error") or {}
        out.append(
            f"chain errors: {n} passes in a row failed on the chain (last: {err.get('op')} "
            f"{err.get('error_type')}: {str(err.get('message'))[:160]})"
        )
    return out


def _ago(ts: float | None) -> str:
    if ts is None:
        return "never"
    s = max(0, int(time.time() - ts))
    return f"{s}s ago" if s < 120 else f"{s // 60}m ago" if s < 7200 else f"{s // 3600}h ago"


def render(report: dict[str, Any]) -> str:
    out = [
        f"cacheon validator state: {report['state_dir']} (schema v{report['schema_version']})",
        f"last sync: block {report['last_sync_block']} ({_ago(report['last_sync_at'])})",
        f"last pass: {_ago(report.get('last_pass_at'))}"
        + (
            ""
            if report.get("last_pass_ok") is not False
            else "  FAILED: " + "; ".join(report.get("last_pass_problems") or [])
        ),
        "",
        "queue: " + "  ".join(f"{state_name(s)} {report['counts'][s]}" for s in STATES),
        "",
    ]
    out.append(f"contributions ({len(report['contributions'])}):")
    out += block("  ", f"({ID_NOTE})")
    for c in report["contributions"]:
        shown = state_label(c["state"], [e.get("outcome") for e in c["evidence"]])  # never "qualified" below the bar
        head = f"  {_short(c['id']):14} {printable(c['hotkey'])[:16]:16} block {c['commit_block']:<8} {shown:13} "
        out += block(head, c["reason"])
        for e in c["evidence"]:
            pre = f"      {e['target']:24} "
            text = (
                f"{evidence_words(e)} (x{e['speedup']:.4f} vs the current crown holder, "
                f"noise {e['noise']:.2%}, {e['label']} @{e['evaluated_block']})"
            )
            out += block(pre, text)
    out += ["", f"crowns ({len(report['crowns'])}):"]
    for c in report["crowns"] or []:
        speed = speed_words(c["speedup_vs_stock"], baseline_name(c["arena_id"]))
        out.append(
            f"  {c['target']:26} {printable(c['hotkey'])[:16]:16} {_short(c['contribution_id']):14} "
            f"{speed}  crowned @{c['crowned_block']} ({c['arena_id']})"
        )
    if not report["crowns"]:
        out.append("  none: every target's share burns to the owner")
    if report.get("remeasured"):
        out += ["", f"re-measured after a pin bump ({len(report['remeasured'])}):"]
        for b in report["remeasured"]:
            head = f"  {b['target']:26} {printable(b['hotkey'])[:16]:16} {_short(b['contribution_id']):14} {b['state']:9} "
            out += block(head, b["line"])
    w = report["weights"]
    out += ["", "weights:"]
    if w is None:
        out.append("  never published")
    else:
        pairs = ", ".join(f"uid {u}: {f:.3f}" for u, f in zip(w["uids"], fractions(w["vals"])))
        out.append(
            f"  #{w['id']} {w['state']} at block {w['block'] if w['block'] is not None else '-'} "
            f"(version key {w['version_key']}, attempts {w['attempts']}): {w['reason']}"
        )
        out.append(f"  fractions {pairs}")
    if report.get("weights_blocked"):
        b = report["weights_blocked"]
        out.append(
            f"  BLOCKED: refused at block {b['block']} ({b['reason']}): not sent again until the hold "
            "expires or the cause is gone"
        )
    err = report["last_chain_error"]
    out += [
        "",
        f"chain errors: {report['chain_errors']} (consecutive failing passes: "
        f"{report.get('chain_failures_consecutive', 0)})",
    ]
    if err:
        out += block("  last: ", f"{err['op']} {err['error_type']} ({_ago(err['at'])}): {err['message']}")
    return "\n".join(out)
