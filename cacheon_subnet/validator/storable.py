"""Text the state DB can store, whatever a worker put in it.

Why: reasons carry a bundle's own exception text, which reaches the host through JSON, and
`json.loads('"\\udcff"')` is a lone surrogate that SQLite's UTF-8 binding refuses
(UnicodeEncodeError). A kernel that raised `ValueError("\\udcff")` turned its verify FAIL into a
transient error (retried, then no_decision: a FAIL escaped), and an arena FAIL so worded crashed
every pass that collected it, lost the result and sent the same contribution back to the arena
forever, so no weights were published (red team 2026-12-04). intake.py does the same for
commitments.
"""

from __future__ import annotations


def storable(text: str) -> str:
    """`text` with every lone surrogate written as a backslash escape (`\\udcff`): valid UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
