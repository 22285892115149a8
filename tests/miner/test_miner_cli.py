"""Round trip through the real entry points: `python -m cacheon_subnet.cli miner submit|status`
and `neurons/miner.py` (restart-safe: an already committed bundle is served, not re-committed)."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import EXAMPLES, REPO

from cacheon_subnet.chain import LocalChain, commitment
from cacheon_subnet.netpolicy import LOCAL

pytestmark = pytest.mark.slow

NET = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=timeout)


def wait_http(port: int, path: str, deadline_s: float = 60) -> int:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("HEAD", path)
            status = conn.getresponse().status
            conn.close()
            return status
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"nothing listening on {port}")


def test_cli_submit_status_and_neuron_round_trip(tmp_path: Path) -> None:
    chain_path = tmp_path / "chain.db"
    chain = LocalChain.create(chain_path, netuid=NET, seconds_per_block=0)
    chain.register("v1", "cv", stake=10.0, validator_permit=True)
    chain.register("m1", "cm")
    bundle = tmp_path / "bundle"
    shutil.copytree(EXAMPLES / "norm.rmsnorm", bundle)
    serve_dir = tmp_path / "serve"
    port = free_port()
    env = {**os.environ, "CACHEON_MINER_STATE": str(tmp_path / "state"), "CACHEON_LOCAL_CHAIN": str(chain_path)}
    chain_flags = ["--chain", "local", "--netuid", str(NET), "--wallet.hotkey", "m1"]

    sub = run(
        [
            "-m",
            "cacheon_subnet.cli",
            "miner",
            "submit",
            str(bundle),
            "--serve-dir",
            str(serve_dir),
            "--base-url",
            f"http://127.0.0.1:{port}",
            "--reveal-blocks",
            "3",
            "--max-cases",
            "1",
            "--json",
            *chain_flags,
        ],
        env,
    )
    assert sub.returncode == 0, sub.stdout + sub.stderr
    res = json.loads(sub.stdout)
    assert res["status"] == "committed" and res["reveal_block"] == 3
    digest = res["digest"]
    assert (serve_dir / f"{digest}.tar.gz").is_file()
    assert commitment.parse(res["payload"], "m1", LOCAL).url == f"http://127.0.0.1:{port}/{digest}.tar.gz"

    st = run(["-m", "cacheon_subnet.cli", "miner", "status", "--json", "--no-fetch", *chain_flags], env)
    assert st.returncode == 0, st.stdout + st.stderr
    data = json.loads(st.stdout)
    assert data["state"] == "pending" and data["pending"]["digest"] == digest
    assert data["uid"] == 2 and data["revealed"] is None

    # The neuron restarts on the same bundle: nothing re-committed, it just serves.
    neuron = subprocess.Popen(
        [
            sys.executable,
            "neurons/miner.py",
            "--bundle",
            str(bundle),
            "--serve-dir",
            str(serve_dir),
            "--port",
            str(port),
            "--reveal-blocks",
            "3",
            "--local-chain",
            str(chain_path),
            "--netuid",
            str(NET),
            "--hotkey",
            "m1",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert wait_http(port, f"/{digest}.tar.gz") == 200
        chain.advance(3)
        st = run(["-m", "cacheon_subnet.cli", "miner", "status", *chain_flags], env)
        assert st.returncode == 0, st.stdout + st.stderr
        assert "revealed at block 3 (committed at 0)" in st.stdout
        assert f"serves http://127.0.0.1:{port}/{digest}.tar.gz" in st.stdout
    finally:
        neuron.send_signal(signal.SIGTERM)
        out, _ = neuron.communicate(timeout=30)
    assert neuron.returncode == 0, out
    assert "already_committed" in out and "miner.serving" in out
    [c] = [c for c in chain.revealed_commitments(NET) if c.hotkey == "m1"]
    assert c.commit_block == 0  # the restart kept the original commit block (priority)


def test_cli_refuses_usage_errors(tmp_path: Path) -> None:
    chain_path = tmp_path / "chain.db"
    LocalChain.create(chain_path, netuid=NET, seconds_per_block=0)
    env = {**os.environ, "CACHEON_MINER_STATE": str(tmp_path / "state")}
    r = run(
        [
            "-m",
            "cacheon_subnet.cli",
            "miner",
            "submit",
            str(EXAMPLES / "norm.rmsnorm"),
            "--url",
            "https://example.com/a.tar.gz",
            "--serve-dir",
            str(tmp_path),
        ],
        env,
    )
    assert r.returncode == 2 and "not allowed with" in r.stderr
    r = run(["-m", "cacheon_subnet.cli", "miner", "status", "--chain", "local"], env)
    assert r.returncode == 2 and "--local-chain" in r.stderr
    r = run(
        [
            "-m",
            "cacheon_subnet.cli",
            "miner",
            "submit",
            str(EXAMPLES / "norm.rmsnorm"),
            "--serve-dir",
            str(tmp_path / "s"),
            "--local-chain",
            str(chain_path),
            "--hotkey",
            "ghost",
            "--json",
        ],
        env,
    )
    assert r.returncode == 1 and json.loads(r.stdout)["reason"] == "not_registered"
