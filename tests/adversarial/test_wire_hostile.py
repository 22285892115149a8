"""Frames a compromised worker writes that the host's wire.decode must refuse as WireError.

client.request turns WireError into WorkerDied (FAIL `crashed`). Any other exception escapes
verify_bundle, and the validator counts an exception from verify as infrastructure trouble
(loop._verify_stage: retried, then `no_decision`): a bundle whose worker could write one of these
frames turned every FAIL into NO_DECISION and cost the validator a verify per retry.
"""

from __future__ import annotations

import socket
import struct

import pytest

from cacheon_subnet.verify import wire


def _frame(header: bytes) -> bytes:
    return struct.pack(">I", len(header)) + header


HOSTILE = {
    "tensor_table_list": b'{"_tensors": []}',
    "tensor_table_string": b'{"_tensors": "x"}',
    "deep_json": b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "descriptor_null": b'{"_tensors": {"out": null}, "_storages": []}',
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_header_is_a_wire_error(name: str) -> None:
    with pytest.raises(wire.WireError):
        wire.decode(_frame(HOSTILE[name]))


def test_recv_over_a_socket_raises_wire_error_only() -> None:
    """The host's own read path (client.request catches WireError, nothing broader)."""
    host, worker = socket.socketpair()
    try:
        data = _frame(HOSTILE["deep_json"])
        worker.sendall(struct.pack(">Q", len(data)) + data)
        with pytest.raises(wire.WireError):
            wire.recv(host.fileno(), deadline=None)
    finally:
        host.close()
        worker.close()


STREAM_HOSTILE = {
    **{k: _frame(v) for k, v in HOSTILE.items()},
    "short_frame": b"\x00\x01",
    "header_longer_than_frame": struct.pack(">I", 10_000) + b"{}",
    "storage_table_past_the_frame": _frame(b'{"_storages": [1000000000], "_tensors": {}}'),
    "storage_table_short_of_the_frame": _frame(b'{"_storages": [1], "_tensors": {}}') + b"xyz",
    "view_past_its_storage": _frame(
        b'{"_storages": [4], "_tensors": {"o": {"storage": 0, "offset": 0, '
        b'"shape": [400], "stride": [1], "dtype": "float32"}}}'
    )
    + b"\x00" * 4,
    "negative_storage": _frame(b'{"_storages": [-4], "_tensors": {}}'),
    # red team 2026-12-04: json.loads made ~25x a header's size in objects, past any deadline (a
    # 64 MiB header: 1.6 GiB, 16 s; the frame allows 4 GiB), and 4 MiB of empty storages cost
    # 380 MiB and 13 s; both were accepted as replies
    "header_over_the_limit": _frame(b'{"env": [' + b"[]," * (wire.MAX_HEADER // 3) + b"[]]}"),
    "too_many_storages": _frame(b'{"_storages": [' + b"0," * wire.MAX_TENSORS + b'0], "_tensors": {}}'),
}


@pytest.mark.parametrize("name", sorted(STREAM_HOSTILE))
def test_the_streaming_recv_refuses_each_as_wire_error_and_stays_in_step(name: str) -> None:
    """recv reads storages straight into their own buffers (no whole-frame read first): every
    hostile frame is still WireError, allocates nothing past the frame's own length, and the
    next frame on the stream is read whole."""
    import threading

    import torch

    good = wire.encode({"n": 1}, {"a": torch.arange(3, dtype=torch.float32)})
    data = STREAM_HOSTILE[name]
    host, worker = socket.socketpair()
    try:
        t = threading.Thread(
            target=worker.sendall, args=(struct.pack(">Q", len(data)) + data + struct.pack(">Q", len(good)) + good,)
        )
        t.start()
        with pytest.raises(wire.WireError):
            wire.recv(host.fileno(), deadline=None)
        msg, tensors = wire.recv(host.fileno(), deadline=None)
        t.join()
        assert msg == {"n": 1} and tensors["a"].tolist() == [0.0, 1.0, 2.0]
    finally:
        host.close()
        worker.close()
