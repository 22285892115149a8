"""A bundle whose static scan runs out of its budget fails with its reason, and the screen stage
goes on with the next contribution in the same pass (issue 30 item 2).

Before: the scan ran in the validator's own process with no bound, so one commit at the 512 KiB
source cap held the serial screening stage for ~45 minutes. Here the first commit's scan never
ends (a stand-in child that spins, the real one for every other bundle) under a 1 s CPU budget:
it must end `failed` with rule P022 naming the CPU budget, and the honest commit after it must
be screened, copy-checked and qualified in that same pass, one child per bundle.
"""

from __future__ import annotations

import functools
import sys

from validator_fakes import (
    EXAMPLES,
    NETUID,
    VALIDATOR,
    FakeQualifier,
    FileServer,
    commit,
    fake_screener,
    make_archive,
    make_chain,
)

from cacheon_subnet.validator.loop import Validator, ValidatorConfig
from cacheon_subnet.verify.static import bound as policy_bound

# The real child (policy.child.main), except for a bundle holding spin.txt: it spins in the scan.
CHILD = (
    "import json, os, sys\nimport cacheon_subnet.verify.static.child as c\n"
    "fd = int(sys.argv[sys.argv.index('--fd') + 1])\n"
    "head = json.loads(os.pread(fd, 1 << 20, 0).split(b'\\n', 1)[0])\n"
    "if 'spin.txt' in head['paths']:\n"
    "    c._emit(c.At('checking', 'kernel.py'))\n"
    "    while True:\n        pass\n"
    "sys.exit(c.main(sys.argv[1:]))\n"
)


def test_an_over_budget_scan_fails_and_the_next_commit_is_screened_in_the_same_pass(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(policy_bound, "_argv", lambda fd: [sys.executable, "-c", CHILD, "--fd", str(fd)])
    monkeypatch.setattr(policy_bound, "ScanBudget", functools.partial(policy_bound.ScanBudget, cpu_s=1, wall_s=30))
    children = []
    real = policy_bound._run
    monkeypatch.setattr(policy_bound, "_run", lambda *a: children.append(a[0].digest) or real(*a))
    policy_bound.forget()
    slow = make_archive(EXAMPLES / "norm.rmsnorm", tmp_path, "slow", {"spin.txt": "x", "speed.txt": "1.3"})
    fine = make_archive(EXAMPLES / "norm.rmsnorm", tmp_path, "fine", {"speed.txt": "1.2"})
    chain = make_chain(tmp_path / "chain.db", miners=2)
    with FileServer() as srv:
        for hk, (path, digest) in (("m0", slow), ("m1", fine)):  # the slow one first: screened first
            commit(chain, hk, digest, srv.add(f"{tmp_path.name}-{path.name}", path))
            chain.advance(1)
        chain.advance(2)
        cfg = ValidatorConfig(
            netuid=NETUID,
            hotkey=VALIDATOR,
            state_dir=tmp_path / "state",
            interval_s=0,
            targets=("norm.rmsnorm",),
            retry_base_s=0.0,
            retry_max_s=0.0,
        )
        v = Validator(cfg, chain, FakeQualifier(), screener=fake_screener())
        v.run_once()
        rows = {r["hotkey"]: dict(r) for r in v.db.con.execute("SELECT * FROM contributions")}
        v.close()
    assert rows["m0"]["state"] == "failed", rows["m0"]
    reason = rows["m0"]["reason"]
    assert reason.startswith("screen: policy: kernel.py:1: P022 static scan budget"), reason
    assert "ran out of its CPU budget: killed at 1 s CPU (RLIMIT_CPU" in reason and "checking kernel.py" in reason
    assert rows["m1"]["state"] == "qualified", rows["m1"]  # same pass: screened, copy-checked, verified, timed
    assert rows["m1"]["norm_id"] and rows["m0"]["norm_id"] is None
    assert children == [slow[1], fine[1]]  # one child per bundle: the copy check read the screen's identity
