"""scripts/judge_bench.py (issue 30 item 6): the queue it builds and the report it reads from the
validator's log. The H200 run is the benchmark; these check the parts a wrong number would come
from (a renamed copy that is not a copy, a stage span read from the wrong events)."""

from __future__ import annotations

import importlib.util
import json
import sys
from datetime import UTC
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def jb():
    spec = importlib.util.spec_from_file_location("judge_bench", REPO / "scripts" / "judge_bench.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["judge_bench"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("src", ["attention.decode", "norm.rmsnorm", "demo/cpu_rmsnorm"])
def test_the_renamed_copy_is_a_copy_with_its_own_digest(jb, tmp_path, src):
    from cacheon_subnet.bundle import load_bundle
    from cacheon_subnet.bundle.identity.normalize import normalized_identity

    original = load_bundle(REPO / "examples" / src)
    copy = load_bundle(jb.renamed_copy(REPO / "examples" / src, tmp_path / "copy"))
    assert copy.digest != original.digest and set(copy.files) != set(original.files)
    assert normalized_identity(copy) == normalized_identity(original) is not None


def test_stages_are_read_from_the_validators_own_events(jb):
    t0 = 1_000.0

    def line(event: str, at: float, cid: str = "c1") -> str:
        from datetime import datetime

        ts = datetime.fromtimestamp(t0 + at, tz=UTC).isoformat().replace("+00:00", "Z")
        return json.dumps({"event": event, "contribution": cid, "timestamp": ts})

    lines = [
        line("intake.queued", 0),
        line("fetch.start", 1),
        line("fetch.ok", 2),
        line("screen.ok", 3),
        line("verify.start", 10),
        line("verify.pass", 40),
        line("qualify.dispatch", 45),
        line("qualify.op", 145),
        line("verify.start", 99, "other"),
        "not json",
        json.dumps({"event": "fetch.ok"}),
    ]
    verdicts = {"c1": jb.Verdict("m", "champion", "c1")}
    jb.parse_log(lines, verdicts, t0)
    v = verdicts["c1"]
    assert v.stages() == {
        "fetch": 1.0,
        "static_screen": 1.0,
        "wait_screen": 7.0,
        "verify": 30.0,
        "wait_arena": 5.0,
        "arena": 100.0,
    }
    assert v.total() == 145.0
    v.state = "qualified"
    rep = jb.report(verdicts, 3600.0)
    assert rep["verdicts"] == 1 and rep["verdicts_per_gpu_hour"] == 1.0
