"""The environment variables live in one module (cacheon_subnet/env.py): the product code names them
only through their declarations, the operators' table is the declarations', and each accessor
parses as the code always did (malformed: an error naming the variable, or a documented default).

Broken controls: a synthetic module holding a CACHEON_* literal (as a string, inside an f-string, as
a keyword argument, as bytes) is flagged, a docstring is not; a table with a row dropped or edited
is caught.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from cacheon_subnet import env
from cacheon_subnet.env import EnvError

REPO = Path(__file__).resolve().parent.parent
ROOTS = ("cacheon_subnet", "arena", "seams", "native", "neurons")
HOME_OF_NAMES = REPO / "cacheon_subnet" / "env.py"
PATTERN = re.compile(r"CACHEON_[A-Z0-9_]+")
DOC = REPO / "docs" / "operators.md"
BEGIN = "<!-- env table: generated from cacheon_subnet/env.py, checked by tests/test_env.py -->"
END = "<!-- end env table -->"


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def literals(source: str) -> Iterator[tuple[int, str]]:
    """(line, name) of every CACHEON_* name spelled out in code: a str or bytes constant (f-string
    parts included) that is not a docstring, or a keyword argument (`env.update(CACHEON_X=...)`)."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes) and id(node) not in docs:
            text = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
            for m in PATTERN.finditer(text):
                yield node.lineno, m.group()
        elif isinstance(node, ast.keyword) and node.arg and PATTERN.fullmatch(node.arg):
            yield node.value.lineno, node.arg


def product_files() -> list[Path]:
    return sorted(p for root in ROOTS for p in (REPO / root).rglob("*.py") if p != HOME_OF_NAMES)


def test_no_cacheon_literal_outside_env_py():
    found = [
        f"{p.relative_to(REPO)}:{line}: {name}"
        for p in product_files()
        for line, name in literals(p.read_text(encoding="utf-8"))
    ]
    assert not found, "name these through cacheon_subnet/env.py declarations:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        'import os\nx = os.environ.get("CACHEON_SECRET")\n',
        'def f(p):\n    """Doc."""\n    return f"set CACHEON_SECRET={p}"\n',
        "env = dict(CACHEON_SECRET='1')\n",
        'env = {}\nenv.update(PATH="/bin", CACHEON_SECRET="1")\n',
        'k = b"CACHEON_SECRET=" + b"x"\n',
        'PREFIX = "CACHEON_SEAM_"\n',
    ],
)
def test_scanner_flags_a_spelled_out_name(source):
    assert [name for _, name in literals(source)] in (["CACHEON_SECRET"], ["CACHEON_SEAM_"])


def test_scanner_leaves_docstrings_and_declared_names_alone():
    source = (
        '"""Module: reads CACHEON_SECRET."""\n'
        "from cacheon_subnet.env import JIT_SEEDS\n"
        "class C:\n"
        '    """Sets CACHEON_SECRET too."""\n'
        "    def f(self):\n"
        '        """CACHEON_SECRET=1."""\n'
        "        return {JIT_SEEDS.name: 'off'}  # CACHEON_JIT_SEEDS\n"
    )
    assert list(literals(source)) == []


def test_the_scan_sees_the_product_code():
    files = {p.relative_to(REPO).as_posix() for p in product_files()}
    assert {"cacheon_subnet/sandbox/policy.py", "arena/run.py", "seams/activate.py", "neurons/_bootstrap.py"} <= files
    assert "cacheon_subnet/env.py" not in files


# -- the declarations ---------------------------------------------------------------------------------


def test_declarations_are_unique_named_and_explained():
    names = [v.name for v in env.VARS] + [f.prefix for f in env.FAMILIES]
    assert len(names) == len(set(names))
    assert all(PATTERN.fullmatch(n) for n in names)
    assert all(f.prefix.endswith("_") for f in env.FAMILIES)
    for v in (*env.VARS, *env.FAMILIES):
        assert v.why and v.readers and all(isinstance(r, env.Reader) for r in v.readers), v
    # the identifier is the variable's name without CACHEON_
    assert all(getattr(env, v.name.removeprefix("CACHEON_")) is v for v in env.VARS)


def test_the_operators_table_is_the_declarations():
    assert doc_drift(DOC.read_text(encoding="utf-8")) == []


def doc_drift(text: str) -> list[str]:
    """Lines that differ between the table in `text` and env.markdown_table() (empty: in step)."""
    if BEGIN not in text or END not in text:
        return [f"no table between {BEGIN!r} and {END!r}"]
    have = text.split(BEGIN, 1)[1].split(END, 1)[0].strip().splitlines()
    want = env.markdown_table().splitlines()
    if have == want:
        return []
    drift = [f"- {x}" for x in have if x not in want] + [f"+ {x}" for x in want if x not in have]
    return drift or ["the rows are in another order than env.markdown_table()'s"]


def test_doc_drift_catches_a_dropped_and_an_edited_row():
    table = env.markdown_table()
    good = f"intro\n{BEGIN}\n{table}\n{END}\nrest\n"
    assert doc_drift(good) == []
    rows = table.splitlines()
    dropped = good.replace(rows[3] + "\n", "")
    assert doc_drift(dropped) == [f"+ {rows[3]}"]
    edited = good.replace("| `64000`", "| `1000`")
    assert [d[0] for d in doc_drift(edited)] == ["-", "+"]
    swapped = good.replace(rows[3] + "\n" + rows[4], rows[4] + "\n" + rows[3])
    assert doc_drift(swapped) == ["the rows are in another order than env.markdown_table()'s"]
    assert doc_drift("no table here") != []


# -- the accessors ------------------------------------------------------------------------------------


def test_unset_and_blank_mean_the_default_unless_declared_otherwise():
    assert env.JIT_SEEDS.get({}) is True
    assert env.SCRATCH.get({"CACHEON_SCRATCH": ""}) is None
    assert env.ARENA_HOME.get({}) == "/var/tmp/cacheon"
    assert env.HOME.get({}) == str(Path.home() / ".cacheon")  # ~ expanded when read, not at import
    with pytest.raises(EnvError, match="CACHEON_SANDBOX_UID=''"):  # int(""), as the sandbox always refused
        env.SANDBOX_UID.get({"CACHEON_SANDBOX_UID": ""})
    assert env.SANDBOX_STAGE.get({"CACHEON_SANDBOX_STAGE": ""}) == ""


def test_a_malformed_value_names_the_variable():
    with pytest.raises(EnvError, match=r"CACHEON_ENGINE_DISK_GIB='lots'") as e:
        env.ENGINE_DISK_GIB.get({"CACHEON_ENGINE_DISK_GIB": "lots"})
    assert isinstance(e.value, ValueError)  # what float() raised before: callers' handlers still hold
    assert env.ENGINE_DISK_GIB.get({"CACHEON_ENGINE_DISK_GIB": "0"}) == 0.0
    with pytest.raises(EnvError, match="CACHEON_SANDBOX_UIDS"):
        env.SANDBOX_UIDS.get({"CACHEON_SANDBOX_UIDS": "many"})


def test_lenient_values_keep_the_old_quiet_defaults():
    seeds = {v: env.JIT_SEEDS.get({"CACHEON_JIT_SEEDS": v}) for v in ("off", "OFF", "0", "no", "false", "on", "x")}
    assert seeds == {"off": False, "OFF": False, "0": False, "no": False, "false": False, "on": True, "x": True}
    assert env.SANDBOX.get({"CACHEON_SANDBOX": " Weak "}) == "weak"
    assert env.SANDBOX.get({"CACHEON_SANDBOX": "nope"}) == "wall"
    assert env.SEAM_STRICT.get({"CACHEON_SEAM_STRICT": "0"}) is False
    assert env.SEAM_STRICT.get({"CACHEON_SEAM_STRICT": "no"}) is True  # only "0" ever relaxed it
    assert env.FORWARD_CLOCK.get({"CACHEON_FORWARD_CLOCK": "true"}) is False  # only "1" ever armed it
    assert env.PROGRESS.get({"CACHEON_PROGRESS": "2"}) is None
    assert env.WEB_MEMORY_MIB.get({"CACHEON_WEB_MEMORY_MIB": "-5"}) == 1024  # digits only, as isdigit()
    assert env.WEB_MEMORY_MIB.get({"CACHEON_WEB_MEMORY_MIB": "2048"}) == 2048


def test_lists_and_families():
    assert env.STOCK_AS_CANDIDATE.get({"CACHEON_STOCK_AS_CANDIDATE": "a,,b"}) == ("a", "b")
    assert env.SANDBOX_DENY.get({}) == ()
    assert env.SEAM_GATE.of("norm") == "CACHEON_SEAM_NORM"


def test_reads_the_process_environment_by_default(monkeypatch):
    monkeypatch.setenv("CACHEON_SANDBOX_UIDS", "8")
    assert env.SANDBOX_UIDS.get() == 8
    monkeypatch.delenv("CACHEON_SANDBOX_UIDS")
    assert env.SANDBOX_UIDS.get() == 64
