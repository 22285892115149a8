"""The CLI's log lines never land between its human output (issue 34: JSON log lines interleaved
with verify's, submit's and `validator run`'s own words): stdout and stderr shared as one pipe
or terminal send them to a file, with warnings said on stderr in one plain line; separate
streams keep them on stderr as before; CACHEON_LOG_TO / --log-to choose outright."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import EXAMPLES, REPO

from cacheon_subnet.env import HOME, LOG_FILE, LOG_TO

SCRIPT = """
import sys
from cacheon_subnet import log
where = log.route_cli(to=sys.argv[1] if len(sys.argv) > 1 else None)
lg = log.get_logger("t")
print("HUMAN one", flush=True)
lg.info("t.info", n=1)
lg.warning("t.warn", why="disk low")
print("HUMAN two", flush=True)
print("WHERE", where, flush=True)
"""


def _env(tmp_path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (LOG_TO.name, LOG_FILE.name)}
    return {**env, HOME.name: str(tmp_path / "home"), "PYTHONPATH": str(REPO), **extra}


def _json_lines(text: str) -> list[dict]:
    return [json.loads(ln) for ln in text.splitlines() if ln.startswith("{")]


def _run(tmp_path, shared: bool, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if shared else subprocess.PIPE,
        text=True,
        timeout=60,
        env=_env(tmp_path, **env),
    )


def test_one_shared_pipe_gets_no_json_log_lines_and_the_file_gets_them(tmp_path):
    r = _run(tmp_path, shared=True)
    log_file = tmp_path / "home" / "logs" / "cacheon.log"
    assert _json_lines(r.stdout) == [], r.stdout
    assert "HUMAN one" in r.stdout and "HUMAN two" in r.stdout and f"WHERE {log_file}" in r.stdout
    # the warning is still said, in one plain line naming the file
    assert f"cacheon: warning: t.warn (why=disk low) [log: {log_file}]" in r.stdout, r.stdout
    events = [e["event"] for e in _json_lines(log_file.read_text())]
    assert events == ["t.info", "t.warn"]


def test_separate_streams_keep_the_log_lines_on_stderr(tmp_path):
    r = _run(tmp_path, shared=False)
    assert [e["event"] for e in _json_lines(r.stderr)] == ["t.info", "t.warn"]
    assert _json_lines(r.stdout) == [] and "WHERE stderr" in r.stdout
    assert not (tmp_path / "home" / "logs").exists()


def test_asking_for_stderr_or_the_file_wins(tmp_path):
    r = _run(tmp_path, True, **{LOG_TO.name: "stderr"})
    assert [e["event"] for e in _json_lines(r.stdout)] == ["t.info", "t.warn"]
    r = _run(tmp_path, True, "stderr", **{LOG_TO.name: "file"})  # the flag over the env var
    assert [e["event"] for e in _json_lines(r.stdout)] == ["t.info", "t.warn"]
    target = tmp_path / "elsewhere.log"
    r = _run(tmp_path, False, "file", **{LOG_FILE.name: str(target)})
    assert _json_lines(r.stderr) == [] and [e["event"] for e in _json_lines(target.read_text())] == ["t.info", "t.warn"]


@pytest.mark.slow
def test_cacheon_verify_in_one_pipe_prints_its_report_alone(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "cacheon_subnet.cli", "verify", str(EXAMPLES / "norm.rmsnorm"), "--max-cases", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
        cwd=REPO,
        env=_env(tmp_path),
    )
    assert r.returncode == 0, r.stdout[-2000:]
    assert _json_lines(r.stdout) == [] and r.stdout.startswith("cacheon verify: PASS"), r.stdout[-2000:]
    logged = _json_lines((tmp_path / "home" / "logs" / "cacheon.log").read_text())
    assert "verify.op" in [e["event"] for e in logged]
