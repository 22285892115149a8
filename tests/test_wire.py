"""The host<->worker frame format: views and shared storage survive; malformed frames are rejected."""

import os
import socket

import pytest
import torch

from cacheon_subnet.verify import wire


def test_round_trip_preserves_views_and_sharing():
    qkv = torch.randn(5, 48, dtype=torch.bfloat16)
    q, k = qkv[:, :32].view(5, 2, 16), qkv[:, 32:].view(5, 1, 16)
    pos = torch.arange(5)
    msg, t = wire.decode(wire.encode({"type": "x", "n": 3}, {"q": q, "k": k, "positions": pos}))
    assert msg == {"type": "x", "n": 3}
    assert torch.equal(t["q"], q) and torch.equal(t["k"], k) and torch.equal(t["positions"], pos)
    assert t["q"].stride() == q.stride() and t["k"].storage_offset() == k.storage_offset()
    assert t["q"].untyped_storage().data_ptr() == t["k"].untyped_storage().data_ptr()


@pytest.mark.parametrize("payload", [
    b"\x00\x00", b"\x00\x00\x00\x05{bad}", b"\x00\x00\x00\x02[]",
])
def test_malformed_frames(payload):
    with pytest.raises(wire.WireError):
        wire.decode(payload)


def test_out_of_bounds_view_is_rejected():
    good = wire.encode({}, {"a": torch.zeros(4)})
    hacked = good.replace(b'"shape":[4]', b'"shape":[400]')
    with pytest.raises(wire.WireError):
        wire.decode(hacked)


def test_length_mismatch_is_rejected():
    good = wire.encode({}, {"a": torch.ones(4)})
    with pytest.raises(wire.WireError):
        wire.decode(good + b"junk")


def test_recv_deadline_and_size_cap():
    a, b = socket.socketpair()
    try:
        with pytest.raises(TimeoutError):
            wire.recv(a.fileno(), deadline=__import__("time").monotonic() + 0.2)
        os.write(b.fileno(), (10**12).to_bytes(8, "big"))
        with pytest.raises(wire.WireError):
            wire.recv(a.fileno())
    finally:
        a.close()
        b.close()
