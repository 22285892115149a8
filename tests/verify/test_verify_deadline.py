"""Verify's total wall budget (red team 2026-12-02): a bundle that answers correctly but slowly,
just under every call's 120 s limit, held the validator's serial screening stage for about half an
hour. With `deadline_s` every op still unchecked when the budget is spent FAILs `timeout`."""

from __future__ import annotations

import time

import pytest

from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.validator.screen import VerifyScreener
from cacheon_subnet.verify import VerifyOptions, verify_bundle
from tests.conftest import EXAMPLES

DEMO = EXAMPLES / "demo" / "cpu_rmsnorm"


@pytest.mark.slow
def test_a_spent_budget_fails_the_op_as_timeout_and_a_fresh_one_passes():
    bundle = load_bundle(DEMO)
    spent = verify_bundle(bundle, VerifyOptions(device="cpu", deadline_s=0.001, max_cases=2))
    assert spent.status == "FAIL" and spent.ops[0].failure.reason == "timeout", spent.reasons
    assert "wall budget of 0.001 s is spent" in spent.ops[0].failure.detail
    ok = verify_bundle(bundle, VerifyOptions(device="cpu", deadline_s=600.0, max_cases=2))
    assert ok.status == "PASS", ok.reasons


def test_a_call_never_gets_more_than_the_budget_left():
    o = VerifyOptions(call_timeout_s=120.0, deadline_s=10.0, deadline_at=time.monotonic() + 10.0)
    assert 9.0 < o.call_limit_s() <= 10.0 and o.call_limit_s(300.0) <= 10.0
    assert VerifyOptions(call_timeout_s=120.0).call_limit_s() == 120.0
    assert VerifyOptions(deadline_s=1.0, deadline_at=time.monotonic() - 1).call_limit_s() < 0


def test_the_validators_screener_always_has_a_budget(monkeypatch):
    import cacheon_subnet.verify as v

    seen = {}

    def fake_verify(bundle, opts):
        seen[opts.device] = opts.deadline_s
        raise RuntimeError("stop")

    monkeypatch.setattr(v, "verify_bundle", fake_verify)
    for dev in ("cpu", "cuda"):
        try:
            VerifyScreener(device=dev)(load_bundle(DEMO))
        except RuntimeError:
            pass
    assert seen == {"cpu": 3600.0, "cuda": 900.0}
