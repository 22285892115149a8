"""The linter and the formatter run in CI (pyproject's [tool.ruff]): the tree is clean, and each gate is live."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _ruff(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return _run("check", "--output-format", "concise", *args, cwd=cwd)


def _format_check(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return _run("format", "--check", *args, cwd=cwd)


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        check=False,
    )


def test_the_tree_is_ruff_clean() -> None:
    r = _ruff(".")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_ruff_rejects_an_undefined_name_and_an_unused_import(tmp_path: Path) -> None:
    """The broken control: the same config on a file with the two bugs it exists to catch."""
    (tmp_path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    (tmp_path / "bad.py").write_text("import os\n\n\ndef f():\n    return undefined_name\n")
    r = _ruff("bad.py", cwd=tmp_path)
    assert r.returncode != 0 and "F401" in r.stdout and "F821" in r.stdout, r.stdout + r.stderr


def test_the_tree_is_ruff_formatted() -> None:
    r = _format_check(".")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_ruff_format_flags_a_badly_formatted_file(tmp_path: Path) -> None:
    """The broken control: the same config on a file the formatter would rewrite."""
    (tmp_path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    (tmp_path / "ugly.py").write_text("x=[1,2 ,3]\ndef f( a ):\n  return a\n")
    r = _format_check("ugly.py", cwd=tmp_path)
    assert r.returncode != 0 and "ugly.py" in r.stdout + r.stderr, r.stdout + r.stderr
