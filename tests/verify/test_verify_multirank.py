"""Multi-rank verify on CPU (gloo): faithful collectives pass, broken ones fail naming the rank,
a stuck rank is ended by timeout with every rank process killed, usage errors exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from conftest import CONTROLS, EXAMPLES, REPO

from cacheon_subnet import sandbox
from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.errors import UsageError
from cacheon_subnet.verify import VerifyOptions, verify_bundle
from cacheon_subnet.verify import ranks as ranks_mod
from cacheon_subnet.verify.multirank import plan_ranks

FAST = VerifyOptions(device="cpu", max_cases=1, call_timeout_s=30, world_size=2)


def _failure(report):  # noqa: ANN001, ANN202
    return next(op.failure for op in report.ops if op.failure)


def _members(pgid: int) -> list[int]:
    """Live processes in process group `pgid` (the launcher's: every rank of one run)."""
    return sandbox.live_members(pgid)


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Process-group ids of every rank group started during the test."""
    pgids: list[int] = []
    start = ranks_mod.RankGroup.start

    def spy(self: ranks_mod.RankGroup) -> None:
        start(self)
        pgids.append(self.pid)

    monkeypatch.setattr(ranks_mod.RankGroup, "start", spy)
    return pgids


@pytest.mark.slow
@pytest.mark.parametrize("example", ["collective.all_reduce", "collective.ar_residual_rmsnorm"])
def test_faithful_collectives_pass_on_two_ranks(example: str, launched: list[int]) -> None:
    report = verify_bundle(load_bundle(EXAMPLES / example), FAST)
    assert report.status == "PASS", report.render()
    (op,) = report.ops
    assert op.world_size == 2 and op.calls > 3 * len(op.dtypes) and report.env["world_size"] == 2
    assert "x 2 ranks" in report.render()
    assert launched and all(_members(g) == [] for g in launched)


@pytest.mark.slow
def test_corrupt_one_rank_fails_mismatch_on_rank_1() -> None:
    report = verify_bundle(load_bundle(CONTROLS / "corrupt_one_rank"), FAST)
    f = _failure(report)
    assert report.status == "FAIL" and (f.reason, f.rank) == ("mismatch", 1), report.render()
    assert f.detail.startswith("rank 1: out:") and "rank 1" in str(f)


@pytest.mark.slow
def test_skip_collective_is_caught_in_bounded_time_and_every_rank_killed(launched: list[int]) -> None:
    t0 = time.monotonic()
    report = verify_bundle(
        load_bundle(CONTROLS / "skip_collective"), VerifyOptions(device="cpu", max_cases=1, call_timeout_s=6, world_size=2)
    )
    took = time.monotonic() - t0
    f = _failure(report)
    assert report.status == "FAIL" and f.reason in ("timeout", "mismatch"), report.render()
    assert took < 30, f"took {took:.0f} s"
    if f.reason == "timeout":
        assert f.rank == 0 and "rank(s) [1] did" in f.detail and "all 2 rank processes were killed" in f.detail
    (pgid,) = launched
    assert _members(pgid) == [], "rank processes survived the timeout"


@pytest.mark.slow
def test_rank_that_raises_is_the_reason_not_the_hang_it_causes(make_bundle) -> None:  # noqa: ANN001
    kernel = (
        "import torch\nimport torch.distributed as dist\n\n\ndef all_reduce(x, out, group):\n"
        "    if dist.get_rank(group) == 1:\n        raise RuntimeError('rank one gives up')\n"
        "    out.copy_(x)\n    dist.all_reduce(out, group=group)\n"
    )
    manifest = (
        'schema = "cacheon.bundle/2"\n\n[[ops]]\nslot = "collective.all_reduce"\n'
        'entry = "kernel:all_reduce"\ndtypes = ["float32"]\n'
    )
    root = make_bundle({"manifest.toml": manifest, "kernel.py": kernel})
    report = verify_bundle(load_bundle(root), VerifyOptions(device="cpu", max_cases=1, call_timeout_s=5, world_size=2))
    f = _failure(report)
    assert (f.reason, f.rank) == ("exception", 1) and "rank one gives up" in f.detail, report.render()


KERNEL_HEAD = (
    "import torch\nimport torch.distributed as dist\n\n\ndef all_reduce(x, out, group):\n    r = dist.get_rank(group)\n"
)
SUM_INTO_OUT = "    out.copy_(x)\n    dist.all_reduce(out, group=group)\n"
RANK1_BUGS = {  # rank 0 is always right; rank 1 breaks exactly one gate
    "nan_inf": SUM_INTO_OUT + "    if r == 1:\n        out[0, 0] = float('nan')\n",
    "input_mutated": SUM_INTO_OUT + "    if r == 1:\n        x.mul_(2)\n",
    "nondeterministic": SUM_INTO_OUT + "    if r == 1:\n        out[0] += 4e-6 * torch.rand_like(out[0])\n",
    "partial_write": (
        "    y = x.clone()\n    dist.all_reduce(y, group=group)\n"
        "    rows = out.shape[0] - int(r == 1)\n    out[:rows].copy_(y[:rows])\n"
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("reason", sorted(RANK1_BUGS))
def test_every_gate_runs_on_every_rank(reason: str, make_bundle) -> None:  # noqa: ANN001
    kernel = KERNEL_HEAD + RANK1_BUGS[reason]
    manifest = (
        'schema = "cacheon.bundle/2"\n\n[[ops]]\nslot = "collective.all_reduce"\n'
        'entry = "kernel:all_reduce"\ndtypes = ["float32"]\n'
    )
    root = make_bundle({"manifest.toml": manifest, "kernel.py": kernel})
    report = verify_bundle(
        load_bundle(root), VerifyOptions(device="cpu", max_cases=1, call_timeout_s=20, compile_check=False, world_size=2)
    )
    f = _failure(report)
    assert (f.reason, f.rank) == (reason, 1), report.render()


def test_plan_usage_errors_and_defaults() -> None:
    ar = load_bundle(EXAMPLES / "collective.all_reduce").manifest.ops
    norm = load_bundle(EXAMPLES / "norm.rmsnorm").manifest.ops
    assert plan_ranks(ar, None) == {2: list(ar)} and plan_ranks(norm, None) == {}
    assert plan_ranks(ar, 4) == {4: list(ar)}
    with pytest.raises(UsageError, match="collective slots only; norm.rmsnorm"):
        plan_ranks(norm, 2)
    with pytest.raises(UsageError, match="--world-size 1: collective slot"):
        plan_ranks(ar, 1)
    with pytest.raises(UsageError, match="2..8 ranks"):
        plan_ranks(ar, 64)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cacheon_subnet.cli", *args], capture_output=True, text=True, timeout=300, cwd=REPO
    )


@pytest.mark.slow
def test_cli_world_size() -> None:
    # --no-compile: the flag's path to two ranks is under test here; torch.compile on both ranks is
    # test_faithful_collectives_pass_on_two_ranks' (FAST keeps the compile check; ~2 CPU-s each)
    ok = _cli(
        "verify",
        str(EXAMPLES / "collective.all_reduce"),
        "--world-size",
        "2",
        "--max-cases",
        "1",
        "--device",
        "cpu",
        "--json",
        "--no-compile",
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    data = json.loads(ok.stdout)
    assert data["status"] == "PASS" and data["ops"][0]["world_size"] == 2
    single = _cli("verify", str(EXAMPLES / "norm.rmsnorm"), "--world-size", "2")
    assert single.returncode == 2 and "--world-size is for collective slots only" in single.stderr
    one = _cli("verify", str(EXAMPLES / "collective.all_reduce"), "--world-size", "1")
    assert one.returncode == 2 and "need 2..8 ranks" in one.stderr
