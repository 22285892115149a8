"""Observability (issue 16 item 7): status --check, --once exit status, Prometheus metrics,
stdlib logs as JSON, the pm2 file from any cwd, and the one backoff rule."""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from validator_fakes import (
    EXAMPLES,
    NETUID,
    REPO,
    VALIDATOR,
    FakeQualifier,
    FileServer,
    commit,
    fake_screener,
    make_archive,
    make_chain,
)

from cacheon_subnet.chain.backend import ChainUnavailable
from cacheon_subnet.netpolicy import LOCAL
from cacheon_subnet.retry import backoff_s, call_with_retries
from cacheon_subnet.validator.commands import cmd_status
from cacheon_subnet.validator.commands import main as validator_main
from cacheon_subnet.validator.loop import Validator, ValidatorConfig

TARGETS = ("norm.rmsnorm",)


@pytest.fixture
def world(tmp_path):
    chain = make_chain(tmp_path / "chain.db", rate_limit=5, miners=2)
    chain.advance(2)
    return {"chain": chain, "tmp": tmp_path}


def make(world, backend=None, **cfg) -> Validator:
    opts = {
        "interval_s": 0,
        "targets": TARGETS,
        "retry_base_s": 0.0,
        "retry_max_s": 0.0,
        "chain_backoff_base_s": 0.01,
        "chain_call_retry_s": 0.0,
        "url_policy": LOCAL,
        "state_dir": world["tmp"] / "state",
        **cfg,
    }
    config = ValidatorConfig(netuid=NETUID, hotkey=VALIDATOR, **opts)
    return Validator(config, backend or world["chain"], FakeQualifier(), screener=fake_screener())


def check(state_dir: Path, capsys, max_age: float = 30.0) -> tuple[int, dict]:
    rc = cmd_status(argparse.Namespace(state_dir=str(state_dir), json=True, check=True, max_pass_age=max_age))
    return rc, json.loads(capsys.readouterr().out)["health"]


class Down:
    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        def call(*a, **kw):
            raise ChainUnavailable(f"{name}: node unreachable")

        return call


def test_status_check_exit_codes_follow_health(world, capsys):
    v = make(world)
    assert v.run_once().ok
    rc, h = check(v.db.dir, capsys)
    assert rc == 0 and h == {"healthy": True, "reasons": []}
    # no completed pass for longer than the limit
    v.db.put("last_pass_at", time.time() - 3600)
    rc, h = check(v.db.dir, capsys, max_age=30)
    assert rc == 1 and any("no completed pass for 60 min" in r for r in h["reasons"])
    v.close()
    # chain errors, three passes in a row
    down = make(world, Down(world["chain"]))
    for _ in range(3):
        assert not down.run_once().ok
    rc, h = check(down.db.dir, capsys)
    assert rc == 1 and any(r.startswith("chain errors: 3 passes in a row") for r in h["reasons"])
    assert any(r.startswith("last pass failed: chain:") for r in h["reasons"])


def test_status_check_reports_set_weights_refusal(world, capsys):
    world["chain"].set_stake(VALIDATOR, 1000.0, validator_permit=False)
    v = make(world)
    v.run_once()
    rc, h = check(v.db.dir, capsys)
    assert rc == 1 and any("set_weights refused" in r and "no_validator_permit" in r for r in h["reasons"])
    from cacheon_subnet.cli import main as cli_main

    assert cli_main(["status", "--state-dir", str(v.db.dir), "--check"]) == 1
    out = capsys.readouterr().out
    assert "UNHEALTHY" in out and "set_weights refused" in out


def test_status_check_reports_weights_that_failed_read_back(world, capsys):
    """set_weights answered but the chain holds nothing: the weights row is `failed` and --check
    says so (its own rule, not only through the pass's problems)."""
    from cacheon_subnet.chain import WeightsReceipt

    class DropsWeights:  # accepts set_weights and returns a receipt; the chain never stores them
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            if name == "set_weights":
                return lambda hotkey, netuid, uids, weights, version_key: WeightsReceipt(
                    self.inner.current_block(), version_key, tuple(uids), tuple(weights)
                )
            return getattr(self.inner, name)

    v = make(world, DropsWeights(world["chain"]))
    assert v.run_once().weights == "failed"
    v.db.put("last_pass_ok", 1)  # only the weights row speaks: the rule must not lean on the pass's problems
    rc, h = check(v.db.dir, capsys)
    assert rc == 1 and any(r.startswith("set_weights failing:") and "read-back mismatch" in r for r in h["reasons"]), h
    assert not any(r.startswith("last pass failed") for r in h["reasons"]), h


def test_once_exits_nonzero_when_every_fetch_failed(world, tmp_path):
    chain = world["chain"]
    archive, digest = make_archive(EXAMPLES / "norm.rmsnorm", tmp_path, "a")
    with FileServer() as srv:
        commit(chain, "m0", digest, srv.url("status/404"))
        chain.advance(2)
        argv = [
            "--netuid",
            str(NETUID),
            "--chain",
            "local",
            "--local-chain",
            str(chain.path),
            "--wallet.hotkey",
            VALIDATOR,
            "--arena",
            "cpu",
        ]
        assert validator_main(argv + ["--state-dir", str(tmp_path / "bad"), "--once"]) == 1
    from cacheon_subnet.validator import status

    (row,) = status.collect(tmp_path / "bad")["contributions"]
    assert row["state"] == "failed" and row["reason"].startswith("fetch: http_status"), row  # the stage, then why
    empty = make_chain(tmp_path / "empty.db", miners=1)
    empty.advance(2)
    ok_argv = [
        "--netuid",
        str(NETUID),
        "--chain",
        "local",
        "--local-chain",
        str(empty.path),
        "--wallet.hotkey",
        VALIDATOR,
        "--arena",
        "cpu",
        "--state-dir",
        str(tmp_path / "good"),
        "--once",
    ]
    assert validator_main(ok_argv) == 0


def test_metrics_cover_passes_queue_verdicts_weights_and_chain_errors(world, tmp_path):
    chain = world["chain"]
    archive, digest = make_archive(EXAMPLES / "norm.rmsnorm", tmp_path, "a", {"speed.txt": "1.2"})
    with FileServer() as srv:
        commit(chain, "m0", digest, srv.add("a.tar.gz", archive))
        chain.advance(2)
        v = make(world)
        assert v.run_once().ok
    text = generate_latest(v.metrics.registry).decode()
    assert 'cacheon_validator_passes_total{result="ok"} 1.0' in text
    assert 'cacheon_validator_queue{state="qualified"} 1.0' in text
    assert 'cacheon_validator_verdicts_total{verdict="PASS"} 1.0' in text
    assert 'cacheon_validator_weights_total{action="verified"} 1.0' in text
    assert re.search(r"cacheon_validator_weights_verified_block \d+\.0", text)
    v.close()
    down = make(world, Down(chain), chain_call_retries=0, state_dir=tmp_path / "down")
    down.run_once()
    text = generate_latest(down.metrics.registry).decode()
    assert re.search(r'cacheon_validator_chain_errors_total\{kind="transient",op="current_block"\} [1-9]', text)
    assert 'cacheon_validator_passes_total{result="failed"} 1.0' in text
    port = down.metrics.serve(0)
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        down.metrics.stop()
    assert "cacheon_validator_last_pass_timestamp_seconds" in body


def test_stdlib_logs_come_out_as_json_lines():
    code = (
        "from cacheon_subnet import log; log.configure(json=True); import logging, warnings;"
        "logging.getLogger('bittensor').warning('sdk says %s', 'hi');"
        "logging.getLogger('sglang.srt').error('engine'); warnings.warn('deprecated thing');"
        "log.get_logger('cacheon.x').info('ours', k=1)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    lines = [json.loads(line) for line in r.stderr.splitlines() if line.strip()]  # every line parses
    by_event = {d["event"]: d for d in lines}
    assert by_event["sdk says hi"]["logger"] == "bittensor" and by_event["sdk says hi"]["level"] == "warning"
    assert by_event["engine"]["logger"] == "sglang.srt" and "timestamp" in by_event["engine"]
    assert any("deprecated thing" in d["event"] for d in lines)
    assert by_event["ours"]["k"] == 1


@pytest.mark.skipif(shutil.which("node") is None, reason="node not installed")
def test_pm2_file_resolves_every_path_from_its_own_location(tmp_path):
    cfg = REPO / "configs" / "pm2" / "ecosystem.config.js"
    js = f"console.log(JSON.stringify(require({json.dumps(str(cfg))})))"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEON_")}
    env.update(CACHEON_ARENA="configs/arena/dense.toml", CACHEON_METRICS_PORT="9477", HOME=str(tmp_path), CACHEON_NETUID="7")
    out = subprocess.run(["node", "-e", js], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    app = json.loads(out.stdout)["apps"][0]
    assert app["cwd"] == str(REPO) and Path(app["script"]).is_file() and Path(app["script"]).is_absolute()
    venv = REPO / ".venv" / "bin" / "python"
    assert app["interpreter"] == (str(venv) if venv.exists() else "python3")
    assert app.get("time") is not True and "log_type" not in app
    assert app["kill_timeout"] >= 30000  # test_shutdown.py's bound: the validator stops well inside it
    for key in ("out_file", "error_file"):
        assert Path(app[key]).is_absolute() and str(app[key]).startswith(str(tmp_path / ".cacheon" / "logs"))
    args = app["args"]
    assert args[args.index("--arena") + 1] == str(REPO / "configs/arena/dense.toml")
    assert args[args.index("--metrics-port") + 1] == "9477" and args[args.index("--netuid") + 1] == "7"
    env["CACHEON_PYTHON"] = "/opt/py/bin/python"
    out = subprocess.run(["node", "-e", js], capture_output=True, text=True, timeout=60, cwd="/", env=env)
    assert json.loads(out.stdout)["apps"][0]["interpreter"] == "/opt/py/bin/python"


@pytest.mark.skipif(shutil.which("node") is None, reason="node not installed")
def test_pm2_defaults_are_a_gpu_arena_and_cpu_timing_only_by_opt_in(tmp_path):
    cfg = REPO / "configs" / "pm2" / "ecosystem.config.js"
    js = f"console.log(JSON.stringify(require({json.dumps(str(cfg))}).apps[0].args))"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEON_")}
    env.update(HOME=str(tmp_path), CACHEON_NETUID="3")
    args = json.loads(subprocess.run(["node", "-e", js], capture_output=True, text=True, timeout=60, env=env).stdout)
    assert args[args.index("--arena") + 1] == str(REPO / "configs/arena/dense.toml")
    assert "--allow-cpu-timing" not in args and "--state-dir" not in args  # default dir: outside the checkout
    assert args[args.index("--screen-device") + 1] == "cuda"
    env.update(CACHEON_ARENA="cpu", CACHEON_ALLOW_CPU_TIMING="1")
    args = json.loads(subprocess.run(["node", "-e", js], capture_output=True, text=True, timeout=60, env=env).stdout)
    assert args[args.index("--arena") + 1] == "cpu" and "--allow-cpu-timing" in args


@pytest.mark.skipif(shutil.which("node") is None, reason="node not installed")
@pytest.mark.parametrize("netuid", [None, "", "one", "1; rm"])
def test_pm2_file_refuses_to_load_without_a_netuid(tmp_path, netuid):
    """No silent default subnet: a wrong netuid fails start-up and pm2 would restart it 50 times."""
    cfg = REPO / "configs" / "pm2" / "ecosystem.config.js"
    js = f"console.log(JSON.stringify(require({json.dumps(str(cfg))}).apps[0].args))"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEON_")}
    env["HOME"] = str(tmp_path)
    if netuid is not None:
        env["CACHEON_NETUID"] = netuid
    r = subprocess.run(["node", "-e", js], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode != 0 and "export CACHEON_NETUID" in r.stderr and not r.stdout.strip()


def test_one_backoff_rule():
    rng = random.Random(1)
    for attempt in range(12):
        d = backoff_s(attempt, 2.0, 300.0, rng)
        assert 0.5 * min(300.0, 2.0 * 2**attempt) <= d <= min(300.0, 2.0 * 2**attempt)
    slept: list[float] = []
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("x")
        return "ok"

    assert call_with_retries(flaky, attempts=5, base_s=1.0, sleep=slept.append) == "ok"
    assert len(slept) == 2 and 0.5 <= slept[0] <= 1.0 and 1.0 <= slept[1] <= 2.0


def test_no_other_backoff_formula_lives_in_the_code():
    """Retry delays come from cacheon_subnet.retry only: no hand-rolled `2 **` growth, jitter or
    sleep-in-a-retry-loop elsewhere in the loop, publish, chain and miner code."""
    pattern = re.compile(r"\*\s*2\s*\*\*|random\.uniform|delay\s*\*=\s*2")
    roots = [REPO / "cacheon_subnet" / d for d in ("validator", "chain", "miner")] + [REPO / "neurons"]
    hits = [
        f"{p.relative_to(REPO)}:{i}"
        for root in roots
        for p in root.rglob("*.py")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert hits == [], hits
