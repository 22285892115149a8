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
