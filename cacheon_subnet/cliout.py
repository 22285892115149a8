"""The CLIs' exit codes and their one way of printing a result: JSON (--json) or text.

Why one module: every `commands.py` carried its own `_emit` and its own `0, 1, 2`; scripts and
operators key on both (docs/operators.md, README), so the codes are named once here and each verb
prints through `emit`, whose bytes are what the verbs printed before (each kept its JSON style).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from cacheon_subnet.env import HOME, LOG_FILE, LOG_TO


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


JSON_HELP = "print the result as JSON on stdout instead of text"


def show_defaults(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Every option's help ends with its default unless it already names one (`validator run
    --help` hid the defaults of --chain, --screen-device, --wallet.*), and every `--json` says what
    it does; applied to each sub-command's parser. tests/test_cli_help.py walks every verb."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                show_defaults(sub)
            continue
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
            continue
        if not action.help and "--json" in action.option_strings:
            action.help = JSON_HELP
        default = action.default
        if not action.help or default is None or default is False or default is argparse.SUPPRESS:
            continue  # no help at all is the test's to catch, not ours to paper over
        if "default" not in action.help.lower():
            action.help += f" (default: {str(default).replace('%', '%%')})"  # argparse %-formats help
    return parser


def add_log_to(parser: argparse.ArgumentParser) -> None:
    """--log-to, the flag over CACHEON_LOG_TO (log.route_cli reads both)."""
    parser.add_argument(
        "--log-to",
        choices=LOG_TO.choices,
        default=None,
        help=f"where log lines go: auto (stderr, unless stdout shares it as one terminal or pipe: then "
        f"{LOG_FILE.name}, default ${HOME.name}/logs/cacheon.log, with warnings still said on stderr), "
        f"stderr, or file (default: env {LOG_TO.name}, else auto)",
    )
