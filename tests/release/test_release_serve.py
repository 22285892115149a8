"""scripts/release_serve.py dry-run on CPU (the next lease's command must not waste GPU minutes):
the fake engine serves a signed release of examples/norm.rmsnorm A B B A against stock, every
crowned kernel counted by receipts, greedy outputs within the gate, throughput timed; a release of
the wrong-math control is caught by the quality gate (exit 1); an unsigned one is refused (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cacheon_subnet.release.build import build_release, from_bundles
from cacheon_subnet.release.sign import sign_wheel
from tests.release.fixtures import REPO, owner  # noqa: F401 - fixtures

sys.path.insert(0, str(REPO / "tests" / "seams"))
from seam_harness import write_runtime  # noqa: E402

pytestmark = pytest.mark.slow


def _small_config(tmp: Path) -> Path:
    text = (REPO / "configs/arena/dense.toml").read_text()
    for old, new in [
        ("prompts_per_window = 256", "prompts_per_window = 2"),
        ("input_len = 1024", "input_len = 8"),
        ("output_len = 128", "output_len = 4"),
    ]:
        assert old in text, old  # the dry run must stay small when dense.toml changes
        text = text.replace(old, new)
    (tmp / "small.toml").write_text(text)
    return tmp / "small.toml"


def _serve(tmp: Path, example: str, key: Any) -> tuple[subprocess.CompletedProcess, Path]:
    wheel, _ = build_release(from_bundles([str(REPO / "examples" / example)]), tmp / "rel")
    if key is not None:
        sign_wheel(wheel, key)
    root = write_runtime(tmp / "fake-sglang")
    out = tmp / "serve.json"
    cmd = [sys.executable, "scripts/release_serve.py", "--wheel", str(wheel), "--out", str(out), "--dry-run"]
    cmd += ["--engine-factory", "tests.arena.fake_engine:FakeEngine", "--config", str(_small_config(tmp))]
    cmd += ["--work", str(tmp / "w"), "--reps", "1", "--greedy-prompts", "8", "--greedy-tokens", "8"]
    if key is not None:
        cmd += ["--owner", key.ss58_address]
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{REPO}", TRITON_INTERPRET="1")
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=900), out


def test_a_faithful_release_serves_with_every_kernel_counted(tmp_path: Path, owner: Any) -> None:
    r, out = _serve(tmp_path, "norm.rmsnorm", owner)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])  # stdout ends with ok/problems
    res = json.loads(out.read_text())
    assert res["ok"] and res["problems"] == [] and res["dry_run"] and res["slots"] == ["norm.rmsnorm"]
    assert res["verify"]["outcome"] == "verified" and res["verify"]["signer"] == owner.ss58_address
    assert list(res["engines"]) == ["stock-1", "release-1", "release-2", "stock-2"]  # A B B A
    for name in ("release-1", "release-2"):
        kernels = res["engines"][name]["kernels"]
        assert kernels["ok"] and kernels["per_rank"]["0"]["norm.rmsnorm"]["completed"] > 0
        assert res["quality"][name]["ok"] and res["quality"][name]["token_match"] == 1.0
    assert res["quality"]["stock-2"]["seq_match"] == 1.0  # the control: a restart alone moves nothing here
    assert res["throughput"]["ratio"] > 0 and len(res["throughput"]["stock"]) == 2
    assert res["engine_settings"] == []  # norm needs no engine setting (attention.decode would: triton)


def test_a_wrong_kernel_is_caught_by_the_quality_gate(tmp_path: Path, owner: Any) -> None:
    r, out = _serve(tmp_path, "controls/wrong_math", owner)
    assert r.returncode == 1, (r.stdout[-2000:], r.stderr[-3000:])
    res = json.loads(out.read_text())
    assert not res["ok"] and res["engines"]["release-1"]["kernels"]["ok"]  # it ran, and was wrong
    assert any(p.startswith("release-1: greedy outputs outside the quality gate: token_match") for p in res["problems"])


def test_an_unsigned_release_is_refused_before_any_engine(tmp_path: Path) -> None:
    r, out = _serve(tmp_path, "norm.rmsnorm", None)
    assert r.returncode == 2 and "release verify says refused" in r.stderr and not out.exists()
