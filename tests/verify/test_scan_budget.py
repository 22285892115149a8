"""The static scan and the copy identity run in a bounded child (verify/static/bound.py).

Over its CPU, wall or memory budget, or dead, the child's bundle FAILs with rule P022 naming the
budget, what was used and the file it was at; never an exception in the validator's process.
The children that break a budget here are test stand-ins (`_stand_in`: the real child's payload
reading and error handling, with its `run` replaced), so each breach is certain on any box; the
real scan meets a budget in test_real_child_*. Honest examples scan far under the budget, with
the same findings and identity as in-process, and one child serves screen, copy check and verify.
"""

from __future__ import annotations

import functools
import sys

import pytest
from conftest import EXAMPLES, REPO

from cacheon_subnet.bundle import bundle_from_files, load_bundle
from cacheon_subnet.bundle.identity.normalize import normalized_identity
from cacheon_subnet.errors import SandboxError
from cacheon_subnet.policy.scan import scan_files
from cacheon_subnet.sandbox import launcher
from cacheon_subnet.validator.screen import static_screen
from cacheon_subnet.verify import VerifyOptions, runner, verify_bundle
from cacheon_subnet.verify.static import bound as policy_bound

HONEST = load_bundle(EXAMPLES / "norm.rmsnorm")
TIGHT = policy_bound.ScanBudget(cpu_s=1, wall_s=20, memory_bytes=256 << 20)


def _stand_in(body: str):
    """An argv builder for a child that reads the payload like the real one, then runs `body`
    (with `emit`, the real frame writer) in place of the scan, under the real error handling."""
    code = (
        "import os, signal, sys, time\nimport cacheon_subnet.verify.static.child as c\n"
        "def run(head, files, manifest):\n    emit = c._emit\n"
        + "".join(f"    {line}\n" for line in body.splitlines())
        + "c.run = run\nsys.exit(c.main(sys.argv[1:]))\n"
    )
    return lambda fd: [sys.executable, "-c", code, "--fd", str(fd)]


def _check(
    monkeypatch: pytest.MonkeyPatch, body: str, budget: policy_bound.ScanBudget = TIGHT, walled: bool = True, bundle=HONEST
) -> policy_bound.StaticResult:
    policy_bound.forget()
    monkeypatch.setattr(policy_bound, "_argv", _stand_in(body))
    res = policy_bound.static_check(bundle, identity=True, budget=budget, walled=walled)
    assert not res.passed and res.breach is not None and not res.identity_done
    assert res.findings[-1].split(": ")[1].startswith("P022 static scan budget"), res.findings
    return res


@pytest.mark.parametrize("walled", [True, False], ids=["wall", "plain-child"])
def test_a_scan_over_its_cpu_budget_fails_naming_the_budget_and_the_file(monkeypatch, walled) -> None:
    res = _check(monkeypatch, "emit(c.At('checking', 'spin.py'))\nwhile True:\n    pass", walled=walled)
    assert res.findings[-1].startswith("spin.py:1: P022"), res.findings
    assert "ran out of its CPU budget: killed at 1 s CPU (RLIMIT_CPU" in res.breach and "checking spin.py" in res.breach
    assert res.wall_s < TIGHT.wall_s  # the kernel's limit ended it, not the host's deadline


@pytest.mark.parametrize("walled", [True, False], ids=["wall", "plain-child"])
def test_a_scan_over_its_wall_budget_fails_and_is_killed(monkeypatch, walled) -> None:
    budget = policy_bound.ScanBudget(cpu_s=20, wall_s=1.0)
    res = _check(monkeypatch, "emit(c.At('parsing', 'slow.py'))\ntime.sleep(60)", budget, walled)
    assert "ran past its wall budget: no result after" in res.breach and "(limit 1 s" in res.breach
    assert "parsing slow.py" in res.breach and res.wall_s < 15


def test_a_memory_balloon_fails_naming_the_limit(monkeypatch) -> None:
    res = _check(monkeypatch, "emit(c.At('parsing', 'big.py'))\nx = bytearray(2 << 30)")
    assert "ran out of memory (address-space limit 256 MiB) while parsing big.py: MemoryError" in res.breach


def test_a_crash_in_the_child_is_a_finding_not_an_exception(monkeypatch) -> None:
    res = _check(monkeypatch, "def f(n):\n    return f(n + 1)\nemit(c.At('checking', 'deep.py'))\nf(0)")
    assert "the static scan crashed while checking deep.py: RecursionError" in res.breach
    res = _check(monkeypatch, "emit(c.At('computing the normalized identity', ''))\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert res.breach.startswith("the normalized identity ended without a result (exit ") and "SIGSEGV" in res.breach


def test_an_answer_that_is_not_complete_fails_closed(monkeypatch) -> None:
    """Every frame of a clean answer, but exit 1; a flood past the answer cap; an answer without
    the identity asked for (a malformed frame: tests/verify/test_static_protocol.py)."""
    res = _check(monkeypatch, "emit(c.Findings(()))\nemit(c.Identity('norm-0'))\nemit(c.Done())\nos._exit(1)")
    assert "ended without a result (exit 1" in res.breach
    monkeypatch.setattr(policy_bound, "MAX_ANSWER_BYTES", 1 << 20)
    res = _check(monkeypatch, "while True:\n    print('x' * 65536)")
    assert "answered more than 1 MiB" in res.breach
    res = _check(monkeypatch, "emit(c.Findings(()))")
    assert "ended without a result" in res.breach  # the identity was asked and never came


def _shape(name: str):
    sys.path.insert(0, str(REPO / "scripts"))
    import scan_shapes

    return bundle_from_files(scan_shapes.SHAPES[name]())


def test_real_child_past_a_wall_budget_fails() -> None:
    """The largest shape's parse alone takes over a second of CPU here: half a second of wall is
    spent before its answer."""
    policy_bound.forget()
    res = policy_bound.static_check(_shape("binop_exprs"), identity=True, budget=policy_bound.ScanBudget(wall_s=0.5))
    assert not res.passed and "ran past its wall budget" in res.breach and "binop.py" in res.breach, res.breach


def test_a_child_that_never_starts_is_the_hosts_trouble_not_the_bundles(monkeypatch) -> None:
    """No first frame (written before any byte of the bundle is read): the wall did not start.
    The scan is retried without the wall (logged); when no child starts at all it raises
    SandboxError, which the loop treats as infrastructure, never a FAIL of the bundle."""
    import cacheon_subnet.log as log

    warned = []
    monkeypatch.setattr(log, "get_logger", lambda *a, **k: type("L", (), {"warning": lambda s, e, **kw: warned.append(e)})())
    dead = [sys.executable, "-c", "import os; os._exit(1)"]
    real = policy_bound.sandbox.launch
    monkeypatch.setattr(policy_bound.sandbox, "launch", lambda argv, **kw: real(dead, **kw))
    policy_bound.forget()
    res = policy_bound.static_check(HONEST, identity=True)
    assert res.passed and res.norm_id == normalized_identity(HONEST) and warned == ["static.unwalled"]
    monkeypatch.setattr(policy_bound, "_argv", lambda fd: dead)
    policy_bound.forget()
    with pytest.raises(SandboxError, match="the static scan's child did not start: plain child, exit 1"):
        policy_bound.static_check(HONEST, identity=True)


def test_real_child_out_of_memory_is_a_finding() -> None:
    """A 512 KiB bundle's parse needs ~270 MiB; under 200 MiB of address space it ends as a
    finding (the parser's MemoryError is P010, elsewhere P022), never an exception."""
    policy_bound.forget()
    bundle = _shape("binop_exprs")
    res = policy_bound.static_check(bundle, identity=True, budget=policy_bound.ScanBudget(memory_bytes=200 << 20))
    assert not res.passed and "MemoryError" in " ".join(res.findings), res.findings


@pytest.mark.slow
def test_every_example_scans_far_under_the_budget_with_the_in_process_answer() -> None:
    worst = 0.0
    seen = 0
    for manifest in sorted(EXAMPLES.rglob("manifest.toml")):
        bundle = load_bundle(manifest.parent)
        policy_bound.forget()
        res = policy_bound.static_check(bundle, identity=True)
        assert res.breach is None, (manifest.parent.name, res.breach)
        cuda = bundle.manifest.cuda_modules(bundle.files)  # the CUDA ops' entries may import native
        assert res.findings == tuple(str(f) for f in scan_files(bundle.files, cuda_modules=cuda)), manifest.parent.name
        if res.passed:
            assert res.identity_done and res.norm_id == normalized_identity(bundle), manifest.parent.name
        worst = max(worst, res.cpu_s)
        seen += 1
    assert seen >= 25 and worst < policy_bound.SCAN_CPU_S / 20, worst  # honest: ~0.1 s of a 20 s budget


def test_the_child_runs_behind_the_wall(monkeypatch) -> None:
    seen = []
    real = launcher.popen
    monkeypatch.setattr(launcher, "popen", lambda cmd, *a, **k: seen.append(cmd.argv) or real(cmd, *a, **k))
    policy_bound.forget()
    assert policy_bound.static_check(HONEST, identity=True).passed
    (argv,) = seen
    assert "--no-new-privs" in argv and "--unshare-all" in argv and "--seccomp" in argv
    assert any(a.startswith("--cpu=") for a in argv) and any(a.startswith("--as=") for a in argv)
    assert list(argv[-4:-2]) == ["-m", "cacheon_subnet.verify.static.child"]


def test_no_wall_now_still_runs_a_bounded_child_and_says_so(monkeypatch) -> None:
    """All sandbox uids leased (say): the scan runs unwalled, bounded, and a warning is logged."""
    import cacheon_subnet.log as log

    warned = []

    class _Log:
        def warning(self, event, **kw):
            warned.append((event, kw))

    def refuse(*a, **k):
        raise SandboxError("sandbox: all 64 sandbox uids from 64000 are in use")

    monkeypatch.setattr(policy_bound.sandbox, "launch", refuse)
    monkeypatch.setattr(log, "get_logger", lambda *a, **k: _Log())
    res = _check(monkeypatch, "emit(c.At('checking', 'spin.py'))\nwhile True:\n    pass")
    assert "ran out of its CPU budget" in res.breach
    assert warned and warned[0][0] == "static.unwalled" and "in use" in warned[0][1]["reason"]


def test_screen_copy_check_and_verify_share_one_child(monkeypatch) -> None:
    runs = []
    real = policy_bound._run
    monkeypatch.setattr(policy_bound, "_run", lambda *a: runs.append(a[0].digest) or real(*a))
    monkeypatch.setattr(runner, "_run_all", lambda *a: ([], {}))  # no worker: only the scan is under test
    policy_bound.forget()
    assert static_screen(HONEST).passed
    assert policy_bound.static_check(HONEST, identity=True).norm_id == normalized_identity(HONEST)
    assert verify_bundle(HONEST, VerifyOptions(device="cpu", max_cases=1)).findings == ()
    assert runs == [HONEST.digest]


@pytest.mark.slow
def test_a_screen_over_budget_fails_the_bundle_with_its_reason(monkeypatch) -> None:
    policy_bound.forget()
    monkeypatch.setattr(policy_bound, "_argv", _stand_in("emit(c.At('checking', 'spin.py'))\nwhile True:\n    pass"))
    monkeypatch.setattr(policy_bound, "ScanBudget", functools.partial(policy_bound.ScanBudget, cpu_s=1))
    screened = static_screen(HONEST)
    assert not screened.passed and len(screened.reasons) == 1
    assert screened.reasons[0].startswith("policy: spin.py:1: P022") and "CPU budget" in screened.reasons[0]
    report = verify_bundle(HONEST, VerifyOptions(device="cpu", max_cases=1))  # `cacheon verify`: the same child
    assert report.status == "FAIL" and "P022" in report.findings[0] and report.ops[0].failure.reason == "not_run"
