"""The CLIs' exit codes and output (cacheon_subnet/cliout.py): the codes are the documented ones,
`emit` prints what each verb printed before, and no verb module prints JSON or returns a bare
number on its own any more.

Broken control: a synthetic verb module with `print(json.dumps(...))` and `return 2` is flagged.
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

import pytest

from cacheon_subnet.cliout import ARENA, ARENA_PLAIN, PLAIN, PRETTY, Exit, emit, wants_json

REPO = Path(__file__).resolve().parent.parent
VERB_MODULES = (
    "cacheon_subnet/cli.py",
    "cacheon_subnet/miner/commands.py",
    "cacheon_subnet/chain/commands.py",
    "cacheon_subnet/validator/commands.py",
    "arena/commands.py",
    "seams/commands.py",
)
PAYLOAD = {"b": 1, "a": [1.5, None], "p": Path("/x")}


def test_exit_codes_are_the_documented_ones():
    assert [int(e) for e in Exit] == [0, 1, 2, 3, 130]
    assert (Exit.OK, Exit.FAIL, Exit.USAGE, Exit.NO_DECISION) == (0, 1, 2, 3)


def test_each_style_is_the_json_a_verb_printed_before(capsys):
    no_path = {k: v for k, v in PAYLOAD.items() if k != "p"}
    cases = [
        (PRETTY, PAYLOAD, json.dumps(PAYLOAD, indent=2, sort_keys=True, default=str)),  # cli, miner, status
        (PLAIN, no_path, json.dumps(no_path, indent=2, sort_keys=True)),  # chain, compat
        (ARENA, PAYLOAD, json.dumps(PAYLOAD, indent=1, default=str)),  # arena run
        (ARENA_PLAIN, no_path, json.dumps(no_path, indent=1)),  # arena warm/id/digest
    ]
    for style, payload, before in cases:
        emit(argparse.Namespace(json=True), payload, "text", style)
        assert capsys.readouterr().out == before + "\n"
    with pytest.raises(TypeError):  # the strict styles never stringified what json cannot encode
        PLAIN.dumps(PAYLOAD)


def test_text_when_json_is_not_asked_and_lazy_text_only_then(capsys):
    emit(argparse.Namespace(json=False), PAYLOAD, "line 1\nline 2")
    emit(argparse.Namespace(), PAYLOAD, "no json flag at all")
    emit(False, PAYLOAD, lambda: "rendered")
    assert capsys.readouterr().out == "line 1\nline 2\nno json flag at all\nrendered\n"

    def boom() -> str:
        raise AssertionError("rendered for --json")

    emit(True, {"k": 1}, boom)
    assert json.loads(capsys.readouterr().out) == {"k": 1}
    assert wants_json(True) and not wants_json(argparse.Namespace(json=False))


def own_output(source: str) -> list[str]:
    """What a verb module does itself that cliout does for it: json.dumps, or `return <int>`."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "dumps":
            if isinstance(node.func.value, ast.Name) and node.func.value.id == "json":
                out.append(f"{node.lineno}: json.dumps")
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Constant) and type(node.value.value) is int:
            out.append(f"{node.lineno}: return {node.value.value}")
    return sorted(out, key=lambda s: int(s.split(":")[0]))


@pytest.mark.parametrize("path", VERB_MODULES)
def test_verb_modules_print_and_exit_through_cliout(path):
    assert own_output((REPO / path).read_text(encoding="utf-8")) == []


def test_own_output_flags_a_module_that_bypasses_cliout():
    source = "import json\ndef cmd(args):\n    print(json.dumps({}, indent=2))\n    return 2\n"
    assert own_output(source) == ["3: json.dumps", "4: return 2"]
    assert own_output("def cmd(args):\n    return Exit.OK\n") == []
