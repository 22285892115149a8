"""Every verify gate has a broken control that it rejects with the right reason."""

import pytest
from conftest import CONTROLS, EXAMPLES

from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.verify import VerifyOptions, verify_bundle

OPTS = VerifyOptions(device="cpu", max_cases=2, call_timeout_s=30)

EXPECTED = {
    "wrong_math": "mismatch",
    "partial_write": "partial_write",
    "nan_output": "nan_inf",
    "input_mutation": "input_mutated",
    "host_sync": "host_sync",
    "import_crash": "import_error",
    "nondeterministic": "nondeterministic",
    "endless_loop": "timeout",
    "raises_in_call": "exception",
}


def reason(report) -> str:
    fails = [op.failure.reason for op in report.ops if op.failure]
    return fails[0] if fails else ""


def test_every_cpu_control_is_listed():
    on_disk = {
        p.name for p in CONTROLS.iterdir() if (p / "manifest.toml").exists() and not p.name.startswith("subtle_")
    }  # quality-gate calibration: tests/verify/test_subtle_controls.py
    multirank = {"corrupt_one_rank", "skip_collective"}  # collective controls: tests/verify/test_verify_multirank.py
    assert on_disk - set(EXPECTED) == {"policy_violation", "output_aliasing", "graph_cheat"} | multirank


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_control_fails_with_its_reason(name):
    opts = OPTS if name != "endless_loop" else VerifyOptions(device="cpu", max_cases=1, call_timeout_s=4)
    report = verify_bundle(load_bundle(CONTROLS / name), opts)
    assert report.status == "FAIL"
    assert reason(report) == EXPECTED[name], report.render()


def test_policy_control_is_never_executed():
    report = verify_bundle(load_bundle(CONTROLS / "policy_violation"), OPTS)
    assert report.status == "FAIL" and report.findings
    assert {op.failure.reason for op in report.ops} == {"not_run"}
    assert any("P001" in f for f in report.findings) and any("P004" in f for f in report.findings)


def test_output_aliasing_control_is_refused_statically():
    """`out.set_(tmp)` used to reach the worker's re-point check; set_ is off the allowlist now (it
    re-points an engine's tensors for every later user), so the control ends `policy`, unexecuted."""
    report = verify_bundle(load_bundle(CONTROLS / "output_aliasing"), OPTS)
    assert report.status == "FAIL" and report.reasons[0].startswith("policy:"), report.render()
    assert [f.split(": ")[0] for f in report.findings] == ["kernel.py:27"] and "P012" in report.findings[0]
    assert {op.failure.reason for op in report.ops} == {"not_run"}


@pytest.mark.slow
def test_faithful_example_passes_and_every_verify_draws_a_fresh_secret_seed():
    report = verify_bundle(load_bundle(EXAMPLES / "norm.rmsnorm"), OPTS)
    assert report.status == "PASS", report.render()
    assert all(op.calls > 0 for op in report.ops)
    again = verify_bundle(load_bundle(EXAMPLES / "norm.rmsnorm"), VerifyOptions(device="cpu", max_cases=1))
    assert again.status == "PASS" and again.seed != report.seed  # two verifies, two secret seeds


@pytest.mark.slow
def test_constraints_excluding_every_shape_fail(example_copy):
    root = example_copy("norm.rmsnorm")
    m = root / "manifest.toml"
    m.chmod(0o644)
    m.write_text(m.read_text() + "\n[ops.constraints]\nH = { max = 8 }\n")
    report = verify_bundle(load_bundle(root), OPTS)
    assert reason(report) == "no_cases"


class _FakeClient:
    """Stands in for the worker: answers compile-mode calls the way a failing dispatch would."""

    def __init__(self, reply, eager=None):
        self.reply, self.eager = reply, eager

    def request(self, msg, tensors, timeout_s):
        reply = self.eager if self.eager is not None and msg.get("mode") != "compile" else self.reply
        return {**reply, "nonce": msg.get("nonce")}, {}


def test_compile_gate_maps_worker_failures():
    from cacheon_subnet.slots import get_slot
    from cacheon_subnet.verify.runner import _Run

    bundle = load_bundle(EXAMPLES / "norm.rmsnorm")
    run = _Run(bundle, OPTS, seed=1)
    spec = get_slot("norm.rmsnorm")
    ok = {"type": "result", "ok": True, "returned": None, "host_sync": [], "aliases": []}
    dynamo = {"type": "result", "ok": False, "reason": "exception", "error": "Unsupported: dynamo"}
    run.client = _FakeClient(dynamo, eager=ok)  # fails only under torch.compile
    f = _compile(run, bundle, spec)
    assert f is not None and f.reason == "compile" and f.stage == "compile"
    run.client = _FakeClient(dynamo)  # fails eagerly too: the kernel's own exception, whichever trial came first
    f = _compile(run, bundle, spec)
    assert f is not None and f.reason == "exception" and f.stage.startswith("eager")
    run.client = _FakeClient({"type": "result", "ok": True, "returned": None, "host_sync": [], "aliases": []})
    f = _compile(run, bundle, spec)
    assert f is not None and f.reason == "protocol"  # no tensors came back: never a silent pass


def _compile(run, bundle, spec):
    from cacheon_subnet.verify.draws import Draws
    from cacheon_subnet.verify.op_trials import OpTrials
    from cacheon_subnet.verify.opplan import OpPlan
    from cacheon_subnet.verify.shapes import PlannedCase
    from cacheon_subnet.verify.trials import Trial

    case = spec.cases("verify")[0]
    plan = OpPlan((PlannedCase(case, ("bfloat16",), "tier"),), (Trial("compile", 0, "bfloat16", watch=False),), {}, {}, {})
    draws = Draws(spec, bundle.manifest.ops[0].key, plan, secret=1, threads=0)
    try:
        return OpTrials(run, bundle.manifest.ops[0], spec, plan, draws).run()
    finally:
        draws.close()
