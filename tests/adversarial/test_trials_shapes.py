"""A compromised worker answers with tensors whose logical size the host never asked for.

The wire keeps views (storage + offset + shape + stride), so a stride-0 tensor of any shape
costs the worker a few bytes of frame. The host used to check only the shapes of the inputs it
sent: an `out` came back unchecked and was fed to isnan / == / isfinite (full-size temporaries)
before compare() looked at its shape. A 2**17 x 2**17 bf16 `out` made of one element is 2 bytes
on the wire and ~48 GiB of host temporaries in judge.unwritten: the validator is OOM-killed,
and restarts re-verify the same bundle. Now every returned tensor must carry the name, shape and
dtype the host sent or allocated, before any check reads it: reason `protocol`.
"""

from __future__ import annotations

import resource

import torch

from cacheon_subnet.verify import wire
from tests.adversarial.test_trials_protocol import check, check_graph, honest, honest_graph

BIG = (1 << 13, 1 << 14)  # 2**27 elements: enough to measure, small enough for a CI box when red


def _through_wire(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What the host's wire.decode makes of the worker's frame (views survive)."""
    _, out = wire.decode(wire.encode({}, tensors))
    return out


def _bomb(like: torch.Tensor) -> torch.Tensor:
    return torch.zeros(1, dtype=like.dtype).expand(*BIG)


def test_the_wire_carries_a_stride0_tensor_of_any_shape() -> None:
    t = _through_wire({"out": _bomb(torch.zeros(1, dtype=torch.bfloat16))})["out"]
    assert tuple(t.shape) == BIG and t.stride() == (0, 0)
    assert len(wire.encode({}, {"out": t})) < 200


def test_an_out_of_another_shape_is_protocol_before_any_check_reads_it() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def forge(f, m, t):
        reply, out = honest(m, t)
        return reply, _through_wire({**out, "out": _bomb(out["out"])})

    r = check(forge)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) >> 10  # MiB
    assert r.failure.reason == "protocol" and "out" in r.failure.detail and "shape" in r.failure.detail, r.failure
    assert grown < 64, f"host memory grew {grown} MiB judging a 2-byte forgery"


def test_an_unasked_tensor_name_is_protocol() -> None:
    def forge(f, m, t):
        reply, out = honest(m, t)
        return reply, {**out, "extra": torch.zeros(2)}

    r = check(forge)
    assert r.failure.reason == "protocol" and "extra" in r.failure.detail, r.failure


def test_a_graph_replay_output_of_another_shape_is_protocol() -> None:
    def forge(m, t):
        reply, out = honest_graph(m, t)
        return reply, _through_wire({**out, "r0.out": _bomb(out["r0.out"])})

    r = check_graph(forge)
    assert r.failure.reason == "protocol" and "r0.out" in r.failure.detail, r.failure
