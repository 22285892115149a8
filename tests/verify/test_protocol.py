"""The verify pipe's messages (cacheon_subnet/verify/protocol.py): every message survives its
round trip, and the host's decoder of what the worker sends (the worker imports the
contribution) refuses each kind of hostile input with a ProtocolError naming message and field."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from cacheon_subnet.verify import protocol as P
from cacheon_subnet.verify import wire
from cacheon_subnet.verify.client import WorkerClient, WorkerDied

NONCE = "ab" * 16
ALLOC = {"out": P.Alloc("bfloat16", (4, 8), 1, 77), "tmp": P.Alloc("float32", (2,), 0)}
HOST_MESSAGES = [
    P.Load((P.LoadOp("k", "norm.rmsnorm", "kernel", "rmsnorm"),)),
    P.Call("k", {"eps": 1e-6, "topk": 2, "renormalize": True}, ALLOC, True, P.CallMode.COMPILE, NONCE),
    P.Graph("k", {"eps": 1e-6}, ALLOC, 3, NONCE),
    P.Bench(
        "k",
        P.BenchCase("qwen/decode", "qwen", {"T": 4, "H": 8}, {"eps": 1e-6}, {"rope_theta": 1e6}),
        "bfloat16",
        7,
        2.0,
        0.01,
        True,
        bprime=True,
        min_iters=8,
    ),
    P.TimedSetup("@reference", "norm.rmsnorm", 4096, ({"x": P.View(0, (4, 8), (8, 1), "bfloat16")},), {"eps": 1e-6}),
    P.TimedRun(5, "norm.rmsnorm/default"),
    P.Exit(),
]
WORKER_MESSAGES = [
    P.Loaded(
        {"k": P.LoadResult(True), "j": P.LoadResult(False, P.Reason.IMPORT_ERROR, "Traceback ...")},
        {"torch": "2.11", "triton_interpret": True},
    ),
    P.Result(
        True,
        NONCE,
        returned=None,
        host_sync=("item() at kernel.py:3",),
        aliases=(),
        digests={"kv": "0" * 64},
        worker_s={"invoke": 0.25, "materialise": 0},
    ),
    P.Result(False, NONCE, P.Reason.GRAPH_CAPTURE, "capture failed"),
    P.Result(True, NONCE, final_digests={"x": "1" * 64}),
    P.BenchReply(True, timings={"candidate": P.SideTiming(3.5, 3.6, 0.01, 3.2, 40)}, baseline="stock: sgl"),
    P.TimedReady(False, P.Reason.SETUP, "no fd"),
    P.TimedDone(True),
    P.Progress("warm", 1, 4),
    P.Error("unreadable request"),
]


@pytest.mark.parametrize("msg", HOST_MESSAGES, ids=lambda m: type(m).__name__)
def test_every_host_request_round_trips(msg):
    doc = json.loads(json.dumps(P.request(msg)))
    assert doc["type"] == msg.TAG and P.HOST.decode(doc) == msg


@pytest.mark.parametrize("msg", WORKER_MESSAGES, ids=lambda m: f"{type(m).__name__}")
def test_every_worker_reply_round_trips(msg):
    doc = json.loads(json.dumps(P.reply(msg)))
    assert doc["type"] == msg.TAG and P.read_reply(doc, type(msg)) == msg


def result(**kw):
    return {"type": "result", "ok": True, "nonce": NONCE, **kw}


HOSTILE = [
    # (what the worker sent, message named, field named, words of the detail)
    ([], "?", "type", "expected an object"),
    ({"type": "pass"}, "pass", "type", "unknown message kind"),
    ({"ok": True, "nonce": NONCE}, "None", "type", "unknown message kind"),
    (P.reply(P.Progress("warm", 1, 2)), "progress", "type", "where ['result'] was due"),
    ({"type": "result", "ok": True}, "result", "nonce", "missing"),
    (result(mutated_inputs=["x"]), "result", "mutated_inputs", "unknown key"),
    (result(ok="yes"), "result", "ok", "expected bool"),
    (result(ok=1), "result", "ok", "expected bool"),
    (result(host_sync=5), "result", "host_sync", "expected a list"),
    (result(host_sync=["a", 3]), "result", "host_sync[1]", "expected str"),
    (result(digests={"x": 1}), "result", "digests['x']", "expected str"),
    (result(digests=["x"]), "result", "digests", "expected a map"),
    (result(worker_s={"invoke": float("nan")}), "result", "worker_s['invoke']", "finite"),
    (result(worker_s={"invoke": float("inf")}), "result", "worker_s['invoke']", "finite"),
    (result(worker_s={"invoke": True}), "result", "worker_s['invoke']", "expected a number"),
    (result(ok=False, reason="pass"), "result", "reason", "expected one of"),
    (result(error="x" * (P.ERROR_CHARS + 1)), "result", "error", "over the 4096 allowed"),
    (result(nonce="f" * 65), "result", "nonce", "over the 64 allowed"),
    (result(aliases=["a"] * 1025), "result", "aliases", "over the 1024 allowed"),
    (result(final_digests={"k" * 300: "0"}), "result", f"final_digests[{'k' * 40!r}]", "over the 256 allowed"),
    ({"type": "progress", "phase": "warm", "done": True, "total": 1}, "progress", "done", "expected int"),
    ({"type": "progress", "phase": "warm", "done": 2**70, "total": 1}, "progress", "done", "outside 64 bits"),
    ({"type": "loaded", "results": {"k": {"ok": "true"}}}, "loaded", "results['k'].ok", "expected bool"),
    ({"type": "loaded", "results": {"k": {"ok": False, "reason": "pass"}}}, "loaded", "results['k'].reason", "one of"),
    ({"type": "loaded", "results": {f"k{i}": {"ok": True} for i in range(1025)}}, "loaded", "results", "over the 1024"),
    ({"type": "loaded", "results": {}, "env": {"torch": ["2"]}}, "loaded", "env['torch']", "expected str | bool"),
    ({"type": "bench", "ok": True, "hbm_gbps": float("inf")}, "bench", "hbm_gbps", "finite"),
    (
        {
            "type": "bench",
            "ok": True,
            "timings": {"candidate": {"median_us": 3.0, "mean_us": 3, "rel_stderr": 0, "min_us": 3}},
        },
        "bench",
        "timings['candidate'].n",
        "missing key 'n'",
    ),
    (
        {
            "type": "bench",
            "ok": True,
            "timings": {"candidate": {"median_us": 3.0, "mean_us": 3, "rel_stderr": 0, "min_us": 3, "n": 4.0}},
        },
        "bench",
        "timings['candidate'].n",
        "expected int",
    ),
    (
        {"type": "bench", "ok": True, "timings": {"candidate": {"median_us": "3"}}},
        "bench",
        "timings['candidate'].median_us",
        "number",
    ),
]


@pytest.mark.parametrize("doc, kind, field, words", HOSTILE, ids=lambda x: str(x)[:40] if isinstance(x, str) else None)
def test_the_hosts_decoder_refuses_each_hostile_reply_naming_message_and_field(doc, kind, field, words):
    expect = (P.Result,) if "was due" in words else ()
    with pytest.raises(P.ProtocolError) as err:
        P.read_reply(doc, *expect)
    e = err.value
    assert (e.kind, e.field) == (kind, field) and words in e.detail, (e.kind, e.field, e.detail)
    assert isinstance(e, wire.WireError)  # every reader of the pipe already handles it


def test_the_workers_reading_of_requests_is_as_strict():
    good = P.request(HOST_MESSAGES[1])
    for bad, field in [
        ({**good, "watch_sync": 1}, "watch_sync"),
        ({**good, "mode": "jit"}, "mode"),
        ({**good, "alloc": {"out": {"dtype": "bf16", "shape": [1], "poison": 0, "fill": 3}}}, "alloc['out'].fill"),
        ({k: v for k, v in good.items() if k != "nonce"}, "nonce"),
    ]:
        with pytest.raises(P.ProtocolError) as err:
            P.HOST.decode(bad)
        assert err.value.field == field, err.value


def test_a_worker_answers_an_unreadable_request_and_serves_on(tmp_path):
    """The worker's own decoder: an unknown or malformed request gets an error reply, not a crash."""
    from cacheon_subnet.verify.worker import Worker

    host, side = socket.socketpair()
    worker = Worker(side.fileno(), str(tmp_path), "cacheon_c_none", "cpu")
    t = threading.Thread(target=worker.serve, daemon=True)
    t.start()
    try:
        for bad in ({"type": "shell"}, {"type": "timed_run", "n": "all"}):
            wire.send(host.fileno(), bad)
            reply = P.read_reply(wire.recv(host.fileno(), deadline=None)[0], P.Error)
            assert "unreadable request" in reply.error
        wire.send(host.fileno(), P.request(P.Exit()))
        t.join(timeout=10)
        assert not t.is_alive()
    finally:
        host.close()
        side.close()


def test_a_malformed_progress_frame_ends_the_worker_as_a_protocol_break(tmp_path: Path):
    client = WorkerClient.__new__(WorkerClient)
    client.proc, client._log, client.log_path = None, None, tmp_path / "worker.log"
    client.log_path.write_text("")
    host, worker = socket.socketpair()
    client.sock = host
    wire.send(worker.fileno(), {"type": "progress", "phase": "warm", "done": "1\x1b[2J", "total": 2})
    with pytest.raises(WorkerDied, match=r"progress message, field done"):
        client.request(P.request(P.Load(())), None, 5, on_progress=lambda frame: None)
    worker.close()


class _Fake:
    """A compromised worker answering the runner (as tests/adversarial/test_trials_protocol.py)."""

    alive = True

    def __init__(self, answer):
        self.answer = answer

    def request(self, msg, tensors, timeout_s):
        return self.answer(msg, tensors)

    def start(self):
        pass

    def cleanup(self):
        pass


def test_the_runner_fails_a_malformed_reply_as_protocol_naming_the_field():
    from cacheon_subnet.bundle import load_bundle
    from cacheon_subnet.verify import VerifyOptions
    from cacheon_subnet.verify.runner import _Run

    bundle = load_bundle(Path(__file__).parents[1] / "adversarial" / "trials" / "honest_torch")
    run = _Run(bundle, VerifyOptions(device="cpu", max_cases=1, compile_check=False, seed=7), 7)
    run.client = _Fake(lambda m, t: ({**result(nonce=m["nonce"]), "worker_s": {"invoke": float("nan")}}, dict(t)))
    r = run.check_op(bundle.manifest.ops[0])
    assert r.failure.reason == "protocol" and "worker_s['invoke']" in r.failure.detail, r.failure
    run.client = _Fake(lambda m, t: ({"type": "loaded", "results": {"norm.rmsnorm/default": {"ok": "yes"}}}, {}))
    results, _ = run.execute()
    assert results[0].failure.reason == "protocol" and "results" in results[0].failure.detail, results[0].failure


def test_a_collective_rank_whose_reply_does_not_decode_is_protocol():
    """Multi-rank verify decodes every rank's reply the same way (verify/multirank.py)."""
    from cacheon_subnet.verify import VerifyOptions, judge
    from cacheon_subnet.verify.multirank import _RankRun

    class Group:
        def request_all(self, msgs, tensors, timeout_s):
            return [(result(nonce=msgs[0]["nonce"]), {}), (result(nonce=msgs[0]["nonce"], host_sync=[7]), {})]

    run = object.__new__(_RankRun)
    run.world, run.opts, run.group = 2, VerifyOptions(device="cpu"), Group()
    replies = run._request(P.request(P.Call("k", {}, {}, False, P.CallMode.EAGER, NONCE)), [{}, {}])
    assert judge.check_reply(replies[0][0]) is None
    f = judge.check_reply(replies[1][0])
    assert f is not None and f.reason == "protocol" and "host_sync[0]" in f.detail, f


def test_the_judge_reads_only_what_decoded():
    """judge.Reply: the decoded Result or the host's refusal, never both, never a dict; every
    failure string is the one the dict-reading judge gave."""
    from cacheon_subnet.verify import judge
    from cacheon_subnet.verify.report import Failure

    bad = judge.decoded(result(ok="yes"))
    assert bad.result is None and not bad.ok and bad.refused is not None
    f = judge.check_reply(bad)
    assert f == Failure("protocol", f"malformed reply (ok='False', reason='protocol'): {bad.refused.detail}"), f
    assert "result message, field ok" in f.detail
    for args in ((None,), (P.Result(True, NONCE), Failure("protocol", "x"))):
        with pytest.raises(ValueError, match="either"):
            judge.Reply(*args)
    cases = [
        (
            P.Result(False, NONCE, P.Reason.SETUP, "no fd"),
            ("protocol", "malformed reply (ok='False', reason='setup'): no fd"),
        ),
        (P.Result(False, NONCE, P.Reason.HOST_SYNC, "item()"), ("host_sync", "item()")),
        (P.Result(False, NONCE), ("exception", "")),
        (
            P.Result(True, NONCE, returned="Tensor"),
            ("return_value", "kernel returned Tensor; write into out/inout args and return None"),
        ),
        (P.Result(True, NONCE, host_sync=("a", "b", "c", "d")), ("host_sync", "a; b; c")),
        (P.Result(True, NONCE, aliases=("out is x",)), ("output_aliasing", "out is x")),
        (P.Result(True, NONCE, returned="", host_sync=(), aliases=()), None),
    ]
    for res, want in cases:
        f = judge.check_reply(judge.Reply(res))
        assert (f.reason, f.detail) == want if want else f is None, (res, f)
    mutated = judge.Reply(P.Result(True, NONCE, returned="Tensor"), mutated=("kv",))
    assert judge.check_reply(mutated) == Failure(
        "input_mutated", "['kv'] changed (digest differs) but the slot declares them read-only"
    )
    assert judge.check_nonce(P.Result(True, "f" * 32), NONCE).reason == "protocol"
    spec = __import__("cacheon_subnet.slots", fromlist=["get_slot"]).get_slot("norm.rmsnorm")
    assert judge.check_digests(spec, P.Result(True, NONCE, digests={"out": "0" * 64})).reason == "protocol"
    assert judge.check_digests(spec, P.Result(True, NONCE, digests={"x": "0" * 64})) is None
    f = judge.check_graph_inputs(spec, judge.Reply(P.Result(True, NONCE)), {})
    assert f is not None and f.reason == "protocol" and "final_digests" in f.detail
