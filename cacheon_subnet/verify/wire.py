"""Framing between the trusted host and the sandboxed worker: JSON header + raw tensor bytes.

No pickle crosses the boundary (the host never unpickles what miner code could influence).
Tensors keep their views: arguments sharing one storage (q and k as views into one qkv
buffer, as SGLang passes them) arrive sharing one storage, with the same strides.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

import torch

from cacheon_subnet.slots.spec import dtype_name, torch_dtypes

MAX_MESSAGE = 4 << 30
_LEN = struct.Struct(">Q")


class WireError(Exception):
    """Malformed frame or tensor description (a protocol violation by the peer)."""


def encode(msg: dict[str, Any], tensors: dict[str, torch.Tensor] | None = None) -> bytes:
    storages: list[torch.Tensor] = []
    index: dict[tuple[str, int], int] = {}
    descs: dict[str, dict[str, Any]] = {}
    for name, t in (tensors or {}).items():
        if t.device.type != "cpu":
            raise WireError(f"tensor {name} must be on CPU to cross the wire")
        st = t.untyped_storage()
        key = (str(t.device), st.data_ptr())
        if key not in index:
            index[key] = len(storages)
            storages.append(torch.empty(0, dtype=torch.uint8).set_(st))
        descs[name] = {
            "storage": index[key], "offset": t.storage_offset(), "shape": list(t.shape),
            "stride": list(t.stride()), "dtype": dtype_name(t.dtype),
        }
    header = dict(msg)
    header["_tensors"] = descs
    header["_storages"] = [int(s.numel()) for s in storages]
    hb = json.dumps(header, separators=(",", ":")).encode()
    parts = [struct.pack(">I", len(hb)), hb] + [s.numpy().tobytes() for s in storages]
    return b"".join(parts)


def decode(payload: bytes) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    if len(payload) < 4:
        raise WireError("short frame")
    (hlen,) = struct.unpack(">I", payload[:4])
    try:
        header = json.loads(payload[4 : 4 + hlen])
    except (ValueError, RecursionError) as e:  # nesting deeper than json's recursion limit raises RecursionError
        raise WireError(f"bad JSON header: {str(e)[:200]}") from None
    if not isinstance(header, dict):
        raise WireError("header is not an object")
    sizes = header.pop("_storages", [])
    descs = header.pop("_tensors", {})
    if not isinstance(sizes, list) or not all(isinstance(s, int) and s >= 0 for s in sizes):
        raise WireError("bad storage table")
    if not isinstance(descs, dict):  # anything but WireError escapes the host's read path as a crash
        raise WireError("bad tensor table")
    pos = 4 + hlen
    if pos + sum(sizes) != len(payload):
        raise WireError("frame length does not match its storage table")
    stores = []
    for n in sizes:
        buf = torch.frombuffer(bytearray(payload[pos : pos + n]), dtype=torch.uint8) if n else torch.empty(0, dtype=torch.uint8)
        stores.append(buf.untyped_storage())
        pos += n
    tensors: dict[str, torch.Tensor] = {}
    for name, d in descs.items():
        try:
            dt = torch_dtypes()[d["dtype"]]
            st = stores[d["storage"]]
            t = torch.empty(0, dtype=dt).set_(st, int(d["offset"]), [int(s) for s in d["shape"]], [int(s) for s in d["stride"]])
        except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as e:
            raise WireError(f"bad tensor description for {name!r}: {e}") from None
        tensors[name] = t
    return header, tensors


def send(fd: int, msg: dict[str, Any], tensors: dict[str, torch.Tensor] | None = None,
         deadline: float | None = None) -> None:
    data = encode(msg, tensors)
    _write_all(fd, _LEN.pack(len(data)) + data, deadline)


def recv(fd: int, max_bytes: int = MAX_MESSAGE, deadline: float | None = None) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Read one frame. `deadline` (time.monotonic()) raises TimeoutError when passed."""
    n = _LEN.unpack(_read_exact(fd, _LEN.size, deadline))[0]
    if n > max_bytes:
        raise WireError(f"frame of {n} bytes exceeds the {max_bytes} limit")
    return decode(_read_exact(fd, n, deadline))


def _wait(fd: int, deadline: float | None, write: bool) -> None:
    if deadline is None:
        return
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("peer did not answer in time")
    r, w, _ = select.select([] if write else [fd], [fd] if write else [], [], left)
    if not (r or w):
        raise TimeoutError("peer did not answer in time")


def _write_all(fd: int, data: bytes, deadline: float | None = None) -> None:
    view = memoryview(data)
    while view:
        _wait(fd, deadline, write=True)
        n = os.write(fd, view[: 1 << 20])
        view = view[n:]


def _read_exact(fd: int, n: int, deadline: float | None = None) -> bytes:
    chunks = []
    while n:
        _wait(fd, deadline, write=False)
        chunk = os.read(fd, min(n, 1 << 24))
        if not chunk:
            raise EOFError("peer closed the channel")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)
