"""Help documents every flag of every verb and shows its default (issue 34: `validator run --help`
hid the defaults of --chain, --screen-device and --wallet.*, and documented neither --netuid
nor --wallet.path)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from cacheon_subnet.cli import build_parser
from cacheon_subnet.cliout import show_defaults
from cacheon_subnet.validator.commands import add_run_args


def _verbs(parser: argparse.ArgumentParser, name: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for verb, sub in action.choices.items():
                yield from _verbs(sub, f"{name} {verb}")


def _undocumented(parser: argparse.ArgumentParser) -> list[str]:
    """Every flag with no help text, and every option whose non-trivial default its help hides."""
    bad = []
    for name, verb in _verbs(parser, parser.prog):
        verb.format_help()  # a stray % in a help string raises here
        for a in verb._actions:
            if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            flag = "/".join(a.option_strings) or a.dest
            if not a.help or a.help == argparse.SUPPRESS:
                bad.append(f"{name} {flag}: no help")
            elif a.default is not None and a.default is not False and "default" not in a.help.lower():
                bad.append(f"{name} {flag}: default {a.default!r} hidden")
    return bad


def test_every_verb_documents_every_flag_and_shows_its_default():
    parser = build_parser()
    assert len(list(_verbs(parser, "cacheon"))) > 25  # the walk reaches the nested verbs
    assert _undocumented(parser) == []


def test_validator_run_help_names_the_flags_the_issue_found_hidden():
    (run,) = [p for name, p in _verbs(build_parser(), "cacheon") if name == "cacheon validator run"]
    text = " ".join(run.format_help().split())
    for shown in (
        "the subnet's uid",  # --netuid
        "wallets directory",  # --wallet.path
        "(default: bittensor)",  # --chain
        "(default: cpu)",  # --screen-device
        "coldkey) name (default: default)",  # --wallet.name
    ):
        assert shown in text, shown


def test_a_hidden_default_or_a_flag_without_help_is_caught():
    """The walker's broken controls: without show_defaults a default stays hidden; a bare flag
    has no help whatever show_defaults does."""
    p = argparse.ArgumentParser(prog="x")
    add_run_args(p)
    assert any("--chain: default 'bittensor' hidden" in b for b in _undocumented(p))
    p.add_argument("--bare", default=3)
    assert _undocumented(show_defaults(p)) == ["x --bare: no help"]


def test_json_flags_say_what_they_do():
    p = argparse.ArgumentParser(prog="x")
    p.add_argument("--json", action="store_true")
    p.add_argument("--pct", type=float, default=0.5, help="share in %%")
    show_defaults(p)
    assert "JSON" in p._actions[1].help
    assert "(default: 0.5)" in p.format_help()
