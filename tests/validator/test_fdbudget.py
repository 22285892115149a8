"""A validator (and `cacheon miner serve`) starts by raising its soft fd limit to the hard one:
systemd and pm2 hand out a soft 1024 over a far higher hard limit, and the work needs the
reserve (the old in-process leaderboard's flood crashed every pass with EMFILE)."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO

SCRIPT = (
    "import json; from cacheon_subnet import fdbudget;\n"
    "class L:\n    def __getattr__(self, lvl): return lambda ev, **kw: print(json.dumps([lvl, ev, kw]))\n"
    "fdbudget.log_budget(L())\n"
    "import resource; print(json.dumps(resource.getrlimit(resource.RLIMIT_NOFILE)))"
)


def _run(limit: str) -> tuple[list, list]:
    out = subprocess.run(
        ["prlimit", f"--nofile={limit}", "--", sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    ).stdout.splitlines()
    return json.loads(out[0]), json.loads(out[1])


def test_the_soft_limit_is_raised_to_the_hard_one():
    (level, event, kw), now = _run("1024:8192")
    assert now == [8192, 8192] and (level, event) == ("info", "validator.nofile")
    assert (kw["soft_before"], kw["soft"], kw["hard"]) == (1024, 8192, 8192)


def test_a_low_hard_limit_is_said_with_the_fix():
    (level, event, kw), now = _run("1024:1024")
    assert now == [1024, 1024] and level == "warning" and "LimitNOFILE" in kw["fix"]
