"""Sealed shared-memory frames (verify/shm.py): host -> worker only, sealed against every write,
views and sharing kept; the host never maps one its peer sends."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import struct
import threading

import pytest
import torch

from cacheon_subnet.verify import shm, wire


def _inputs() -> dict[str, torch.Tensor]:
    qkv = torch.randn(64, 32 * 128).bfloat16()
    return {
        "q": qkv[:, : 16 * 128].view(64, 16, 128),
        "k_buffer": torch.randn(4096, 8, 128).bfloat16(),
        "kv_indices": torch.arange(100),
    }


def _send_recv(frame, allow_shm: bool):
    a, b = socket.socketpair()
    got: dict = {}

    def reader():
        try:
            got["r"] = wire.recv(b.fileno(), allow_shm=allow_shm)
        except wire.WireError as e:
            got["e"] = e

    th = threading.Thread(target=reader)
    th.start()
    wire.send(a.fileno(), {"type": "call"}, frame)
    th.join(10)
    a.close()
    b.close()
    return got


def test_a_sealed_frame_reaches_the_worker_with_views_and_sharing():
    t = _inputs()
    parcel = shm.Parcel(t)
    assert parcel.sealed is not None
    got = _send_recv(parcel.frame(), allow_shm=True)
    msg, out = got["r"]
    assert msg == {"type": "call"}
    assert all(torch.equal(out[k], t[k]) and out[k].stride() == t[k].stride() for k in t)
    parcel.close()


def test_the_host_refuses_a_shared_memory_frame():
    """A reply is read with allow_shm=False: mapping memory the worker still holds would let it
    change what the host judges after the check (broken control: allow_shm=True maps it)."""
    parcel = shm.Parcel(_inputs())
    got = _send_recv(parcel.frame(), allow_shm=False)
    assert "shared-memory frame is not accepted" in str(got.get("e"))
    assert "r" in _send_recv(parcel.frame(), allow_shm=True)
    with pytest.raises(wire.WireError):  # nor in a decoded frame
        hb = json.dumps({"_shm": {"offsets": [], "size": 1}, "_storages": [], "_tensors": {}}).encode()
        wire.decode(struct.pack(">I", len(hb)) + hb)
    parcel.close()


def test_the_sealed_file_refuses_every_change():
    parcel = shm.Parcel(_inputs())
    fd = parcel.sealed.fd
    assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & shm.SEALS == shm.SEALS
    for change in (
        lambda: os.pwrite(fd, b"x", 0),
        lambda: os.ftruncate(fd, 1),
        lambda: os.ftruncate(fd, parcel.sealed.size * 2),
        lambda: fcntl.fcntl(fd, fcntl.F_ADD_SEALS, 0),
    ):  # F_SEAL_SEAL: not even the seals
        with pytest.raises(PermissionError):
            change()
    import mmap

    with pytest.raises(PermissionError):
        mmap.mmap(fd, parcel.sealed.size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    parcel.close()


def test_the_worker_refuses_an_unsealed_file():
    """Broken control for the seals: a memfd the host forgot to seal could change under the
    worker's copy; map_storages refuses it (and one whose storage table runs past its end)."""
    fd = os.memfd_create("unsealed", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 8192)
    with pytest.raises(ValueError, match="sealed"):
        shm.map_storages(fd, {"offsets": [0], "size": 8192}, [4096])
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, shm.SEALS)
    with pytest.raises(ValueError, match="out of bounds"):
        shm.map_storages(fd, {"offsets": [4096], "size": 8192}, [8192])
    assert len(shm.map_storages(fd, {"offsets": [0, 4096], "size": 8192}, [4096, 4096])) == 2
    os.close(fd)


def test_small_frames_go_inline_and_every_send_is_a_fresh_copy():
    t = {"x": torch.randn(16)}
    parcel = shm.Parcel(t)
    assert parcel.sealed is None
    first = parcel.frame()
    first["x"].add_(1)
    assert torch.equal(parcel.frame()["x"], t["x"]) and not torch.equal(first["x"], t["x"])
    got = _send_recv(parcel.frame(), allow_shm=False)  # nothing shared: any reader takes it
    assert torch.equal(got["r"][1]["x"], t["x"])
