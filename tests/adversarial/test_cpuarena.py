"""Red-team corpus for the CPU arena (`--arena cpu`, label cpu-timing): host clock, host judge.

These drive the real `CpuQualifier.qualify` (two sandboxed workers, shared memory, SIGSTOP
freezing) on bundles under tests/adversarial/cpuarena/. They call the qualifier directly, BELOW
the static policy scan that `cacheon verify` and the validator loop run first: the static
allowlist would refuse most of these bundles before they run (module-level state, sys.modules,
ctypes, threads), and these tests exist to show the DYNAMIC wall holds on its own. No production
flag skips the policy; the validator always verifies before it qualifies.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from arena.cpu.host_timing import FROZEN_CPU_SLACK_NS
from arena.cpu.qualifier import CpuQualifier
from cacheon_subnet.bundle.archive import load_bundle
from cacheon_subnet.records import CpuCase, CpuDetail

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

CORPUS = Path(__file__).resolve().parent / "cpuarena"
# Tiny verify-tier shapes: the attacks that must FAIL do so at their first judged batch.
QUICK = CpuQualifier(tier="verify", cases=1, min_iters=3, budget_s=0.5)
# Realistic shapes where the verdict depends on what was charged, not only on correctness.
TIMED = CpuQualifier(cases=1, min_iters=4, budget_s=1.0)


def qualify(path: Path, q: CpuQualifier = QUICK):
    bundle = load_bundle(path)
    return q.qualify(bundle, bundle.manifest.ops[0], None)


def cases(r) -> tuple[CpuCase, ...]:
    """The timed shapes a CPU verdict carries (records.CpuDetail)."""
    assert isinstance(r.detail, CpuDetail), r.detail
    return r.detail.cases


def test_honest_control_is_timed_and_judged_without_failure():
    r = qualify(EXAMPLES / "demo" / "cpu_rmsnorm")
    assert r.verdict in ("PASS", "NO_DECISION"), r.reason
    assert r.quality_ok and r.label == "cpu-timing"
    row = cases(r)[0]
    assert row.clock == "host" and row.batches_judged >= 4 * QUICK.min_iters + 4
    assert row.frozen_cpu_ns <= FROZEN_CPU_SLACK_NS * row.batches_judged


@pytest.mark.parametrize(
    "attack, reason",
    [
        ("skip_every_other", "nan_inf"),  # (a) the 2.55x in-process crown: poison left behind
        ("skip_after_warmup", "nan_inf"),  # (a'') honest through any warm-up, then skips
        ("replay_previous", "mismatch"),  # (a') skip without leaving poison: stale output
        ("memo_data_ptr", "mismatch"),  # (b) same buffer, fresh contents
        ("memo_first_element", "mismatch"),  # (b') weak content key (issue 14 class 5)
        ("early_return", "nan_inf"),  # reply before the work: outputs read after the freeze
    ],
)
def test_stale_or_skipped_timed_calls_fail(attack, reason):
    r = qualify(CORPUS / attack)
    assert r.verdict == "FAIL" and not r.quality_ok, (r.verdict, r.reason)
    assert "candidate: timed call" in r.reason and reason in r.reason, r.reason


def test_cross_call_storage_is_not_reachable():
    """Each call is its own mapping: call i cannot see call i+1's inputs (no cross-call fusion)."""
    r = qualify(CORPUS / "cross_call_peek")
    assert r.verdict == "FAIL" and "no neighbouring call to fuse with" in r.reason, r.reason


def test_fork_offload_fails_closed():
    r = qualify(CORPUS / "fork_offload")
    assert r.verdict == "FAIL", (r.verdict, r.reason)
    # behind the OS wall its ctypes import is refused outright; in weak mode the process scan catches it
    assert any(k in r.reason for k in ("child processes", "started or lost processes", "import failed")), r.reason


def test_setsid_escape_fails_closed():
    """A helper that left the process group would dodge the freeze: behind the OS wall the unit is
    the sandbox's pid namespace (the helper is frozen and counted with it); in weak mode its parent
    is still a group member and the scan names it."""
    r = qualify(CORPUS / "setsid_escape")
    assert r.verdict == "FAIL", (r.verdict, r.reason)
    assert any(
        k in r.reason for k in ("left its process group", "started or lost processes", "import failed", "child processes")
    ), r.reason


def test_forged_timing_fields_are_refused():
    """(c) The worker's replies claim 1 ns per call: fields no reply has, so the strict decoder
    (verify/protocol.py) refuses its first reply and the op FAILs naming them, never timed."""
    r = qualify(CORPUS / "fake_timings", TIMED)
    assert r.verdict == "FAIL" and "malformed load reply" in r.reason and "unknown key" in r.reason, r.reason
    assert r.speedup_vs_stock == 1.0 and not cases(r), r


def test_stopped_worker_clocks_are_ignored():
    """(c') Its clocks stand still: the verdict is the host's, so this stock-equivalent kernel is
    no faster than the reference."""
    r = qualify(CORPUS / "fake_clocks", TIMED)
    assert r.verdict in ("PASS", "NO_DECISION"), r.reason
    assert r.speedup_vs_stock < 1.25, r  # forged: 1e6x; honest stock-equivalent: ~1.0
    assert cases(r)[0].candidate_us > 10.0


def test_spinner_cannot_run_during_the_baseline_and_pays_for_itself():
    """(d) A thread that spins when the kernel is idle (the baseline's turn) is SIGSTOPped with
    its process for every B/B' batch: its CPU clock does not move then. While C runs, the
    spinner's CPU is charged to C."""
    r = qualify(CORPUS / "spin_on_baseline_turn", TIMED)
    row = cases(r)[0] if cases(r) else None
    assert r.verdict != "FAIL" or "while frozen" not in r.reason, r.reason
    assert row and row.frozen_cpu_ns <= FROZEN_CPU_SLACK_NS * row.batches_judged, row
    assert r.speedup_vs_stock < 1.0, r  # the spinner's CPU is the candidate's bill


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPUs to run in parallel")
def test_parallel_threads_buy_nothing():
    r = qualify(CORPUS / "parallel_threads", TIMED)
    assert r.verdict in ("PASS", "NO_DECISION"), r.reason
    # a box loaded by other work may read too noisy to decide: NO_DECISION is never a crown (the
    # validator re-measures); a decided reading must show the threads bought nothing
    if r.verdict == "PASS":
        assert r.speedup_vs_stock < 1.15, r  # stock-equivalent math; two threads, one CPU bill
    else:
        assert r.reason.startswith(("too noisy", "box:", "baseline")), r.reason


SHRINK_CHILD = """
from pathlib import Path
from cacheon_subnet.bundle.archive import load_bundle
from arena.cpu.qualifier import CpuQualifier
b = load_bundle(Path({path!r}))
r = CpuQualifier(tier="verify", cases=1, min_iters=3, budget_s=0.5).qualify(b, b.manifest.ops[0], None)
print("VERDICT", r.verdict, r.reason)
"""


def test_a_worker_that_shrinks_the_timing_memfd_cannot_crash_the_host():
    """The host maps the memfd it hands each timing worker. Unsealed, a worker that kept a dup of
    the fd and truncated it made the host's next read of the outputs a SIGBUS: the validator
    process died (red team 2026-12-04). Sealed against shrink and grow, the truncate fails in the
    worker. Run in a child, so the broken control shows as a signal, not a dead test worker."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", SHRINK_CHILD.format(path=str(CORPUS / "memfd_shrink"))],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 0, (out.returncode, out.stderr[-1500:])  # -7: SIGBUS in the host
    assert "VERDICT FAIL" in out.stdout and "timed run failed" in out.stdout, out.stdout[-800:]
