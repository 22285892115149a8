"""scripts/gpu_e2e.py dry-run on CPU with the fake engine: the plumbing of the next GPU session's
end-to-end run (local chain, loopback miners, the product CLI's passes, the TEST-labelled
handicap phase that crowns and publishes, read-back, status). No GPU number comes from this."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import arena_harness as h
import pytest
from test_gpu_scripts import _small_config


@pytest.mark.slow
def test_gpu_e2e_dry_run_crowns_the_test_control_and_fails_the_broken_bundle(tmp_path):
    root = h.seam_harness.write_runtime(tmp_path / "fake-sglang")
    env = dict(
        os.environ,
        PYTHONPATH=f"{root}{os.pathsep}{h.REPO}",
        TRITON_INTERPRET="1",
        CACHEON_ARENA_HOME=str(tmp_path / "arena-home"),
        CACHEON_HOME=str(tmp_path / "home"),
    )
    out = tmp_path / "e2e.json"
    cfg = _small_config(tmp_path)
    text = cfg.read_text()
    assert "max_noise = 0.02" in text
    cfg.write_text(text.replace("max_noise = 0.02", "max_noise = 0.5"))  # a shared 2-core box: plumbing only
    r = subprocess.run(
        [
            sys.executable,
            "scripts/gpu_e2e.py",
            "--config",
            str(cfg),
            "--crown-bundle",
            str(h.REPO / "examples" / "demo" / "cpu_rmsnorm"),  # fast to verify on CPU
            "--out",
            str(out),
            "--work",
            str(tmp_path / "work"),
            "--handicap-us",
            "5000",
            "--settle-max-noise",
            "1.0",
            "--settle-max-speedup",
            "1000",
            "--engine-factory",
            "tests.arena.fake_engine:FakeEngine",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=h.REPO,
        timeout=900,
    )
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    rec = json.loads(out.read_text())
    assert rec["mode"].startswith("fake-engine")
    prod, test = rec["phases"]["product"], rec["phases"]["test-handicap"]
    fail = next(c for c in prod["status"]["contributions"] if c["hotkey"] == "miner-fail")
    assert fail["state"] == "failed" and fail["reason"].startswith("verify:"), fail
    assert prod["status_rc"] == 0 and all(p["rc"] == 0 for p in prod["passes"]), prod["passes"]
    crown = next(c for c in test["status"]["crowns"])
    assert crown["hotkey"] == "miner-crown" and test["label"] == "TEST:handicap-control"
    ev = [e for c in test["status"]["contributions"] for e in c.get("evidence", [])]
    assert ev and all(e["label"] == "TEST:handicap-control" for e in ev)  # labelled in every record
    assert test["status"]["weights"]["state"] == "verified" and test["chain_weights"]


def test_gpu_e2e_refuses_an_unknown_phase(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "scripts/gpu_e2e.py",
            "--out",
            str(tmp_path / "o.json"),
            "--work",
            str(tmp_path / "w"),
            "--phases",
            "product,nope",
        ],
        capture_output=True,
        text=True,
        cwd=h.REPO,
        timeout=120,
    )
    assert r.returncode == 2 and "--phases" in r.stderr and not (tmp_path / "w").exists()


@pytest.mark.slow
def test_gpu_e2e_keeps_the_validators_crash_and_exits_non_zero(tmp_path):
    """On the H200 (2026-12-02) neurons/validator.py died at import (a dependency missing on the
    device image) and the script raised in its own report, losing the validator's output."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(  # stands in for a missing dependency, in the validator only
        "import sys\nif sys.argv and sys.argv[0].endswith('validator.py'):\n"
        "    sys.stderr.write(\"ModuleNotFoundError: No module named 'tenacity'\\n\")\n"
        "    raise SystemExit(1)\n"
    )  # site.py swallows an Exception from sitecustomize, not SystemExit
    env = dict(
        os.environ,
        PYTHONPATH=f"{site}{os.pathsep}{h.REPO}",
        CACHEON_HOME=str(tmp_path / "home"),
        CACHEON_ARENA_HOME=str(tmp_path / "arena-home"),
    )
    out = tmp_path / "e2e.json"
    r = subprocess.run(
        [
            sys.executable,
            "scripts/gpu_e2e.py",
            "--phases",
            "product",
            "--out",
            str(out),
            "--work",
            str(tmp_path / "work"),
            "--engine-factory",
            "tests.arena.fake_engine:FakeEngine",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=h.REPO,
        timeout=300,
    )
    assert r.returncode == 1, (r.stdout[-2000:], r.stderr[-2000:])
    assert "No module named 'tenacity'" in r.stdout
    prod = json.loads(out.read_text())["phases"]["product"]
    assert "no validator state" in prod["status"]["error"] and "tenacity" in prod["passes"][0]["stderr_tail"]
    log = Path(prod["passes"][0]["log"])  # on disk as it was written: a run killed mid-pass keeps it
    assert log.parent == tmp_path / "work" and "No module named 'tenacity'" in log.read_text()


def test_the_test_phase_can_run_fewer_cycles_in_a_test_named_arena(tmp_path):
    sys.path.insert(0, str(h.REPO / "scripts"))
    import argparse

    import gpu_e2e

    from arena import load_config

    dense = h.REPO / "configs" / "arena" / "dense.toml"
    a = argparse.Namespace(config=str(dense), test_cycles=2)
    path = gpu_e2e._test_config(a, tmp_path)
    cfg, base = load_config(path), load_config(dense)
    assert cfg.workload.cycles == 2 and base.workload.cycles == 8
    assert cfg.speed.confirm_cycles == 2 and base.speed.confirm_cycles == 3 and cfg.speed.margin == base.speed.margin
    assert cfg.name.endswith("-TEST-e2e") and cfg.arena_id != base.arena_id
    assert gpu_e2e._test_config(argparse.Namespace(config=str(dense), test_cycles=None), tmp_path) == str(dense)


@pytest.mark.slow
def test_gpu_e2e_champion_phase_crowns_a_real_bundle_through_the_product_cli(tmp_path):
    """The champion phase: one miner, no control, neurons/validator.py crowns what it commits
    (on the H200: examples/attention.decode; here the CPU arena and the demo's fast CPU kernel)."""
    root = h.seam_harness.write_runtime(tmp_path / "fake-sglang")
    env = dict(
        os.environ,
        PYTHONPATH=f"{root}{os.pathsep}{h.REPO}",
        TRITON_INTERPRET="1",
        CACHEON_ARENA_HOME=str(tmp_path / "arena-home"),
        CACHEON_HOME=str(tmp_path / "home"),
    )
    out = tmp_path / "e2e.json"
    r = subprocess.run(
        [
            sys.executable,
            "scripts/gpu_e2e.py",
            "--phases",
            "champion",
            "--champion-bundle",
            str(h.REPO / "examples" / "demo" / "cpu_rmsnorm"),
            "--out",
            str(out),
            "--work",
            str(tmp_path / "work"),
            "--engine-factory",
            "tests.arena.fake_engine:FakeEngine",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=h.REPO,
        timeout=900,
    )
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    rec = json.loads(out.read_text())
    assert list(rec["phases"]) == ["champion"]
    champ = rec["phases"]["champion"]
    assert champ["netuid"] == 3 and list(champ["commits"]) == ["miner-champion"]
    assert "--netuid" in champ["argv"] and champ["argv"][champ["argv"].index("--netuid") + 1] == "3"
    crowns = champ["status"]["crowns"]
    assert [c["hotkey"] for c in crowns] == ["miner-champion"], champ["status"]["contributions"]
    assert champ["status"]["weights"]["state"] == "verified" and champ["chain_weights"]
