"""procs.exit_now / run_main: the quick exit ends a process as `sys.exit` would (status, flushed
output, joined threads, atexit handlers) less the interpreter's teardown; a sandboxed child's
`wind_down=False` runs nothing the contribution registered."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from conftest import REPO

from cacheon_subnet.procs import exit_code


def _run(body: str, tmp_path) -> subprocess.CompletedProcess[str]:
    src = "import atexit, sys, threading, time\nfrom cacheon_subnet.procs import run_main\n" + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", src], capture_output=True, text=True, timeout=60, cwd=REPO, env={"MARK": str(tmp_path / "m")}
    )


@pytest.mark.parametrize(("code", "want"), [(None, 0), (0, 0), (3, 3), (256 + 7, 7), (True, 1), (False, 0)])
def test_exit_code_reads_like_sys_exit(code, want):
    assert exit_code(code) == want


def test_status_unflushed_output_and_a_usage_error(tmp_path):
    r = _run("print('partial', end='')\nrun_main(lambda: 3)\n", tmp_path)
    assert (r.returncode, r.stdout) == (3, "partial")  # the buffered stdout is not lost (pipe: block-buffered)
    r = _run("def m():\n    raise SystemExit('bad flag')\nrun_main(m)\n", tmp_path)
    assert r.returncode == 1 and "bad flag" in r.stderr


def test_wind_down_joins_threads_and_runs_atexit(tmp_path):
    body = """
    import os
    mark = os.environ["MARK"]
    atexit.register(lambda: open(mark + ".atexit", "w").close())
    def late():
        time.sleep(0.3)
        open(mark + ".thread", "w").close()
    threading.Thread(target=late).start()
    run_main(lambda: 0)
    """
    assert _run(body, tmp_path).returncode == 0
    assert (tmp_path / "m.atexit").exists() and (tmp_path / "m.thread").exists()


def test_a_sandboxed_child_runs_nothing_registered(tmp_path):
    body = """
    import os
    mark = os.environ["MARK"]
    atexit.register(lambda: open(mark + ".atexit", "w").close())
    threading.Thread(target=lambda: time.sleep(30)).start()  # would hold a normal exit 30 s
    run_main(lambda: 5, wind_down=False)
    """
    r = _run(body, tmp_path)
    assert r.returncode == 5 and not (tmp_path / "m.atexit").exists()


def test_the_console_script_and_the_verify_worker_exit_through_it():
    """The entry points the suite and every validator start most: red if one goes back to sys.exit."""
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["cacheon"] == "cacheon_subnet.cli:run"
    for path, call in (
        ("cacheon_subnet/cli.py", "run_main(main)"),
        ("cacheon_subnet/verify/worker.py", "run_main(main, wind_down=False)"),
        ("arena/engine/child.py", "run_main(lambda: main(sys.argv))"),
    ):
        tail = (REPO / path).read_text().split('if __name__ == "__main__":')[-1]
        assert call in (REPO / path).read_text() and "sys.exit" not in tail, path
