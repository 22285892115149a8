"""The CPU arena's timing replies (timed_ready, timed_done) come from a worker that runs the
contribution: arena/cpu/host_timing.py reads them through verify/protocol.py's strict decoder.
A malformed one ends the verdict charged to the side that sent it (a TimingFailure naming the
field), never a truthy "ok" read as a success and never a KeyError. No workers: a socketpair
stands in for the side's socket, its freeze and CPU clock are stubbed."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest

from arena.cpu.host_timing import Arena, Side, TimingFailure, plan_layout
from cacheon_subnet.slots import get_slot
from cacheon_subnet.slots.gen import seed_generator
from cacheon_subnet.slots.spec import dtype_of
from cacheon_subnet.verify import protocol as P
from cacheon_subnet.verify import wire

SPEC = get_slot("norm.rmsnorm")


@pytest.fixture
def side():
    case = SPEC.cases("verify")[0]
    act = dtype_of(SPEC.dtypes[0])
    made = SPEC.make_inputs(case, act, seed_generator(1))
    inputs = {k: v for k, v in made.items() if SPEC.arg(k).role in ("in", "inout")}
    host, worker = socket.socketpair()
    s = object.__new__(Side)
    s.name, s.target, s.arena = "candidate", "k", Arena(plan_layout(SPEC, case, act, inputs, 2))
    s.client = SimpleNamespace(sock=host)
    s.freeze = s.thaw = lambda: None
    s.snapshot = lambda: 0
    s.frozen = False
    yield s, worker
    s.arena.close()
    host.close()
    worker.close()


def _answer(worker, reply):
    wire.send(worker.fileno(), reply)


TRUTHY = [
    ({"type": "timed_done", "ok": "yes"}, "field ok: str 'yes', expected bool"),
    ({"type": "timed_done", "ok": 1}, "field ok: int 1, expected bool"),
    ({"type": "timed_done", "ok": True, "calls_done": 8}, "field calls_done: unknown key"),
    ({"type": "timed_ready", "ok": True}, "a 'timed_ready' message where ['timed_done'] was due"),
    ({"type": "timed_done"}, "field ok: missing key 'ok'"),
    ({"type": "timed_done", "ok": False, "error": "e" * 5000}, "over the 4096 allowed"),
]


@pytest.mark.parametrize("reply, words", TRUTHY, ids=lambda x: str(x)[:36] if isinstance(x, dict) else None)
def test_a_malformed_timed_run_reply_fails_the_side_that_sent_it(side, reply, words):
    s, worker = side
    _answer(worker, reply)
    with pytest.raises(TimingFailure) as err:
        s.run_batch(2, 5.0)
    assert err.value.side == "candidate" and "timed run reply refused" in err.value.reason, err.value.reason
    assert words in err.value.reason, err.value.reason


def test_a_malformed_setup_reply_fails_the_side_and_a_well_formed_one_is_read(side):
    s, worker = side
    _answer(worker, {"type": "timed_ready", "ok": "true"})
    with pytest.raises(TimingFailure, match="timing setup reply refused: timed_ready message, field ok"):
        s.setup(SPEC, {"eps": 1e-6}, 5.0)
    request = P.HOST.decode(wire.recv(worker.fileno(), deadline=None)[0], P.TimedSetup)  # typed both ways
    assert request.op == "k" and len(request.calls) == 2
    _answer(worker, P.reply(P.TimedReady(False, P.Reason.SETUP, "no fd")))
    with pytest.raises(TimingFailure, match="timing setup failed: setup: no fd"):
        s.setup(SPEC, {"eps": 1e-6}, 5.0)
    _answer(worker, P.reply(P.TimedDone(True)))
    wall, cpu = s.run_batch(2, 5.0)
    assert wall > 0 and cpu == 0
