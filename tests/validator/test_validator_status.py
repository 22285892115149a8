"""`cacheon status`, `cacheon validator run`, neurons/validator.py flags and --arena handling."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
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

from arena.cpu.qualifier import CpuQualifier
from cacheon_subnet import __spec_version__
from cacheon_subnet.cli import main as cli_main
from cacheon_subnet.errors import UsageError
from cacheon_subnet.validator import status
from cacheon_subnet.validator.commands import load_qualifier
from cacheon_subnet.validator.loop import Validator, ValidatorConfig


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """A validator state after one pass: one crown, one broken bundle, one malformed commitment."""
    tmp = tmp_path_factory.mktemp("status")
    chain = make_chain(tmp / "chain.db", miners=3)
    with FileServer() as srv:
        a, da = make_archive(EXAMPLES / "norm.rmsnorm", tmp, "a", {"speed.txt": "1.2"})
        w, dw = make_archive(EXAMPLES / "controls" / "wrong_math", tmp, "w")
        commit(chain, "m0", da, srv.add("a.tar.gz", a))
        commit(chain, "m1", dw, srv.add("w.tar.gz", w))
        chain.commit("m2", NETUID, "garbage", 1)
        chain.advance(2)
        config = ValidatorConfig(
            netuid=NETUID, hotkey=VALIDATOR, state_dir=tmp / "state", interval_s=0, targets=("norm.rmsnorm", "rope.neox")
        )
        v = Validator(config, chain, FakeQualifier(), screener=fake_screener())
        v.run_once()
        v.close()
    return tmp


def test_status_json_has_queue_verdicts_crowns_weights(ran, capsys):
    assert cli_main(["status", "--state-dir", str(ran / "state"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["counts"]["qualified"] == 1 and report["counts"]["failed"] == 2
    by_hotkey = {c["hotkey"]: c for c in report["contributions"]}
    assert by_hotkey["m0"]["evidence"][0]["verdict"] == "PASS"
    assert by_hotkey["m0"]["evidence"][0]["outcome"] == "crowned"
    assert by_hotkey["m1"]["reason"].startswith("verify:")
    assert by_hotkey["m2"]["rule"] == "malformed" and "not_json" in by_hotkey["m2"]["reason"]
    assert [c["hotkey"] for c in report["crowns"]] == ["m0"]
    assert report["weights"]["state"] == "verified" and report["weights"]["version_key"] == __spec_version__
    assert report["last_chain_error"] is None


def test_status_text_is_readable(ran, capsys):
    assert cli_main(["status", "--state-dir", str(ran / "state")]) == 0
    text = capsys.readouterr().out
    for needle in (
        "queue:",
        "timed 1",  # the state `qualified`, counted: never read as a win
        "crowns (1):",
        "norm.rmsnorm",
        "verified at block",
        f"version key {__spec_version__}",
        "verified, crowned",
        "malformed commitment",
        "chain errors: 0",
    ):
        assert needle in text, needle


def test_status_reports_last_chain_error(ran):
    from cacheon_subnet.validator.state import StateDB

    db = StateDB(ran / "state")
    db.log_chain_error("metagraph", TimeoutError("rpc timed out"))
    db.close()
    report = status.collect(ran / "state")
    assert report["chain_errors"] == 1 and report["last_chain_error"]["op"] == "metagraph"
    assert "rpc timed out" in status.render(report)


def test_status_without_state_is_a_usage_error(tmp_path, capsys):
    assert cli_main(["status", "--state-dir", str(tmp_path / "nothing")]) == 2
    assert "no validator state" in capsys.readouterr().err


def test_arena_cpu_and_toml(tmp_path):
    q = load_qualifier("cpu")
    assert isinstance(q, CpuQualifier) and q.label == "cpu-timing"
    cpu = tmp_path / "cpu.toml"
    cpu.write_text('kind = "cpu"\nname = "laptop"\ncases = 2\n')
    assert load_qualifier(str(cpu)).cases == 2
    bad = tmp_path / "odd.toml"
    bad.write_text('kind = "tpu"\n')
    with pytest.raises(UsageError, match="expected"):
        load_qualifier(str(bad))
    with pytest.raises(UsageError, match="no such file"):
        load_qualifier(str(tmp_path / "missing.toml"))


def test_gpu_arena_config_errors_are_clear_and_never_fall_back(tmp_path):
    gpu = tmp_path / "h200.toml"
    gpu.write_text('kind = "gpu"\nname = "h200"\n')
    with pytest.raises(UsageError) as info:
        load_qualifier(str(gpu))
    assert "missing table(s)" in str(info.value) and str(gpu) in str(info.value)


def test_gpu_arena_needs_sglang_and_a_gpu_at_start(monkeypatch):
    """On a box without SGLang the validator stops at start-up with the reason, not per contribution."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sglang" else real(name, *a))
    with pytest.raises(UsageError) as info:
        load_qualifier(str(REPO / "configs" / "arena" / "dense.toml"))
    assert "SGLang is not importable" in str(info.value)


def neuron(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "neurons" / "validator.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


@pytest.mark.slow
def test_neuron_once_on_local_chain_and_gpu_refusal(tmp_path):
    chain = make_chain(tmp_path / "chain.db")
    chain.close()
    common = [
        "--netuid",
        "1",
        "--chain",
        "local",
        "--local-chain",
        str(tmp_path / "chain.db"),
        "--wallet.hotkey",
        VALIDATOR,
        "--state-dir",
        str(tmp_path / "state"),
    ]
    r = neuron(*common, "--arena", "cpu", "--once")
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads(r.stdout)
    assert summary["weights"] == "verified" and summary["chain_error"] is None  # all burnt to the owner
    gpu = tmp_path / "gpu.toml"
    gpu.write_text('kind = "gpu"\n')
    r = neuron(*common, "--arena", str(gpu), "--once")
    assert r.returncode == 2 and "missing table(s)" in r.stderr
    r = neuron("--netuid", "1", "--chain", "local", "--once")
    assert r.returncode == 2 and "--local-chain" in r.stderr


def test_cacheon_validator_run_is_registered():
    from cacheon_subnet.cli import build_parser

    args = build_parser().parse_args(
        [
            "validator",
            "run",
            "--netuid",
            "3",
            "--chain",
            "local",
            "--local-chain",
            "x.db",
            "--once",
            "--subtensor.network",
            "test",
            "--wallet.name",
            "w",
        ]
    )
    assert args.netuid == 3 and args.subtensor_network == "test" and args.wallet_name == "w" and args.once
    assert args.handler.__name__ == "run_from_args"
