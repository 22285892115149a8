"""README's "Try the whole flow on one machine" block, run line by line as a new user would.

The commands come from README.md itself (between the miner-flow markers), so the README and this
test cannot drift apart: init, verify, pack, serve, submit, a validator pass, status, miner
status, all as `cacheon` subprocesses on a local chain in a temp dir. Only the port is swapped
for a free one and `configs/` points into the checkout.
"""

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from conftest import REPO

pytestmark = pytest.mark.slow

START, END = "<!-- miner-flow -->", "<!-- /miner-flow -->"


def readme_flow() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = text[text.index(START) + len(START) : text.index(END)]
    body = block.split("```bash", 1)[1].rsplit("```", 1)[0]
    return [ln.strip() for ln in body.strip().splitlines() if ln.strip() and not ln.strip().startswith("#")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"nothing listened on {port}")


def test_readme_miner_flow_runs_end_to_end(tmp_path):
    lines = readme_flow()
    tmp_path.chmod(0o755)  # the cwd is on the child's sys.path (-m): the sandbox uid reads it, as a checkout
    assert lines[0] == "source .venv/bin/activate" and lines[-1] == "kill %1 %2"
    port, board_port = str(_free_port()), str(_free_port())
    env = {**os.environ, "CACHEON_PROGRESS": "1", "PYTHONPATH": str(REPO)}
    env.pop("CACHEON_LOCAL_CHAIN", None)
    cli = [sys.executable, "-m", "cacheon_subnet.cli"]
    background: list[subprocess.Popen] = []
    out: dict[str, subprocess.CompletedProcess] = {}
    try:
        for line in lines[1:-1]:
            line = line.replace("8787", port).replace("8790", board_port).replace("$PWD", str(tmp_path))
            if line.startswith("export "):
                key, value = line[len("export ") :].split("=", 1)
                env[key] = value
                continue
            if line.startswith("curl -s "):
                with urllib.request.urlopen(line.split()[-1], timeout=30) as reply:
                    out["curl"] = json.loads(reply.read())
                continue
            argv = shlex.split(line.rstrip("&").strip())
            assert argv[0] == "cacheon", line
            argv = cli + [str(REPO / a) if a.startswith("configs/") else a for a in argv[1:]]
            if line.endswith("&"):
                background.append(
                    subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                )
                _wait_port(int(board_port if board_port in line else port))
                if board_port in line:  # the page a new user opens in a browser
                    with urllib.request.urlopen(f"http://127.0.0.1:{board_port}/", timeout=30) as reply:
                        out["page"] = reply.read().decode()
                continue
            t0 = time.monotonic()
            r = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
            print(f"{time.monotonic() - t0:6.1f} s  {line}")
            assert r.returncode == 0, f"{line}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
            out[" ".join(argv[3:5])] = r
    finally:
        for p in background:
            p.terminate()
            p.wait(timeout=30)

    assert "verify norm.rmsnorm" in out["verify mine/"].stderr  # a progress bar over the verify trials
    summary = json.loads(out["validator run"].stdout)
    assert summary["moved"].get("qualified") == 1 and summary["weights"] == "verified", summary
    assert "cpu-timing norm.rmsnorm" in out["validator run"].stderr  # a progress bar over the CPU timing
    status = out["status --state-dir"].stdout
    words = " ".join(status.split())  # reasons are wrapped, never cut: read them unwrapped
    # the scaffold is Triton under the CPU interpreter: verified, far slower, said in plain words
    assert re.search(r"verified, below the bar \(.*?\): \d+x slower than the fp32 reference", words), status
    assert "PASS" not in status and "fractions uid 0: 1.000" in status
    rows = out["curl"]["contributions"]
    assert out["curl"]["schema"] == "cacheon.leaderboard/1" and [r["hotkey"] for r in rows] == ["alice"], out["curl"]
    assert "alice" in out["page"] and "norm.rmsnorm" in out["page"]  # the submission, on the page
    mine = out["miner status"].stdout
    assert "alice" in mine and "serves" in mine, mine
    # the flow's validator announced its leaderboard: miner status shows its verdict, in words
    assert "unavailable" not in mine and "1 contribution(s)" in mine and "below the bar" in mine, mine
    assert "PASS" not in mine and "qualified" not in mine, mine
    shown = out["chain local"].stdout
    assert "validator-1" in shown and "revealed @" in shown and "owner=1.000" in shown, shown
