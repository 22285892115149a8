"""The engine driver's messages (arena/engine/protocol.py): every record and control line survives
its round trip with the wire bytes of before, the host's record decoder (a contribution runs in the
engine's ranks) refuses each kind of hostile record with a forgery naming record and field, and the
driver reads nothing on its job pipe but the host's own lines."""

from __future__ import annotations

import json

import pytest

from arena.engine import protocol as P
from arena.engine.channel import RecordStream, seal
from seams.answers import ForgeryError

N = "ab" * 16
PAIRS = ((5, -0.25), (7, -1.5))
ANSWERS = {"after": {"0": {"nonce": N, "clock": {"gpu_s": 0.5, "forwards": 3}}}}
SEQ = P.KeptSequence(3, (1, 2), (5, 7), PAIRS, (PAIRS,))
RECORDS = [
    P.Checkpoint(N, 1.5, None, "/ckpt", "d" * 64, None, 2.25),
    P.Started(N, 1.5, None, 3.0, 1234, None, {"import_s": 1.0, "ranks": [{"cpu_s": 2}]}),
    P.Snapshot(N, 1.5, None, {"start": {"0": {"nonce": N, "counts": {}}}}),
    P.Generate(
        N,
        1.5,
        "w000-B",
        "w000-B",
        0.5,
        64,
        1700000000.123,
        32,
        128.0,
        192.0,
        ANSWERS,
        gpu_s=0.4,
        forwards=3,
        gpu_tokens_per_s=160.0,
        clock_error=None,
        kept=2,
        sequences=(SEQ,),
    ),  # fmt: skip
    P.Route(N, 1.5, "route-1-stock", "stock", 1, 0.1, {"route": {"0": {"nonce": N}}}),
    P.Teacher(N, 1.5, "T-c", "T-c", 0.2, (P.Graded("canary-0", PAIRS, (PAIRS,)), P.Graded(4, (), ()))),
    P.Install(N, 1.5, "install", 0.3, {"install": {"0": {"nonce": N}}}),
    P.Remove(N, 1.5, "post-remove", 0.1, {"remove": {"0": {"left": []}}}),
    P.State(N, 1.5, "post-state", 0.1, {"state": {"0": {"digest": "x"}}}),
    P.Canary(N, 1.5, "post-canary", 0.4, (P.Output((5, 7), PAIRS, (PAIRS,)), P.Output((1,)))),
    P.OutputsReady(N, 1.5, None, {"w000-B": 2}),
    P.Sample(N, 1.5, None, {"w000-B": (SEQ,)}),
    P.Done(N, 1.5),
    P.Error(N, 1.5, None, P.ErrorKind.FORGERY, "rank 0: 2 lines", "Traceback ..."),
]


@pytest.mark.parametrize("rec", RECORDS, ids=lambda r: r.TAG)
def test_every_record_round_trips(rec):
    doc = json.loads(json.dumps(P.RECORDS.encode(rec)))
    assert doc["op"] == rec.TAG and P.read_record(doc) == rec


def test_a_logprob_may_be_any_number_a_clock_figure_must_be_finite():
    """NaN logprobs are the quality grader's to fail (and a teacher's canary drift check's),
    never a forgery; a window's figures the driver computes are always finite."""
    nan = float("nan")
    rec = P.read_record({"op": "canary", "nonce": N, "outputs": [{"cont": [1], "logprobs": [[1, nan]]}]})
    assert isinstance(rec, P.Canary)
    with pytest.raises(P.ProtocolError, match="generate message, field gpu_tokens_per_s"):
        P.read_record({"op": "generate", "nonce": N, "gpu_tokens_per_s": nan})


def nested(depth):
    v: list = [1]
    for _ in range(depth):
        v = [v]
    return v


def rec(op, **kw):
    return {"op": op, "nonce": N, **kw}


HOSTILE = [
    # (the record as the host reads it, record named, field named, words of the detail)
    ([1, 2], "?", "op", "expected an object"),
    (rec("exec"), "exec", "op", "unknown message kind"),
    ({"op": "done"}, "done", "nonce", "missing"),
    (rec("generate", out_tokens=True), "generate", "out_tokens", "expected int"),
    (rec("generate", out_tokens=2.0), "generate", "out_tokens", "expected int"),
    (rec("generate", s="0.5"), "generate", "s", "expected a number"),
    (rec("generate", output_tokens_per_s=float("inf")), "generate", "output_tokens_per_s", "finite"),
    (rec("generate", gpu_s=float("nan")), "generate", "gpu_s", "finite"),
    (rec("generate", throughput=9e9), "generate", "throughput", "unknown key"),
    (rec("generate", answers={"after": ["0"]}), "generate", "answers['after']", "expected a map"),
    (rec("generate", kept=2**64), "generate", "kept", "outside 64 bits"),
    (rec("route", epoch="1"), "route", "epoch", "expected int"),
    (rec("route", route="r" * 300), "route", "route", "over the 256 allowed"),
    (rec("done", step="s" * 300), "done", "step", "over the 256 allowed"),
    (rec("done", nonce="n" * 65), "done", "nonce", "over the 64 allowed"),
    (rec("error", kind="pass", error="x"), "error", "kind", "expected one of"),
    (rec("error", kind="engine", error="x" * 9000), "error", "error", "over the 8192 allowed"),
    (rec("teacher", graded=[{"key": 1, "tokens": "x", "top": []}]), "teacher", "graded[0].tokens", "expected a list"),
    (rec("teacher", graded=[{"key": True, "tokens": [], "top": []}]), "teacher", "graded[0].key", "expected int | str"),
    (rec("canary", outputs=[{"cont": [1], "logprobs": [[1, "x"]]}]), "canary", "outputs[0].logprobs[0][1]", "number"),
    (rec("outputs_ready", kept={"w": -0.5}), "outputs_ready", "kept['w']", "expected int"),
    (rec("sample", sequences={"w": [{"key": 1, "prompt": [1], "cont": [2], "x": 1}]}), "sample", "sequences['w'][0].x", "unknown"),
    (rec("started", diag={"a": nested(40)}), "started", "diag", "levels"),
]  # fmt: skip


@pytest.mark.parametrize("doc, kind, field, words", HOSTILE, ids=lambda x: str(x)[:30] if isinstance(x, str) else None)
def test_the_hosts_record_decoder_refuses_each_hostile_record_naming_it(doc, kind, field, words):
    with pytest.raises(P.ProtocolError) as err:
        P.read_record(doc)
    e = err.value
    assert (e.kind, e.field) == (kind, field) and words in e.detail, (e.kind, e.field, e.detail)
    assert isinstance(e, ForgeryError)  # the candidate's FAIL, as any record the driver did not write


def test_the_record_stream_treats_a_record_that_does_not_decode_as_forging():
    """A record with the host's nonce, in its place, for its step, but a field no driver writes."""
    j = seal({"steps": [{"op": "generate", "tag": "w0"}]}, answers=False)
    life = iter(j["lifecycle_nonces"])
    st = RecordStream(j)
    assert st.feed(json.dumps({"op": "started", "nonce": next(life), "s": 1.0}).encode()) is not None
    bad = {"op": "generate", "step": "w0", "nonce": j["steps"][0]["nonce"], "out_tokens": "64"}
    assert st.feed(json.dumps(bad).encode()) is None
    assert st.forgery and "generate message, field out_tokens" in st.forgery, st.forgery


# -- control lines ------------------------------------------------------------------------------


def test_control_lines_keep_their_wire_bytes():
    job = {"steps": [], "serve": N}
    old = [
        {"nonce": N, "go": False},
        {"sample": {"w000-B": [0, 3]}, "nonce": N},
        {"nonce": N, "job": job},
        {"nonce": N, "stop": True},
    ]
    new = [
        P.GateAnswer(N, False),
        P.SampleRequest({"w000-B": [0, 3]}, N),
        P.ServeLine(N, job=job),
        P.ServeLine(N, stop=True),
    ]
    assert [P.line(m) for m in new] == [(json.dumps(d) + "\n").encode() for d in old]


def test_the_driver_reads_the_hosts_control_lines():
    assert P.read_gate(P.line(P.GateAnswer(N, True)).decode(), N, "w3") is True
    assert P.read_sample(P.line(P.SampleRequest({"w": [1]}, N)).decode(), N) == {"w": (1,)}
    assert P.read_next(P.line(P.ServeLine(N, job={"steps": []})).decode(), N) == {"steps": []}
    assert P.read_next(P.line(P.ServeLine(N, stop=True)).decode(), N) is None


@pytest.mark.parametrize(
    "read, line, words",
    [
        (lambda t: P.read_gate(t, N, "w3"), "not json\n", "not the host's go/stop"),
        (lambda t: P.read_gate(t, N, "w3"), json.dumps({"nonce": N, "go": "yes"}), "field go"),
        (lambda t: P.read_gate(t, N, "w3"), json.dumps({"nonce": N, "go": True, "also": 1}), "field also"),
        (lambda t: P.read_gate(t, N, "w3"), json.dumps({"nonce": "cd" * 16, "go": True}), "without the host's gate nonce"),
        (lambda t: P.read_sample(t, N), json.dumps({"sample": {"w": ["1"]}, "nonce": N}), "field sample['w'][0]"),
        (lambda t: P.read_sample(t, N), json.dumps({"sample": {"w": [1]}}), "without the host.s nonce"),
        (lambda t: P.read_sample(t, N), json.dumps({"sample": {}, "nonce": "cd" * 16}), "without the host's nonce"),
        (lambda t: P.read_next(t, N), json.dumps({"nonce": N, "job": []}), "field job"),
        (lambda t: P.read_next(t, N), json.dumps({"nonce": "cd" * 16, "stop": True}), "serve nonce"),
    ],
)
def test_anything_else_on_the_job_pipe_is_forging(read, line, words):
    with pytest.raises(ForgeryError, match=words.replace("[", r"\[").replace("]", r"\]")):
        read(line)


def test_clock_metrics_of_honest_answers_decode_and_a_nan_reading_is_no_metric():
    answers = {0: {"clock": {"gpu_s": 0.5, "forwards": 4, "decodes": 3, "decode_gpu_s": 0.3}}}
    out = P.clock_metrics(answers, [0], 64, 32)
    assert P.read_record({"op": "generate", "nonce": N, **out}).gpu_s == 0.5  # type: ignore[attr-defined]
    bad = P.clock_metrics({0: {"clock": {"gpu_s": float("nan"), "forwards": 4}}}, [0], 64, 32)
    assert list(bad) == ["clock_error"]


def test_a_line_nested_past_the_parsers_depth_is_forging_not_a_crash():
    deep = ("[" * 100_000 + "]" * 100_000).encode()
    j = seal({"steps": [{"op": "generate", "tag": "w0"}]}, answers=False)
    st = RecordStream(j)
    assert st.feed(deep) is None and st.forgery and "not JSON" in st.forgery
    with pytest.raises(P.ProtocolError):
        P.read_gate(deep.decode(), N, "w3")
