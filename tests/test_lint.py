"""The linter runs in CI (pyproject's [tool.ruff]): the tree is clean, and the gate is live."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _ruff(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--output-format", "concise", *args],
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
