"""The CLIs' exit codes and their one way of printing a result: JSON (--json) or text.

Why one module: every `commands.py` carried its own `_emit` and its own `0, 1, 2`; scripts and
operators key on both (docs/operators.md, README), so the codes are named once here and each verb
prints through `emit`, whose bytes are what the verbs printed before (each kept its JSON style).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any


class Exit(IntEnum):
    """Every verb: 0 ok/PASS, 1 FAIL (the bundle, check or health failed), 2 usage error."""

    OK = 0
    FAIL = 1
    USAGE = 2
    NO_DECISION = 3  # `cacheon arena run`: the windows could not decide
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as a shell reports it)


@dataclass(frozen=True)
class JsonStyle:
    """How a verb's JSON is laid out; kept per verb so no output byte moved."""

    indent: int = 2
    sort_keys: bool = True
    stringify: bool = True  # anything json cannot encode is written as str(x); False: TypeError

    def dumps(self, payload: Any) -> str:
        return json.dumps(payload, indent=self.indent, sort_keys=self.sort_keys, default=str if self.stringify else None)


PRETTY = JsonStyle()  # cacheon slots/pack/digest/verify/bench/miner/status/validator
PLAIN = JsonStyle(stringify=False)  # cacheon chain local ..., cacheon compat
ARENA = JsonStyle(indent=1, sort_keys=False)  # cacheon arena run (its result file's order)
ARENA_PLAIN = JsonStyle(indent=1, sort_keys=False, stringify=False)  # cacheon arena warm/id/digest


def wants_json(args_or_flag: Any) -> bool:
    """A bool, or an argparse Namespace whose `json` flag is read (absent: text)."""
    return args_or_flag if isinstance(args_or_flag, bool) else bool(getattr(args_or_flag, "json", False))


def emit(args_or_flag: Any, payload: Any, text: str | Callable[[], str], style: JsonStyle = PRETTY) -> None:
    """Print `payload` as JSON when asked (`--json`), else `text`; one trailing newline either way.
    `text` may be a function, called only for text output (a verb that never rendered for --json)."""
    if wants_json(args_or_flag):
        print(style.dumps(payload))
    else:
        print(text if isinstance(text, str) else text())
