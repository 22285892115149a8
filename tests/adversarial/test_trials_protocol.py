"""A worker under the attacker's full control: what it reports is never trusted beyond the tensors.

A fake client stands in for a compromised worker process and answers the runner's requests. The
honest fake (it computes the reference itself) passes: verify proves the numbers that come back,
not which code made them (docs/security.md: the arena's graded windows judge the kernel itself).
Every forgery of the protocol fails closed with reason `protocol`, never a traceback or a PASS.
"""

from __future__ import annotations

from pathlib import Path

import torch

from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.slots import get_slot
from cacheon_subnet.slots.spec import dtype_of
from cacheon_subnet.verify import VerifyOptions, judge
from cacheon_subnet.verify.runner import _Run

BUNDLE = Path(__file__).parent / "trials" / "honest_torch"
OPTS = VerifyOptions(device="cpu", max_cases=1, compile_check=False, seed=7)
SPEC = get_slot("norm.rmsnorm")


def honest(msg, tensors):
    ref = SPEC.reference(tensors, msg["params"])
    out = ref["out"].to(dtype_of(msg["alloc"]["out"]["dtype"]))
    reply = {"type": "result", "ok": True, "returned": None, "host_sync": [], "aliases": [], "nonce": msg["nonce"]}
    return reply, {**tensors, "out": out}


class Fake:
    """The worker side of the channel, scripted: `forge(msg, tensors, n)` -> (reply, tensors)."""

    alive = True

    def __init__(self, forge):
        self.forge = forge
        self.n = 0
        self.previous = None

    def request(self, msg, tensors, timeout_s):
        self.n += 1
        answer = self.forge(self, msg, tensors)
        if msg["type"] == "call":
            self.previous = honest(msg, tensors)
        return answer

    def start(self):
        pass

    def cleanup(self):
        pass


def check(forge):
    bundle = load_bundle(BUNDLE)
    run = _Run(bundle, OPTS, 7)
    run.client = Fake(forge)
    return run.check_op(bundle.manifest.ops[0])


def test_honest_fake_passes():
    r = check(lambda f, m, t: honest(m, t))
    assert r.status == "PASS", r.failure


def test_replayed_reply_is_refused():
    """The previous call's honest reply (its nonce) as the answer to this call."""
    r = check(lambda f, m, t: f.previous if f.previous else honest(m, t))
    assert r.failure.reason == "protocol" and "nonce" in r.failure.detail


def test_missing_nonce_is_refused():
    def forge(f, m, t):
        reply, out = honest(m, t)
        return {k: v for k, v in reply.items() if k != "nonce"}, out

    assert check(forge).failure.reason == "protocol"


def test_ok_without_outputs_fails_closed():
    r = check(lambda f, m, t: ({"type": "result", "ok": True, "nonce": m["nonce"]}, dict(t)))
    assert r.failure.reason == "protocol" and "did not return" in r.failure.detail


def test_wider_dtype_output_is_refused():
    """fp32 outputs for a bf16 op would be judged on precision the engine's buffer never holds."""

    def forge(f, m, t):
        reply, out = honest(m, t)
        return reply, {**out, "out": SPEC.reference(t, m["params"])["out"]}

    r = check(forge)
    assert r.failure.reason == "protocol" and "float32" in r.failure.detail


def test_malformed_flags_fail_closed():
    def forge(f, m, t):
        reply, out = honest(m, t)
        return {**reply, "host_sync": 5}, out

    assert check(forge).failure.reason == "protocol"


def test_invented_failure_reason_is_protocol():
    r = check(lambda f, m, t: ({"type": "result", "ok": False, "reason": "pass", "nonce": m["nonce"]}, {}))
    assert r.failure.reason == "protocol"


def test_ok_must_be_true_not_truthy():
    def forge(f, m, t):
        reply, out = honest(m, t)
        return {**reply, "ok": "yes"}, out

    assert check(forge).failure.reason == "protocol"


def test_stale_outputs_from_a_perfect_channel_mismatch():
    """A worker that echoes the nonce but replays the previous call's outputs: judged on numbers."""

    def forge(f, m, t):
        reply, out = honest(m, t)
        if f.previous is not None and f.previous[1]["out"].shape == out["out"].shape:
            out = {**out, "out": f.previous[1]["out"]}
        return reply, out

    assert check(forge).failure.reason == "mismatch"


def test_load_reply_missing_the_op_is_protocol():
    bundle = load_bundle(BUNDLE)
    run = _Run(bundle, OPTS, 7)
    run.client = Fake(lambda f, m, t: ({"type": "loaded", "results": {}}, {}))
    results, _ = run.execute()
    assert results[0].failure.reason == "protocol"


def test_graph_reply_keys_are_exact():
    out = {"r0.out": torch.zeros(1), "r1.out": torch.zeros(1)}
    assert judge.check_graph_keys(SPEC, out, 2) is None
    assert judge.check_graph_keys(SPEC, {"r0.out": torch.zeros(1)}, 2).reason == "protocol"
    assert judge.check_graph_keys(SPEC, {**out, "r2.out": torch.zeros(1)}, 2).reason == "protocol"


def test_digest_for_an_output_is_refused():
    """A digest may only stand in for a large read-only input, never for a result."""

    def forge(f, m, t):
        reply, out = honest(m, t)
        return {**reply, "digests": {"out": "0" * 64}}, {k: v for k, v in out.items() if k != "out"}

    assert check(forge).failure.reason == "protocol"


def test_collective_rank_reply_without_the_nonce_is_protocol():
    """Multi-rank verify binds every rank's reply to its request the same way."""
    from cacheon_subnet.verify.multirank import _RankRun

    class Group:
        def request_all(self, msgs, tensors, timeout_s):
            return [
                ({"type": "result", "ok": True, "nonce": msgs[0]["nonce"]}, {}),
                ({"type": "result", "ok": True, "nonce": "a-previous-call"}, {}),
            ]

    run = object.__new__(_RankRun)
    run.world, run.opts, run.group = 2, OPTS, Group()
    replies = run._request({"type": "call", "nonce": "this-call"}, [{}, {}])
    assert judge.check_reply(replies[0][0]) is None
    assert judge.check_reply(replies[1][0]).reason == "protocol"


# ---- CUDA-graph trials: read-only inputs after the last replay --------------------------------
# The host side runs on CPU here (graph_check=True plans graph trials; the fake answers them);
# the worker's capture/replay itself needs CUDA (tests/slots GPU tier).
GRAPH_OPTS = VerifyOptions(device="cpu", max_cases=1, compile_check=False, seed=7, graph_check=True)


def honest_graph(msg, tensors):
    """Each replay's outputs from its own inputs (graph-dynamic ones replaced), and the digests of
    the read-only inputs as the last replay left them."""
    from cacheon_subnet.tensor_views import tensor_digest

    base = {k: v for k, v in tensors.items() if "." not in k}
    out, last = {}, base
    for i in range(msg["replays"]):
        last = {**base, **{k.split(".", 1)[1]: v for k, v in tensors.items() if k.startswith(f"r{i}.")}}
        ref = SPEC.reference(last, msg["params"])["out"].to(dtype_of(msg["alloc"]["out"]["dtype"]))
        out[f"r{i}.out"] = ref
    final = {a.name: tensor_digest(last[a.name]) for a in SPEC.by_role("in")}
    return {"type": "result", "ok": True, "final_digests": final, "nonce": msg["nonce"]}, out


def check_graph(forge_graph):
    bundle = load_bundle(BUNDLE)
    run = _Run(bundle, GRAPH_OPTS, 7)
    seen = []

    def forge(f, m, t):
        if m["type"] == "graph":
            seen.append(m["replays"])
            return forge_graph(m, t)
        return honest(m, t)

    run.client = Fake(forge)
    result = run.check_op(bundle.manifest.ops[0])
    assert seen, "no graph trial was planned"
    return result


def test_honest_graph_replies_pass():
    r = check_graph(honest_graph)
    assert r.status == "PASS", r.failure


def test_a_weight_written_only_under_capture_is_input_mutated():
    """is_current_stream_capturing() lets a kernel write into its weight only in the graph: every
    replay then does it, and only the graph trial can see it."""
    from cacheon_subnet.tensor_views import tensor_digest

    def forge(m, t):
        reply, out = honest_graph(m, t)
        reply["final_digests"]["weight"] = tensor_digest(t["weight"] * 2)
        return reply, out

    r = check_graph(forge)
    assert r.failure.reason == "input_mutated" and "weight" in r.failure.detail and r.failure.stage == "graph", r.failure


def test_graph_reply_without_final_digests_is_protocol():
    def forge(m, t):
        reply, out = honest_graph(m, t)
        return {k: v for k, v in reply.items() if k != "final_digests"}, out

    r = check_graph(forge)
    assert r.failure.reason == "protocol" and "final_digests" in r.failure.detail, r.failure
