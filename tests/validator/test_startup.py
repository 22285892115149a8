"""Safe defaults and start-up checks of the validator (issue 16, items 2, 3, 5): GPU arena off
local chains (CPU timing only opted in, and labelled), a state dir outside the checkout keyed
by network/netuid/hotkey, registration + permit + compat + version floor checked before any
pass, identity and effective config logged, --dry-run, and a demo that wipes only its own dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from validator_fakes import NETUID, REPO, VALIDATOR, make_chain

from arena.cpu.qualifier import CpuQualifier
from cacheon_subnet import __spec_version__, __version__, spec_version
from cacheon_subnet.validator import startup


def neuron(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "neurons" / "validator.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def test_local_networks_are_recognised():
    assert startup.is_local("local", "finney")
    assert startup.is_local("bittensor", "local") and startup.is_local("bittensor", "ws://127.0.0.1:9944")
    assert not startup.is_local("bittensor", "finney") and not startup.is_local("bittensor", "test")
    assert not startup.is_local("bittensor", "ws://10.0.0.5:9944")
    assert not startup.is_local("bittensor", "wss://127.0.0.1.evil.example:443")


def test_a_non_local_chain_needs_a_gpu_arena():
    with pytest.raises(startup.StartupError, match="required on network 'finney'"):
        startup.arena_spec(None, local=False, network="finney")
    assert startup.arena_spec(None, local=True, network="local") == "cpu"
    with pytest.raises(startup.StartupError, match="--allow-cpu-timing"):
        startup.check_timing(CpuQualifier(), local=False, allow_cpu_timing=False, network="finney")
    q = startup.check_timing(CpuQualifier(), local=True, allow_cpu_timing=False, network="local")
    assert q.label == "cpu-timing"


def test_cpu_timing_opted_in_is_labelled_in_every_record():
    q = startup.check_timing(CpuQualifier(), local=False, allow_cpu_timing=True, network="finney")
    assert q.label == startup.CPU_OPT_IN_LABEL
    r = q._result(SimpleNamespace(slot="norm.rmsnorm"), "PASS", True, 1.1, 1.1, 0.01, "x")
    assert r.label == startup.CPU_OPT_IN_LABEL  # what ledger.record_evidence stores with each verdict
    gpu = SimpleNamespace(label="gpu-arena")
    assert startup.check_timing(gpu, local=False, allow_cpu_timing=False, network="finney") is gpu
    with pytest.raises(startup.StartupError, match="not CPU timing"):
        startup.check_timing(gpu, local=False, allow_cpu_timing=True, network="finney")


def test_neuron_refuses_cpu_timing_on_mainnet_before_touching_the_chain(tmp_path, capsys):
    from cacheon_subnet.validator.commands import main

    for extra, why in (([], "required on network 'finney'"), (["--arena", "cpu"], "is CPU timing on network")):
        assert main(["--netuid", "7", "--subtensor.network", "finney", "--state-dir", str(tmp_path / "s"), *extra]) == 2
        err = capsys.readouterr().err
        assert "start-up check failed" in err and why in err, err[-1500:]
    assert not (tmp_path / "s").exists()


def test_default_state_dir_is_outside_the_checkout_and_keyed(tmp_path, monkeypatch):
    monkeypatch.delenv("CACHEON_HOME", raising=False)
    d = startup.default_state_dir("finney", 7, "5Fhk")
    assert d == Path.home() / ".cacheon" / "validator" / "finney" / "7" / "5Fhk"
    assert REPO not in d.parents
    monkeypatch.setenv("CACHEON_HOME", str(tmp_path))
    assert startup.default_state_dir("test", 7, "a/b") == tmp_path / "validator" / "test" / "7" / "a_b"
    assert startup.network_key("bittensor", "ws://127.0.0.1:9944", None) == "ws_127.0.0.1_9944"
    a, b = (startup.network_key("local", "finney", str(tmp_path / n)) for n in ("a.db", "b.db"))
    assert a != b and a.startswith("localchain-")


def test_registration_and_permit_are_checked(tmp_path):
    chain = make_chain(tmp_path / "c.db", miners=1)
    assert startup.check_registration(chain, NETUID, VALIDATOR)["uid"] is not None
    with pytest.raises(startup.StartupError, match="not registered on netuid"):
        startup.check_registration(chain, NETUID, "nobody")
    with pytest.raises(startup.StartupError, match="no validator permit"):
        startup.check_registration(chain, NETUID, "m0")


def test_spec_version_follows_the_version_and_the_owner_floor_retires(tmp_path):
    assert (
        spec_version("0.1.0") == 100
        and spec_version("1.2.3") == 10203
        and spec_version("2.0.0rc1".replace("rc1", "")) == 20000
    )
    assert __spec_version__ == spec_version(__version__)
    import tomllib

    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"] == __version__
    with pytest.raises(ValueError):
        spec_version("1.100.0")
    chain = make_chain(tmp_path / "c.db", version_key=__spec_version__)
    assert startup.check_version_key(chain, NETUID) == __spec_version__
    chain.set_hyperparams(NETUID, weights_version_key=__spec_version__ + 1)
    with pytest.raises(startup.StartupError, match="retired"):
        startup.check_version_key(chain, NETUID)


def test_identity_names_every_gpu_with_its_driver(tmp_path, monkeypatch):
    """validator.identity's GPU line is nvidia-smi's name, driver and memory (a stand-in here: no
    GPU on the CPU box); it answers only the query that asks for all three."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\n[ "$1" = --query-gpu=name,driver_version,memory.total ] || exit 9\n'
        "echo 'NVIDIA H200, 570.124.06, 143771 MiB'\n"
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    ident = startup.identity()
    assert ident["gpus"] == ["NVIDIA H200, 570.124.06, 143771 MiB"]
    assert {"torch", "sglang", "bittensor", "triton", "python", "cacheon", "spec_version"} <= set(ident)


def test_compat_must_be_green(monkeypatch):
    import cacheon_subnet.chain.compat as cc
    import seams.compat as sc

    bad = SimpleNamespace(exit_code=2, rows=())
    monkeypatch.setattr(cc, "check_sdk", lambda: bad)
    monkeypatch.setattr(cc, "render", lambda r: "bittensor version FAIL")
    with pytest.raises(startup.StartupError, match="chain-compat failed"):
        startup.check_compat("bittensor", gpu_arena=False)
    assert startup.check_compat("local", gpu_arena=False) == {}  # the embedded chain needs no SDK
    monkeypatch.setattr(sc, "runtime_check", lambda: SimpleNamespace(exit_code=1))
    monkeypatch.setattr(sc, "render", lambda r: "seam row FAIL")
    with pytest.raises(startup.StartupError, match="compat failed"):
        startup.check_compat("local", gpu_arena=True)


@pytest.fixture
def in_process(monkeypatch):
    """commands.main in this process: its signal handlers and the shutdown flag are put back."""
    import signal

    from cacheon_subnet import lifecycle

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)
    lifecycle.SHUTDOWN.clear()
    lifecycle.set_lease_dir(None)


def test_neuron_dry_run_default_state_dir_identity_and_config(tmp_path, monkeypatch, capsys, in_process):
    from cacheon_subnet.cli import main as cli_main
    from cacheon_subnet.validator.commands import main

    make_chain(tmp_path / "chain.db").close()
    home = tmp_path / "home"
    monkeypatch.setenv("CACHEON_HOME", str(home))
    common = [
        "--netuid",
        str(NETUID),
        "--chain",
        "local",
        "--local-chain",
        str(tmp_path / "chain.db"),
        "--wallet.hotkey",
        VALIDATOR,
    ]
    from structlog.testing import capture_logs

    with capture_logs() as records:
        rc = main([*common, "--once", "--dry-run"])
    r = capsys.readouterr()
    assert rc == 0, r.err[-2000:]
    assert json.loads(r.out)["weights"] == "dry_run"
    from cacheon_subnet.chain import LocalChain

    assert LocalChain.open(tmp_path / "chain.db").get_weights(NETUID, VALIDATOR) == {}  # nothing sent
    logs = {}
    for rec in records:
        logs.setdefault(rec["event"], rec)
    ident, cfg = logs["validator.identity"], logs["validator.config"]
    assert ident["cacheon"] == __version__ and "torch" in ident and "sglang" in ident and "gpus" in ident
    assert cfg["dry_run"] is True and cfg["label"] == "cpu-timing" and cfg["spec_version"] == __spec_version__
    state = Path(cfg["state_dir"])
    assert state.parent.parent.parent == home / "validator" and state.name == VALIDATOR
    assert (state / "validator.sqlite").exists() or any(state.iterdir())
    from cacheon_subnet.sandbox import fsview

    assert os.path.realpath(state) in fsview.secret_paths()  # never in a sandboxed child's view
    fsview._DENIED.clear()
    assert cli_main(["status", "--json"]) == 0  # finds the one default state dir
    assert json.loads(capsys.readouterr().out)["weights"] is None  # a dry run records no weights row


def test_neuron_unregistered_hotkey_stops_at_start(tmp_path, capsys, in_process):
    from cacheon_subnet.validator.commands import main

    make_chain(tmp_path / "chain.db").close()
    rc = main(
        [
            "--netuid",
            str(NETUID),
            "--chain",
            "local",
            "--local-chain",
            str(tmp_path / "chain.db"),
            "--wallet.hotkey",
            "not-a-neuron",
            "--state-dir",
            str(tmp_path / "state"),
            "--once",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "not registered on netuid" in err, err[-1500:]
    assert not (tmp_path / "state").exists()  # refused before any pass (no DB, no fetch)


def test_neuron_retired_by_the_version_key_stops_at_start(tmp_path, capsys, in_process):
    """The owner raised weights_version_key above this code's spec version: the CLI stops before
    its first pass (the check itself is tested above; this is its wiring into start-up)."""
    from cacheon_subnet.validator.commands import main

    make_chain(tmp_path / "chain.db", version_key=__spec_version__ + 1).close()
    rc = main(
        [
            "--netuid",
            str(NETUID),
            "--chain",
            "local",
            "--local-chain",
            str(tmp_path / "chain.db"),
            "--wallet.hotkey",
            VALIDATOR,
            "--state-dir",
            str(tmp_path / "state"),
            "--once",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "start-up check failed" in err and "retired" in err, err[-1500:]
    assert not (tmp_path / "state").exists()


def test_neuron_stops_at_start_when_chain_compat_is_red(tmp_path, capsys, monkeypatch, in_process):
    """`cacheon chain-compat` red (an SDK that lost a call we use): the bittensor-chain validator
    stops before its first pass, saying to run chain-compat."""
    import cacheon_subnet.chain
    import cacheon_subnet.chain.compat as cc
    from cacheon_subnet.chain import LocalChain
    from cacheon_subnet.validator.commands import main

    make_chain(tmp_path / "chain.db").close()

    def backend(*_a, **_k):  # the SDK chain stands in as the local one: only the compat check matters here
        chain = LocalChain.open(tmp_path / "chain.db")
        chain.hotkey = VALIDATOR
        return chain

    monkeypatch.setattr(cacheon_subnet.chain, "make_backend", backend)
    monkeypatch.setattr(cc, "check_sdk", lambda: SimpleNamespace(exit_code=2, rows=()))
    monkeypatch.setattr(cc, "render", lambda r: "bittensor version FAIL")
    rc = main(
        [
            "--netuid",
            str(NETUID),
            "--chain",
            "bittensor",
            "--subtensor.network",
            "local",
            "--state-dir",
            str(tmp_path / "state"),
            "--once",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "chain-compat failed" in err and "cacheon chain-compat" in err, err[-1500:]
    assert not (tmp_path / "state").exists()


def test_a_crashed_runs_leftovers_are_reaped_before_the_start_up_warm(tmp_path, monkeypatch, in_process):
    """The start-up warm runs an engine on the GPU: a crashed run's leftover (here a process naming
    a recorded child's scratch) is killed first, and the warm engine itself is leased (recorded
    for the next start's reaping). It used to warm before the run lock and the reaping."""
    from dataclasses import dataclass

    from validator_fakes import FakeQualifier

    from cacheon_subnet import lifecycle
    from cacheon_subnet.validator import commands

    make_chain(tmp_path / "chain.db").close()
    state = tmp_path / "state"
    scratch = tmp_path / "old-engine-scratch"
    scratch.mkdir()
    left = subprocess.Popen(["sleep", "300"], env={**os.environ, "CACHEON_SANDBOX_SCRATCH": str(scratch)})
    try:
        (state / "children").mkdir(parents=True)
        (state / "children" / f"{left.pid}.json").write_text(json.dumps({"pid": left.pid, "scratch": str(scratch)}))

        @dataclass(frozen=True)
        class GpuStandIn(FakeQualifier):  # a GPU arena as run_from_args sees one: a label and a config
            label: str = "gpu-arena"
            config: str = "arena-config"

        gpu = GpuStandIn()
        monkeypatch.setattr(commands, "load_qualifier", lambda spec: gpu)
        monkeypatch.setattr(startup, "check_compat", lambda chain, gpu_arena: {})
        seen = {}

        def warm(cfg, log):
            seen.update(cfg=cfg, leftover=left.poll(), lease=lifecycle.lease_dir())
            return "skipped"

        monkeypatch.setattr(commands, "_warm_seeds", warm)
        rc = commands.main(
            [
                "--netuid",
                str(NETUID),
                "--chain",
                "local",
                "--local-chain",
                str(tmp_path / "chain.db"),
                "--wallet.hotkey",
                VALIDATOR,
                "--arena",
                "gpu.toml",
                "--state-dir",
                str(state),
                "--once",
                "--dry-run",
            ]
        )
        assert rc == 0 and seen["cfg"] == "arena-config"
        assert seen["leftover"] is not None, "the warm started while a crashed run's engine still ran"
        assert seen["lease"] == state / "children"
    finally:
        left.kill()
        left.wait()


def test_demo_never_wipes_a_directory_it_did_not_create(tmp_path):
    mine = tmp_path / "precious"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    r = neuron("--chain", "local", "--demo", "--state-dir", str(mine))
    assert r.returncode == 2 and "not created by cacheon" in r.stderr, r.stderr[-1500:]
    assert (mine / "thesis.tex").read_text() == "years of work"


def _finney(tmp_path: Path, monkeypatch) -> list[str]:
    """A mainnet command line whose arena checks pass on any box (CPU timing, opted in); the chain
    is a stub that says so when reached (the old code got that far in weak mode)."""
    import cacheon_subnet.chain

    def reached(*a, **k):
        raise startup.StartupError("REACHED THE CHAIN")

    monkeypatch.setattr(cacheon_subnet.chain, "make_backend", reached)
    return [
        "--netuid",
        "7",
        "--subtensor.network",
        "finney",
        "--arena",
        "cpu",
        "--allow-cpu-timing",
        "--state-dir",
        str(tmp_path / "s"),
    ]


def test_neuron_refuses_weak_sandbox_mode_off_a_local_chain(tmp_path, capsys, monkeypatch):
    """Red team 2026-12-01: CACHEON_SANDBOX=weak (documented, for development; the non-root
    preflight error even suggested it) was honoured by a mainnet validator: one stderr line per
    launch, and every bundle ran as the validator's uid (root) with the wallet and the state DB
    in reach: the original break. Now it is refused before the arena, the chain or the state dir."""
    from cacheon_subnet.validator.commands import main

    monkeypatch.setenv("CACHEON_SANDBOX", "weak")
    assert main(_finney(tmp_path, monkeypatch)) == 2
    err = capsys.readouterr().err
    assert "start-up check failed" in err and "WEAK MODE" in err and "local chains only" in err, err[-1500:]
    assert not (tmp_path / "s").exists()
    assert startup.check_sandbox(local=True) == "CACHEON_SANDBOX=weak"  # local development keeps it (loudly)


def test_neuron_refuses_a_host_where_the_wall_cannot_start(tmp_path, capsys, monkeypatch):
    """A validator that is not root (or lacks bwrap, user namespaces...) cannot drop contribution
    code to a dedicated uid. It used to start, pass every check and find out per bundle."""
    from cacheon_subnet.sandbox import launcher
    from cacheon_subnet.validator.commands import main

    monkeypatch.delenv("CACHEON_SANDBOX", raising=False)
    argv = _finney(tmp_path, monkeypatch)
    launcher.preflight.cache_clear()
    try:
        with monkeypatch.context() as m:
            m.setattr(os, "geteuid", lambda: 1000)
            assert main(argv) == 2
    finally:
        launcher.preflight.cache_clear()
    err = capsys.readouterr().err
    assert "the sandbox wall does not hold" in err and "not root" in err and "doctor" in err, err[-1500:]
    assert "set CACHEON_SANDBOX=weak" not in err  # no longer the advice
    assert not (tmp_path / "s").exists()
    if os.geteuid() == 0 and sandbox_ok():
        assert startup.check_sandbox(local=False) == "wall"


def sandbox_ok() -> bool:
    from cacheon_subnet import sandbox

    return sandbox.can_drop_privileges()
