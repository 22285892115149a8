"""The CPU arena's candidate worker imports the bundle before it answers the load request, so its
load reply is the contribution's to forge. Whatever it says (a missing key, a wrong type, an
unknown key, a huge string, another message), the op FAILs with a reason that names what was
wrong, and the validator goes on: no KeyError, no hang, both workers cleaned up, the baseline
never asked anything. (Before fe54e0a a reply without the op's entry raised KeyError out of
`qualify`; the strict decoder, verify/protocol.py, now reads it.)

A scripted client stands in for both workers, as in test_trials_protocol.py: this is the host's
reading of the reply, not the sandbox (test_cpuarena.py drives real workers)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

import arena.cpu.qualifier as qualifier_mod
from arena.cpu.host_timing import TimingFailure
from arena.cpu.qualifier import CpuQualifier
from cacheon_subnet.bundle.archive import load_bundle

BUNDLE = load_bundle(Path(__file__).resolve().parents[2] / "examples" / "demo" / "cpu_rmsnorm")
OP = BUNDLE.manifest.ops[0]
REACHED = "candidate: timed call 0 (a stand-in CaseTimer: the load reply was accepted)"


class Scripted:
    """Both workers of one qualify: the first made is the baseline, the second the candidate."""

    made: ClassVar[list[Scripted]] = []

    def __init__(self, bundle, config, reply=None):
        self.reply, self.asked, self.cleaned, self.alive = reply, [], False, True
        Scripted.made.append(self)

    def start(self):
        pass

    def request(self, msg, tensors, timeout_s, on_progress=None):
        self.asked.append(msg)
        return self.reply, {}

    def cleanup(self):
        self.cleaned, self.alive = True, False


def qualify(monkeypatch, reply):
    Scripted.made = []
    monkeypatch.setattr(qualifier_mod, "WorkerClient", lambda b, c: Scripted(b, c, reply))

    class StandIn:  # what runs once the load reply is accepted: named, so a test can see it got there
        def __init__(self, *a):
            pass

        def run(self):
            raise TimingFailure(REACHED)

    monkeypatch.setattr(qualifier_mod, "CaseTimer", StandIn)
    return CpuQualifier(tier="verify", cases=1).qualify(BUNDLE, OP, None)


def loaded(entry=None, **kw):
    return {"type": "loaded", "results": {OP.key: {"ok": True} if entry is None else entry}, **kw}


HOSTILE = [
    # (the candidate's load reply, words the FAIL reason must hold)
    (None, "expected an object"),
    ([], "expected an object"),
    ({"type": "loaded"}, "field results: missing key 'results'"),
    ({"type": "loaded", "results": {}}, "no load answer for the op"),
    ({"type": "loaded", "results": {"another/op": {"ok": True}}}, "no load answer for the op"),
    (loaded({}), f"field results[{OP.key!r}].ok: missing key 'ok'"),
    (loaded({"ok": "true"}), f"field results[{OP.key!r}].ok: str 'true', expected bool"),
    (loaded({"ok": 1}), f"field results[{OP.key!r}].ok: int 1, expected bool"),
    (loaded({"ok": True, "verdict": "PASS"}), f"field results[{OP.key!r}].verdict: unknown key"),
    (loaded({"ok": False, "reason": "pass"}), "expected one of"),
    (loaded(speedup=100.0), "field speedup: unknown key"),
    (loaded({"ok": False, "reason": "import_error", "error": "x" * 1_000_000}), "over the 4096 allowed"),
    (loaded(env={"torch": "x" * 1_000_000}), "over the 65536 allowed"),
    ({"type": "result", "ok": True, "nonce": "0" * 32}, "a 'result' message where ['loaded'] was due"),
]


@pytest.mark.parametrize("reply, words", HOSTILE, ids=lambda x: repr(x)[:40] if not isinstance(x, str) else None)
def test_a_hostile_load_reply_fails_the_op_naming_why_and_the_validator_goes_on(monkeypatch, reply, words):
    r = qualify(monkeypatch, reply)
    assert r.verdict == "FAIL" and not r.quality_ok, (r.verdict, r.reason)
    assert r.reason.startswith("import failed: ") and words in r.reason, r.reason
    assert len(r.reason) < 400  # a huge string is named, never copied into the verdict
    base, cand = Scripted.made
    assert base.asked == [] and len(cand.asked) == 1 and base.cleaned and cand.cleaned


def test_an_honest_load_failure_is_named_and_an_honest_load_goes_on_to_timing(monkeypatch):
    r = qualify(monkeypatch, loaded({"ok": False, "reason": "import_error", "error": "Traceback ..."}))
    assert (r.verdict, r.reason) == ("FAIL", "import failed: import_error"), r.reason
    r = qualify(monkeypatch, loaded(env={"torch": "2.11", "triton_interpret": True}))
    assert r.verdict == "FAIL" and r.reason == REACHED, r.reason  # the gate let a well-formed reply through
