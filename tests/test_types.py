"""The type checker runs in CI (pyproject's [tool.mypy]): the core packages are clean, and the gate is live."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _mypy(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mypy", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        check=False,
    )


def test_the_core_packages_are_mypy_clean() -> None:
    """No arguments: mypy checks what [tool.mypy] `files` names (cacheon_subnet, arena, seams)."""
    r = _mypy()
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_mypy_rejects_a_type_error_in_an_unannotated_function(tmp_path: Path) -> None:
    """The broken control: the same config on a file with a type error mypy reports only when the
    config's check_untyped_defs is read (an unannotated body is skipped by default)."""
    (tmp_path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    (tmp_path / "bad.py").write_text('def f():\n    x: int = "not an int"\n    return x\n')
    r = _mypy("--cache-dir", str(tmp_path / ".mypy_cache"), "bad.py", cwd=tmp_path)
    assert r.returncode != 0 and "bad.py:2" in r.stdout and "[assignment]" in r.stdout, r.stdout + r.stderr
