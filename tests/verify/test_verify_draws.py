"""Inputs drawn ahead on host threads (verify/draws.py): the same inputs for the same secret seed
whatever the threads or look-ahead, nothing the worker does reaches them, and the host judges with
exactly the bytes it sent."""

from __future__ import annotations

import os
import threading

import pytest
import torch
from conftest import EXAMPLES

from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.slots import get_slot
from cacheon_subnet.slots.spec import dtype_of
from cacheon_subnet.tensor_views import tensor_digest
from cacheon_subnet.verify import VerifyOptions, draws, shm
from cacheon_subnet.verify.draws import Draws, GraphPrepared
from cacheon_subnet.verify.opplan import op_plan
from cacheon_subnet.verify.runner import _Run
from cacheon_subnet.verify.shapes import ArenaShapes

ARENA = ArenaShapes(
    profile="qwen3-0.6b", decode_batches=(1, 2, 3), prefill_tokens=(16,), decode_context=40, dtype="bfloat16", name="tiny"
)


def _plan(slot: str = "attention.decode", seed: int = 3, device: str = "cuda"):
    bundle = load_bundle(EXAMPLES / slot)
    op = bundle.manifest.ops[0]
    spec = get_slot(op.slot)
    return spec, op, op_plan(spec, op, _opts(device, seed), seed)


def _opts(device: str, seed: int) -> VerifyOptions:
    """The plan of `device` at the verify tier's small shapes (a CUDA plan has graph trials)."""
    return VerifyOptions(device=device, tier="verify", arena=ARENA, max_cases=2, seed=seed)


def _fingerprint(p) -> tuple:
    if isinstance(p, GraphPrepared):
        return (
            "graph",
            tuple(tuple(sorted((k, tensor_digest(v)) for k, v in r.items())) for r in p.replays),
            tuple(tuple(sorted((k, tensor_digest(v)) for k, v in r.items())) for r in p.refs),
        )
    return (
        tuple(sorted((k, tensor_digest(v)) for k, v in p.inputs.items())),
        tuple(sorted((k, tensor_digest(v)) for k, v in p.ref.items())),
        tuple(sorted(p.digests.items())),
    )


def _all(spec, op, plan, secret: int, **kw) -> list[tuple]:
    d = Draws(spec, op.key, plan, secret, **kw)
    try:
        out = []
        for n in range(len(plan.trials)):
            out.append(_fingerprint(d.get(n)))
            d.done(n)
        return out
    finally:
        d.close()


@pytest.mark.slow
def test_inputs_depend_on_the_secret_seed_alone_not_on_threads_or_lookahead():
    spec, op, plan = _plan()
    assert {t.kind for t in plan.trials} >= {"pair", "twin", "fresh", "graph"}
    inline = _all(spec, op, plan, 11, threads=0)
    assert _all(spec, op, plan, 11, threads=3, ahead=5) == inline
    assert _all(spec, op, plan, 11, threads=2, ahead=1, budget=1) == inline  # one job at a time, other threads
    assert _all(spec, op, plan, 12, threads=0) != inline  # another secret, other inputs


@pytest.mark.slow
def test_a_draw_device_moves_the_pools_not_the_determinism(monkeypatch):
    """The opt-in device path (slots/gen.draw_device; on CPU here, "cuda" on a GPU host): the same
    inputs for any thread count, other values than the host threads' chunked draws."""
    from cacheon_subnet.slots import gen

    monkeypatch.setattr(gen, "PARALLEL_MIN_ELEMENTS", 1 << 10)  # the verify tier's pools take the path,
    monkeypatch.setattr(gen, "_CHUNK_ELEMENTS", 1 << 12)  # and the host threads' draw is chunked
    spec, op, plan = _plan()
    there = _all(spec, op, plan, 11, threads=0, device="cpu")
    assert _all(spec, op, plan, 11, threads=3, ahead=5, device="cpu") == there
    assert _all(spec, op, plan, 11, threads=0) != there
    with pytest.raises(Exception, match="draw device"):
        VerifyOptions(draw_device="tpu")


@pytest.mark.slow
def test_control_a_seed_that_depends_on_the_drawing_thread_is_caught(monkeypatch):
    """Broken control for the test above: fold the drawing thread into the seed (as a per-thread
    generator or counter would) and the inputs change with the thread count."""
    spec, op, plan = _plan()
    real = draws.draw_seed
    monkeypatch.setattr(draws, "draw_seed", lambda s, o, k: real(s, o, k) ^ (threading.get_ident() & 0xFFFF))
    assert _all(spec, op, plan, 11, threads=3, ahead=5) != _all(spec, op, plan, 11, threads=0)


def test_a_pair_sends_one_input_set_twice_and_twins_share_its_rows():
    spec, op, plan = _plan()
    d = Draws(spec, op.key, plan, 5, threads=2)
    try:
        pairs: dict = {}
        for n, t in enumerate(plan.trials):
            p = d.get(n)
            if t.kind == "pair":
                pairs.setdefault((t.case, t.dtype), []).append(p)
            elif t.kind == "twin" and plan.twin_rows[n] and (t.case, t.dtype) in pairs:
                src, rows = pairs[(t.case, t.dtype)][0].inputs, plan.twin_rows[n]
                name, k = next(iter(rows.items()))
                part = slice(k, None) if t.mode == "suffix" else slice(0, k)
                assert torch.equal(p.inputs[name][part], src[name][part]) and not torch.equal(p.inputs[name], src[name])
            d.done(n)
        assert pairs and all(len(v) == 2 and v[0] is v[1] for v in pairs.values())
    finally:
        d.close()


def test_the_host_judges_with_exactly_the_bytes_it_sent(monkeypatch):
    """The sealed frame holds the host's bytes; the worker's mapping reads them back; writes into
    the frame's tensors (a scripted worker in this process) reach neither the frame nor the host's
    tensors, and the memfd refuses every write."""
    monkeypatch.setattr(shm, "SHM_MIN_BYTES", 1)
    spec, op, plan = _plan()
    d = Draws(spec, op.key, plan, 5, threads=0)
    p = d.get(0)
    try:
        sealed = p.parcel.sealed
        assert sealed is not None
        storages, _ = shm.distinct_storages(p.inputs)
        for s, off in zip(storages, sealed.offsets):
            assert os.pread(sealed.fd, s.numel(), off) == s.numpy().tobytes()
        mapped = shm.map_storages(sealed.fd, sealed.header(), list(sealed.sizes))
        assert [bytes(memoryview(torch.empty(0, dtype=torch.uint8).set_(m).numpy())) for m in mapped] == [
            s.numpy().tobytes() for s in storages
        ]
        before = {k: v.clone() for k, v in p.inputs.items()}
        for v in p.parcel.frame().values():
            if v.is_floating_point():
                v.add_(1)
        again = p.parcel.frame()  # a pair's second send
        assert all(torch.equal(p.inputs[k], before[k]) and torch.equal(again[k], before[k]) for k in before)
        assert all(os.pread(sealed.fd, s.numel(), off) == s.numpy().tobytes() for s, off in zip(storages, sealed.offsets))
        with pytest.raises(PermissionError):
            os.pwrite(sealed.fd, b"x", 0)
        with pytest.raises(PermissionError):
            os.ftruncate(sealed.fd, 1)
    finally:
        d.done(0)
        d.close()


def _honest(spec):
    """A scripted worker computing the true result (the reference) on what it was sent."""

    def reply(msg, tensors):
        from cacheon_subnet.slots.spec import dtype_of as dt

        out = {k: v.to(dt(msg["alloc"][k]["dtype"])) for k, v in spec.reference(tensors, msg["params"]).items()}
        base = {"type": "result", "ok": True, "returned": None, "host_sync": [], "aliases": [], "nonce": msg["nonce"]}
        return base, {**tensors, **out}

    return reply


class _Scripted:
    alive = True

    def __init__(self, answer):
        self.answer, self.sent = answer, []

    def request(self, msg, tensors, timeout_s):
        self.sent.append(msg["type"])
        return self.answer(msg, tensors)

    def start(self):
        pass

    def cleanup(self):
        pass


def test_what_the_worker_does_never_changes_the_inputs_of_later_trials(monkeypatch):
    """The host's inputs for every trial are fixed by the seed before the worker answers: a worker
    that scribbles over everything it is sent leaves the next trials' inputs as they would be."""
    spec, op, plan = _plan("norm.rmsnorm", device="cpu")
    want = _all(spec, op, plan, 3, threads=0)  # no worker at all
    seen: list = []
    real_get = Draws.get

    def spy(self, n):
        p = real_get(self, n)
        seen.append(_fingerprint(p))
        return p

    monkeypatch.setattr(Draws, "get", spy)

    def scribbler(msg, tensors):
        reply, out = _honest(spec)(msg, tensors)
        out = {k: v.clone() for k, v in out.items()}  # answers honestly, then
        for v in tensors.values():
            v.mul_(3)  # writes over everything it was sent: its own copy, never the host's
        return reply, out

    bundle = load_bundle(EXAMPLES / "norm.rmsnorm")
    run = _Run(bundle, _opts("cpu", 3), 3)
    run.client = _Scripted(scribbler)
    r = run.check_op(bundle.manifest.ops[0])
    assert r.status == "PASS", r.failure
    assert len(seen) == len(plan.trials) and seen == want


def test_a_worker_echoing_back_altered_inputs_fails_input_mutated():
    spec, op, plan = _plan("norm.rmsnorm", device="cpu")
    bundle = load_bundle(EXAMPLES / "norm.rmsnorm")

    def echo(msg, tensors):
        reply, out = _honest(spec)(msg, tensors)
        return reply, {**out, "weight": out["weight"] + 1}

    run = _Run(bundle, _opts("cpu", 3), 3)
    run.client = _Scripted(echo)
    r = run.check_op(bundle.manifest.ops[0])
    assert r.failure is not None and r.failure.reason == "input_mutated", r.failure


def test_the_plan_runs_exactly_as_planned():
    """Calls and graph replays of a run (honest scripted worker) are the plan's (opplan.OpPlan)."""
    spec, op, plan = _plan(seed=4)
    bundle = load_bundle(EXAMPLES / "attention.decode")
    replays: list[int] = []

    def answer(msg, tensors):
        if msg["type"] == "call":
            return _honest(spec)(msg, tensors)
        replays.append(msg["replays"])
        cap = {k: v for k, v in tensors.items() if "." not in k}
        out, last = {}, cap
        for i in range(msg["replays"]):
            last = {**cap, **{k.split(".", 1)[1]: v for k, v in tensors.items() if k.startswith(f"r{i}.")}}
            ref = spec.reference(last, msg["params"])
            out.update({f"r{i}.{k}": v.to(dtype_of(msg["alloc"][k]["dtype"])) for k, v in ref.items()})
        base = {
            "type": "result",
            "ok": True,
            "nonce": msg["nonce"],
            "final_digests": {a.name: tensor_digest(last[a.name]) for a in spec.by_role("in")},
        }
        return base, out

    run = _Run(bundle, _opts("cuda", 4), 4)
    run.client = _Scripted(answer)
    r = run.check_op(bundle.manifest.ops[0])
    assert r.status == "PASS", r.failure
    assert r.calls == sum(plan.calls(n) for n in range(len(plan.trials)))
    assert replays == [plan.replays[n] for n in sorted(plan.replays)] and replays
    assert run.timing["draw_wait"] >= 0 and run.timing["draw"] > 0
