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


@pytest.mark.parametrize(
    "payload",
    [
        b"\x00\x00",
        b"\x00\x00\x00\x05{bad}",
        b"\x00\x00\x00\x02[]",
    ],
)
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


def _pair_io(payloads, reader):
    """Write raw payloads into one end of a socketpair from a thread; run `reader` on the other."""
    import threading

    a, b = socket.socketpair()
    try:
        t = threading.Thread(target=lambda: [os.write(b.fileno(), p) for p in payloads])
        t.start()
        out = reader(a.fileno())
        t.join()
        return out
    finally:
        a.close()
        b.close()


def test_send_recv_streams_storages_and_keeps_views():
    """send writes each storage straight from the tensor's memory, recv reads each into a buffer of
    its own (1.43 GB frame: 12.7-25.9 s before, 2.1-2.8 s after, 2-core box): same frame, same views."""
    qkv = torch.randn(7, 48, dtype=torch.bfloat16)
    q, k = qkv[:, :32].view(7, 2, 16), qkv[:, 32:].view(7, 1, 16)
    empty = torch.empty(0)
    r, w = os.pipe()
    try:
        wire.send(w, {"type": "x"}, {"q": q, "k": k, "e": empty})
        msg, t = wire.recv(r)
    finally:
        os.close(r)
        os.close(w)
    assert msg == {"type": "x"} and torch.equal(t["q"], q) and torch.equal(t["k"], k) and t["e"].numel() == 0
    assert t["q"].untyped_storage().data_ptr() == t["k"].untyped_storage().data_ptr()
    assert t["q"].stride() == q.stride()
    t["q"].add_(1)  # writable, and its own memory
    assert not torch.equal(t["q"], q)
    r, w = os.pipe()  # the streamed frame is byte for byte the length-prefixed encode(): one format
    try:
        wire.send(w, {"type": "x"}, {"q": q, "k": k})
        body = wire.encode({"type": "x"}, {"q": q, "k": k})
        assert os.read(r, 1 << 20) == len(body).to_bytes(8, "big") + body
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize("bad", ["shape", "length", "json", "hlen"])
def test_a_malformed_frame_on_the_stream_leaves_the_next_one_readable(bad):
    good = wire.encode({"n": 2}, {"a": torch.ones(4)})
    framed = lambda body: len(body).to_bytes(8, "big") + body  # noqa: E731
    hacked = {
        "shape": good.replace(b'"shape":[4]', b'"shape":[400]'),
        "length": good.replace(b'"_storages":[16]', b'"_storages":[15]'),
        "json": b"\x00\x00\x00\x05{bad}" + b"x" * 16,
        "hlen": b"\x00\x00\xff\xff" + b"x" * 12,
    }[bad]

    def read_two(fd):
        with pytest.raises(wire.WireError):
            wire.recv(fd)
        return wire.recv(fd)

    msg, t = _pair_io([framed(hacked), framed(good)], read_two)
    assert msg == {"n": 2} and torch.equal(t["a"], torch.ones(4))


def test_wire_bench_script_round_trips_a_frame(capsys):
    """scripts/wire_bench.py (the benchmarks' wire timing) runs and checks its own round trip."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import wire_bench

    assert wire_bench.main(["--rows", "64", "--repeats", "1"]) == 0
    assert "send to decoded" in capsys.readouterr().out
