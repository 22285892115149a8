"""Framing between the trusted host and the sandboxed worker: JSON header + raw tensor bytes.

No pickle crosses the boundary (the host never unpickles what miner code could influence).
Tensors keep their views: arguments sharing one storage (q and k as views into one qkv
buffer, as SGLang passes them) arrive sharing one storage, with the same strides.
A host frame may carry its storages in a sealed memfd instead (verify/shm.py: the header's
`_shm`, the fd right after the frame); only a caller that allows it (the worker) maps one.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import time
from typing import Any

import torch

from cacheon_subnet.slots.spec import dtype_name, torch_dtypes
from cacheon_subnet.verify import shm

MAX_MESSAGE = 4 << 30
# The JSON header of a frame (the tensor table, flags, error tails: kilobytes). Bounded apart from
# the frame: json.loads turns a header of `[],` runs into ~25x its size in Python objects and
# ignores the deadline, so a 64 MiB header cost the host 1.6 GiB and 16 s against a 5 s deadline,
# and one of the 4 GiB a frame may hold would OOM the validator (red team 2026-12-04).
MAX_HEADER = 4 << 20
# Tensors and storages one frame may describe (a graph trial's replies: ~100). Each costs the host
# an object before any check: 4 MiB of `0,` storages took 380 MiB and 13 s.
MAX_TENSORS = 4096
_LEN = struct.Struct(">Q")


class WireError(Exception):
    """Malformed frame or tensor description (a protocol violation by the peer)."""


def _frame_parts(
    msg: dict[str, Any], tensors: dict[str, torch.Tensor] | None, sealed: shm.SealedFrame | None = None
) -> tuple[bytes, list[torch.Tensor]]:
    """The length-prefixed JSON header and the distinct storages (uint8 views, no copy) of a frame."""
    for name, t in (tensors or {}).items():
        if t.device.type != "cpu":
            raise WireError(f"tensor {name} must be on CPU to cross the wire")
    storages, of = shm.distinct_storages(tensors or {})
    descs = {
        name: {
            "storage": of[name],
            "offset": t.storage_offset(),
            "shape": list(t.shape),
            "stride": list(t.stride()),
            "dtype": dtype_name(t.dtype),
        }
        for name, t in (tensors or {}).items()
    }
    header = dict(msg)
    header["_tensors"] = descs
    header["_storages"] = [int(s.numel()) for s in storages]
    if sealed is not None:
        if list(sealed.sizes) != header["_storages"]:
            raise WireError("sealed frame does not hold these tensors' storages")
        header["_shm"] = sealed.header()
    hb = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack(">I", len(hb)) + hb, storages


def encode(msg: dict[str, Any], tensors: dict[str, torch.Tensor] | None = None) -> bytes:
    head, storages = _frame_parts(msg, tensors)
    return b"".join([head] + [s.numpy().tobytes() for s in storages])


def _parse_header(raw: bytes | memoryview) -> tuple[dict[str, Any], list[int], dict[str, Any]]:
    """The JSON header of a frame (its 4-byte length already read off), its storage sizes and tensor table."""
    try:
        header = json.loads(bytes(raw))
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
    if len(sizes) > MAX_TENSORS or len(descs) > MAX_TENSORS:
        raise WireError(f"{len(descs)} tensors over {len(sizes)} storages: more than the {MAX_TENSORS} a frame may hold")
    return header, sizes, descs


def _tensors(descs: dict[str, Any], stores: list[Any]) -> dict[str, torch.Tensor]:
    """Views over the frame's storages, each bounds-checked by torch against its own storage."""
    tensors: dict[str, torch.Tensor] = {}
    for name, d in descs.items():
        try:
            dt = torch_dtypes()[d["dtype"]]
            st = stores[d["storage"]]
            t = torch.empty(0, dtype=dt).set_(
                st, int(d["offset"]), [int(s) for s in d["shape"]], [int(s) for s in d["stride"]]
            )
        except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as e:
            raise WireError(f"bad tensor description for {name!r}: {e}") from None
        tensors[name] = t
    return tensors


def _storage(buf: bytearray) -> Any:
    """A storage of its own over `buf` (writable, no copy)."""
    return (torch.frombuffer(buf, dtype=torch.uint8) if buf else torch.empty(0, dtype=torch.uint8)).untyped_storage()


def decode(payload: bytes) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    if len(payload) < 4:
        raise WireError("short frame")
    (hlen,) = struct.unpack(">I", payload[:4])
    if hlen > MAX_HEADER:
        raise WireError(f"header of {hlen} bytes exceeds the {MAX_HEADER} limit")
    header, sizes, descs = _parse_header(payload[4 : 4 + hlen])
    if "_shm" in header:
        raise WireError("a shared-memory frame is not accepted here")
    pos = 4 + hlen
    if pos + sum(sizes) != len(payload):
        raise WireError("frame length does not match its storage table")
    stores = []
    for n in sizes:
        stores.append(_storage(bytearray(payload[pos : pos + n])))
        pos += n
    return header, _tensors(descs, stores)


def send(
    fd: int, msg: dict[str, Any], tensors: dict[str, torch.Tensor] | None = None, deadline: float | None = None
) -> None:
    """One frame, the storages written straight from the tensors' memory (a 1.4 GB K/V pool was
    copied three times before it reached the pipe), or, for a shm.Frame with a sealed copy, the
    header alone and then the copy's fd (SCM_RIGHTS, one byte)."""
    sealed = getattr(tensors, "sealed", None)
    head, storages = _frame_parts(msg, tensors, sealed)
    if sealed is not None:
        if sealed.fd is None:
            raise WireError("sealed frame already closed")
        _write_all(fd, _LEN.pack(len(head)) + head, deadline)
        _wait(fd, deadline, write=True)
        with socket.socket(fileno=os.dup(fd)) as sock:
            socket.send_fds(sock, [b"F"], [sealed.fd])
        return
    _write_all(fd, _LEN.pack(len(head) + sum(int(s.numel()) for s in storages)) + head, deadline)
    for s in storages:
        if s.numel():
            _write_all(fd, memoryview(s.numpy()), deadline)


def recv(
    fd: int, max_bytes: int = MAX_MESSAGE, deadline: float | None = None, allow_shm: bool = False
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Read one frame, each storage straight into a buffer of its own. `deadline`
    (time.monotonic()) raises TimeoutError when passed. A malformed frame raises WireError after
    its bytes are read off (the stream stays at a frame boundary, as when frames were read whole).
    `allow_shm`: the worker maps a host's sealed frame; anywhere else one is refused (the host
    never maps memory its peer could still write)."""
    n = _LEN.unpack(_read_exact(fd, _LEN.size, deadline))[0]
    if n > max_bytes:
        raise WireError(f"frame of {n} bytes exceeds the {max_bytes} limit")
    if n < 4:
        _read_exact(fd, n, deadline)
        raise WireError("short frame")
    (hlen,) = struct.unpack(">I", _read_exact(fd, 4, deadline))
    if hlen > n - 4:
        _discard(fd, n - 4, deadline)
        raise WireError("frame length does not match its storage table")
    if hlen > MAX_HEADER:  # never parsed: read off (within the deadline) and refused
        _discard(fd, n - 4, deadline)
        raise WireError(f"header of {hlen} bytes exceeds the {MAX_HEADER} limit")
    try:
        header, sizes, descs = _parse_header(_read_exact(fd, hlen, deadline))
        shared = header.pop("_shm", None)
        if shared is not None and not allow_shm:
            raise WireError("a shared-memory frame is not accepted here")
        if 4 + hlen + (0 if shared is not None else sum(sizes)) != n:
            raise WireError("frame length does not match its storage table")
        if shared is not None and (not isinstance(shared, dict) or sum(sizes) > max_bytes):
            raise WireError("bad shared-memory table")
    except WireError:
        _discard(fd, n - 4 - hlen, deadline)
        raise
    if shared is not None:
        return header, _tensors(descs, _shared_stores(fd, shared, sizes, deadline))
    stores = [_storage(_read_into(fd, bytearray(size), deadline)) for size in sizes]
    return header, _tensors(descs, stores)


def _shared_stores(fd: int, layout: dict[str, Any], sizes: list[int], deadline: float | None) -> list[Any]:
    """The sealed memfd that follows a shared-memory header, mapped read-only (verify/shm.py)."""
    _wait(fd, deadline, write=False)
    with socket.socket(fileno=os.dup(fd)) as sock:
        data, fds, _, _ = socket.recv_fds(sock, 1, 1)
    if data != b"F" or len(fds) != 1:
        for f in fds:
            os.close(f)
        raise WireError("shared-memory frame without its fd")
    try:
        return shm.map_storages(fds[0], layout, sizes)
    except (ValueError, OSError) as e:
        raise WireError(str(e)) from None
    finally:
        os.close(fds[0])  # the mapping keeps the memory


def _wait(fd: int, deadline: float | None, write: bool) -> None:
    if deadline is None:
        return
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("peer did not answer in time")
    r, w, _ = select.select([] if write else [fd], [fd] if write else [], [], left)
    if not (r or w):
        raise TimeoutError("peer did not answer in time")


def _write_all(fd: int, data: bytes | memoryview, deadline: float | None = None) -> None:
    view = memoryview(data).cast("B")
    while view:
        _wait(fd, deadline, write=True)
        n = os.write(fd, view[: 1 << 20])
        view = view[n:]


def _read_into(fd: int, buf: bytearray, deadline: float | None = None) -> bytearray:
    view, pos = memoryview(buf), 0
    while pos < len(buf):
        _wait(fd, deadline, write=False)
        k = os.readv(fd, [view[pos : pos + (1 << 24)]])
        if not k:
            raise EOFError("peer closed the channel")
        pos += k
    return buf


def _read_exact(fd: int, n: int, deadline: float | None = None) -> bytes:
    return bytes(_read_into(fd, bytearray(n), deadline))


def _discard(fd: int, n: int, deadline: float | None = None) -> None:
    while n > 0:
        k = min(n, 1 << 24)
        _read_into(fd, bytearray(k), deadline)
        n -= k
