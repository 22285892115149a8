"""A scheduler rank's answer lines (seams/answer_protocol.py, read by seams/answers.py): what the
rank's own code writes decodes as its kind, the strict decoder refuses each kind of hostile line
naming kind and field, and the reader turns every refusal into a ForgeryError (the candidate's
FAIL), never a KeyError, a RecursionError or a lenient read."""

from __future__ import annotations

import json
import types

import pytest
from test_seam_route import Runner, registry

from seams import forward_clock, route
from seams.answer_protocol import AnswerError, Clock, Remove, Route, State, read_answer
from seams.answers import AnswerLog, AnswerReader, ForgeryError
from seams.dispatch import Registry
from seams.receipts import Receipts

N1, N2 = "1" * 32, "2" * 32


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_the_clock_and_route_answers_the_rank_writes_decode_as_their_kinds(tmp_path):
    reg = Registry()
    reg.receipts = Receipts(None, "scheduler", 0)
    reg.receipts.note("norm.rmsnorm", "fired")
    reg.receipts.decline("norm.rmsnorm", "shape")
    sched = types.SimpleNamespace(tp_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(device_timer=None)))
    forward_clock.attach(sched, 0, {forward_clock.ENV: "1", "CACHEON_RECEIPT_DIR": str(tmp_path)}, reg)
    getattr(sched, forward_clock.RPC_METHOD)(nonce=N1)
    (clock,) = _lines(tmp_path / "answers-0.jsonl")
    got = read_answer(clock)
    assert isinstance(got, Clock) and got.counts is not None and got.counts["norm.rmsnorm"]["fired"] == 1
    assert got.declines == {"norm.rmsnorm": {"shape": 1}} and got.static is not None

    other = tmp_path / "route"
    other.mkdir()
    reg = registry(other)
    sched = types.SimpleNamespace(tp_worker=types.SimpleNamespace(model_runner=Runner(reg)))
    route.attach(sched, reg, rank=0, directory=str(other))
    getattr(sched, route.RPC_METHOD)(route="stock", epoch=7, nonce=N2)
    (ack,) = _lines(other / "answers-0.jsonl")
    got = read_answer(ack)
    assert isinstance(got, Route) and got.static_before is not None and got.ack["epoch"] == 7


def test_the_resident_engines_answers_decode_as_their_kinds(tmp_path):
    """Payloads as seams/resident.py writes them (its RPCs need an engine: tests/arena/test_resident_*)."""
    log = AnswerLog(str(tmp_path), 0)
    left = {"modules": [], "alive": [], "frames": [], "sys_path": [], "fds": [], "installed": False}
    log.answer(
        N1,
        "remove",
        {
            "ack": {"route": "stock"},
            "purged": ["_r1x"],
            "collected": 12,
            "interpreted": 0,
            "s": 0.01,
            "left": left,
            "counts_before": {},
        },
    )
    log.answer(
        N2,
        "state",
        {"digest": "ab" * 32, "tensors": 7, "digest_s": 0.2, "left": left, "installs": 1, "cuda_allocated": None},
    )
    remove, state = (read_answer(x) for x in _lines(tmp_path / "answers-0.jsonl"))
    assert isinstance(remove, Remove) and remove.purged == ("_r1x",) and remove.collected == 12
    assert isinstance(state, State) and state.tensors == 7 and state.cuda_allocated is None


def line(**kw):
    return {"nonce": N1, "kind": "clock", "rank": 0, "pid": 4242, "seq": 0, "t": 1.5, **kw}


def deep(n):
    v: object = 1.0
    for _ in range(n):
        v = {"x": v}
    return v


HOSTILE = [
    # (the parsed line, kind named, field named, words of the detail)
    ([], "?", "kind", "expected an object"),
    (line(kind="verdict"), "verdict", "kind", "unknown message kind"),
    ({k: v for k, v in line().items() if k != "kind"}, "None", "kind", "unknown message kind"),
    ({k: v for k, v in line().items() if k != "pid"}, "clock", "pid", "missing key 'pid'"),
    (line(speedup=9.9), "clock", "speedup", "unknown key"),
    (line(rank="0"), "clock", "rank", "expected int"),
    (line(rank=True), "clock", "rank", "expected int"),
    (line(seq=1.0), "clock", "seq", "expected int"),
    (line(t=float("nan")), "clock", "t", "finite"),
    (line(t=float("inf")), "clock", "t", "finite"),
    (line(counts={"norm.rmsnorm": {"fired": 0.5}}), "clock", "counts['norm.rmsnorm']['fired']", "expected int"),
    (line(counts={"norm.rmsnorm": {"fired": False}}), "clock", "counts['norm.rmsnorm']['fired']", "expected int"),
    (line(errors="none"), "clock", "errors", "expected a list"),
    (line(errors=["e"] * 65), "clock", "errors", "over the 64 allowed"),
    (line(static={"watched": 1, "tampered": []}), "clock", "static.unwatched", "missing key"),
    (line(clock=deep(40)), "clock", "clock", "levels"),
    (line(nonce="f" * 65), "clock", "nonce", "over the 64 allowed"),
    (line(kind="state", digest="0" * 300), "state", "digest", "over the 256 allowed"),
    (line(kind="remove", s=float("inf")), "remove", "s", "finite"),
    (line(kind="remove", collected=2**70), "remove", "collected", "outside 64 bits"),
]


@pytest.mark.parametrize("doc, kind, field, words", HOSTILE, ids=lambda x: str(x)[:30] if isinstance(x, str) else None)
def test_the_decoder_refuses_each_hostile_answer_naming_kind_and_field(doc, kind, field, words):
    with pytest.raises(AnswerError) as err:
        read_answer(doc)
    e = err.value
    assert (e.kind, e.field) == (kind, field) and words in e.detail, (e.kind, e.field, e.detail)


def _write(tmp_path, text: str) -> AnswerReader:
    (tmp_path / "answers-0.jsonl").write_text(text + "\n")
    return AnswerReader(tmp_path, [0])


@pytest.mark.parametrize(
    "doc, words",
    [
        (line(counts={"norm.rmsnorm": {"fired": "many"}}), "counts['norm.rmsnorm']['fired']"),
        (line(verdict="PASS"), "field verdict: unknown key"),
        (line(t=None), "field t"),
    ],
    ids=["mistyped-count", "unknown-key", "null-time"],
)
def test_the_reader_calls_a_malformed_answer_forging(tmp_path, doc, words):
    with pytest.raises(ForgeryError, match="not a clock answer of the rank's own") as err:
        _write(tmp_path, json.dumps(doc)).collect(N1, "clock")
    assert words in str(err.value), err.value


def test_an_answer_nested_past_jsons_recursion_limit_is_forging_not_a_crash(tmp_path):
    with pytest.raises(ForgeryError, match="is not JSON"):
        _write(tmp_path, "[" * 100_000 + "]" * 100_000).collect(N1, "clock")


def test_the_nonce_rank_and_kind_checks_still_come_first(tmp_path):
    with pytest.raises(ForgeryError, match="an unknown nonce"):
        _write(tmp_path, json.dumps(line(nonce=N2, t="late"))).collect(N1, "clock")
    with pytest.raises(ForgeryError, match="claims rank 1, kind 'clock'"):
        _write(tmp_path, json.dumps(line(rank=1))).collect(N1, "clock")
    with pytest.raises(ForgeryError, match="kind 'state'"):
        _write(tmp_path, json.dumps(line(kind="state"))).collect(N1, "clock")
    got = _write(tmp_path, json.dumps(line(clock=None))).collect(N1, "clock")
    assert got[0]["clock"] is None and got[0]["pid"] == 4242  # what decoded, as the rank wrote it
