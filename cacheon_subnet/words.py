"""Plain words for verdicts, speeds and ids, shared by `cacheon status` and `cacheon demo`.

`PASS 0.001x` reads as a pass; "verified, 1000x slower than the fp32 reference" does not. One
name per hash: the *contribution id* (what validators key on) is shown everywhere; the bundle
digest (content only) is explained once, in ID_NOTE.
"""

from __future__ import annotations

import textwrap

ID_NOTE = (
    "contribution id = sha256(bundle digest + hotkey), what validators key verdicts and crowns on; "
    "the bundle digest (`cacheon digest`) hashes the content alone, so a copy has the same digest "
    "but a different contribution id"
)
SAME_SPEED = 0.005  # |ratio - 1| below this reads "as fast as"

OUTCOME_WORDS = {
    "crowned": "crowned",
    "below_bar": "below the bar (not faster by the required margin)",
    "failed": "failed",
    "no_decision": "no decision yet (too noisy to judge, or a gain over the margin that the run's noise "
    "could not confirm; measured again, never charged to the miner)",
    "beaten_by_earlier": "beaten by an earlier commit",
    "superseded": "superseded by the miner's newer commit",
}
VERDICT_WORDS = {"PASS": "verified", "FAIL": "failed", "NO_DECISION": "undecided"}

# What a verdict and a contribution's state read as on every screen (page, API label fields,
# `cacheon status`, `miner status`). A stored PASS means "correct, and timed decisively"; the
# state `qualified` means "through the arena". Neither says faster: a kernel 590x slower than the
# reference read as a green "PASS x0.0017 ... below_bar" in state `qualified`. The stored strings
# stay what they are (old rows decode); only what is shown says where the verdict settled.
OUTCOME_LABELS = {
    "crowned": "crowned",
    "below_bar": "below the bar",
    "failed": "failed",
    "no_decision": "no decision",
    "beaten_by_earlier": "beaten by an earlier commit",
    "superseded": "superseded",
}
UNSETTLED = "timed, not settled yet"
STATE_LABELS = {"no_decision": "no decision", "qualified": UNSETTLED}
STATE_NAMES = {"qualified": "timed", "no_decision": "no decision"}  # a state counted, not one row's


def state_name(state: str) -> str:
    return STATE_NAMES.get(state, state)


def verdict_label(verdict: str | None, outcome: str | None) -> str:
    """A PASS reads as where it settled ("below the bar", "crowned"), unsettled as "timed"; FAIL
    and NO_DECISION as themselves. Never "PASS" alone: it is not a ranking."""
    if verdict != "PASS":
        return {"FAIL": "FAIL", "NO_DECISION": "no decision"}.get(verdict or "", verdict or "?")
    return OUTCOME_LABELS.get(outcome or "", outcome) if outcome else UNSETTLED


def verdict_tone(verdict: str | None, outcome: str | None) -> str:
    """The page's colour class: green only for a crown."""
    if verdict == "PASS":
        return "crowned" if outcome == "crowned" else "settled" if outcome else "unsettled"
    return verdict or "unknown"


def state_label(state: str, outcomes: list[str | None]) -> str:
    """A qualified contribution reads as its best settled outcome (crowned over below the bar);
    every other state as its name in words."""
    if state != "qualified":
        return STATE_LABELS.get(state, state)
    settled = [o for o in outcomes if o]
    for best in ("crowned", "below_bar"):
        if best in settled:
            return OUTCOME_LABELS[best]
    return OUTCOME_LABELS.get(settled[0], settled[0]) if settled else UNSETTLED


def baseline_name(label: str | None) -> str:
    """What a speed ratio is against: the CPU arena times the fp32 reference, GPU arenas stock SGLang."""
    return "the fp32 reference" if (label or "").startswith("cpu") else "stock SGLang"


def _times(x: float) -> str:
    return f"{x:.0f}x" if x >= 10 else f"{x:.2f}x"


def speed_words(ratio: float | None, baseline: str = "stock") -> str:
    """1.23 -> "1.23x faster than stock"; 0.001 -> "1000x slower than stock"."""
    if ratio is None or ratio <= 0:
        return "not timed"
    if abs(ratio - 1.0) < SAME_SPEED:
        return f"as fast as {baseline} (within {SAME_SPEED:.1%})"
    if ratio > 1:
        return f"{_times(ratio)} faster than {baseline}"
    return f"{_times(1.0 / ratio)} slower than {baseline}"


def evidence_words(e: dict) -> str:
    """One evidence row: verdict and settled outcome in words, then the speed against its baseline."""
    verdict = VERDICT_WORDS.get(e.get("verdict") or "", e.get("verdict") or "?")
    outcome = e.get("outcome")
    settled = OUTCOME_WORDS.get(outcome, outcome) if outcome else "not settled yet"
    text = verdict if outcome == "failed" else f"{verdict}, {settled}"
    if e.get("verdict") == "PASS":
        text += f": {speed_words(e.get('speedup_vs_stock'), baseline_name(e.get('label')))}"
    return text


_WHITESPACE = {ord(c): " " for c in "\t\n\x0b\x0c\r"}  # what textwrap turns into spaces anyway


def printable(text: object) -> str:
    """Text safe to print on an operator's terminal: every character Python does not call printable
    (ESC and the other controls, CR, tab, bidi overrides and other format characters, unassigned
    code points) is spelled out as \\xNN / \\uNNNN. Reasons carry miner-controlled text (a bundle's
    own exception messages), so they must never reach the terminal as escape sequences."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in s)


def wrap(text: str, indent: int, width: int = 120) -> list[str]:
    """Every word of text (never cut), wrapped to `width` columns: the first line is meant to follow
    a head `indent` columns wide, the rest carry that indent themselves. Line breaks and tabs become
    spaces, everything else not printable is escaped (`printable`)."""
    pad = " " * indent
    lines = textwrap.wrap(
        printable((text or "").translate(_WHITESPACE)),
        width=max(indent + 40, width),
        initial_indent=pad,
        subsequent_indent=pad,
        break_long_words=True,
        break_on_hyphens=False,
    )
    return [lines[0][indent:], *lines[1:]] if lines else [""]


def fractions(vals: list[int] | list[float]) -> list[float]:
    """u16 weights (max-upscaled) as fractions of their sum."""
    total = float(sum(vals)) or 1.0
    return [float(v) / total for v in vals]


def block(head: str, text: str, width: int = 120) -> list[str]:
    """head + text wrapped under it (continuation lines aligned after head)."""
    first, *rest = wrap(text, len(head), width)
    return [head + first, *rest]
