"""Sealed shared-memory frames: a call's inputs reach the worker without crossing the socket.

The host copies a frame's storages once into a memfd and seals it against every write, growth
and shrink (F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) before the worker gets its
fd over the socket. The worker maps it read-only and copies what it needs to its device; nothing
it does can change the bytes afterwards, and the host judges with its own tensors, the very bytes
it wrote. Why: at the dense arena's bs 256 a call sends a 1.4 GB K/V pool, and the socket copied
it twice more (the host's write, the worker's read into fresh pages) on the call's critical path.

Only host -> worker: a reply never carries an fd (wire.recv refuses a shared-memory frame unless
its caller allows one: the host would map memory the worker can still change).
"""

from __future__ import annotations

import fcntl
import mmap
import os
import stat
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from cacheon_subnet.tensor_views import rebase

SHM_MIN_BYTES = 1 << 20  # frames whose storages hold less go inline over the socket
ALIGN = 4096
SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
_WRITE_PIECE = 256 << 20


def distinct_storages(tensors: Mapping[str, torch.Tensor]) -> tuple[list[torch.Tensor], dict[str, int]]:
    """Each distinct storage once (a uint8 view of it, no copy), in first-use order, and the index
    of every tensor's storage: views sharing one buffer (q in its qkv projection) stay shared."""
    index: dict[tuple[str, int], int] = {}
    storages: list[torch.Tensor] = []
    of: dict[str, int] = {}
    for name, t in tensors.items():
        st = t.untyped_storage()
        key = (str(t.device), st.data_ptr())
        if key not in index:
            index[key] = len(storages)
            storages.append(torch.empty(0, dtype=torch.uint8, device=t.device).set_(st))
        of[name] = index[key]
    return storages, of


class SealedFrame:
    """One memfd holding a frame's storages at `offsets`, sealed; the host's fd stays open until
    close() (a pair sends the same frame twice)."""

    def __init__(self, storages: Sequence[torch.Tensor]) -> None:
        offsets, pos = [], 0
        for s in storages:
            offsets.append(pos)
            pos += -(-int(s.numel()) // ALIGN) * ALIGN
        self.offsets = tuple(offsets)
        self.sizes = tuple(int(s.numel()) for s in storages)
        self.size = max(pos, 1)
        self.fd: int | None = os.memfd_create("cacheon-frame", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self.fd, self.size)
            for s, off in zip(storages, self.offsets):
                view = memoryview(s.numpy()).cast("B")
                for lo in range(0, len(view), _WRITE_PIECE):  # pwrite: no mapping of ours to unseal first
                    piece = view[lo : lo + _WRITE_PIECE]
                    done = 0
                    while done < len(piece):
                        done += os.pwrite(self.fd, piece[done:], off + lo + done)
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, SEALS)
        except BaseException:
            self.close()
            raise

    @property
    def nbytes(self) -> int:
        return self.size

    def header(self) -> dict[str, Any]:
        return {"offsets": list(self.offsets), "size": self.size}

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:  # a frame dropped on an error path still gives its memory back
        self.close()


class Frame(dict):
    """One send of a Parcel: its tensors (a plain dict to whatever reads them) and the sealed copy
    whose fd the client sends instead of the bytes (wire.send)."""

    sealed: SealedFrame | None = None


class Parcel:
    """A prepared input set, sent any number of times (a pair's two calls): sealed once, each send
    a fresh Frame whose tensors share no memory with the host's own nor with another send's (over
    a copy-on-write mapping of the sealed file, nothing copied unless written; copies for a frame
    sent inline). So whatever writes into a Frame in this process (a test's scripted worker)
    changes neither what a later send carries nor what the host judges with."""

    def __init__(self, tensors: Mapping[str, torch.Tensor], min_bytes: int | None = None) -> None:
        self.tensors = dict(tensors)
        storages, self._of = distinct_storages(tensors)
        total = sum(int(s.numel()) for s in storages)
        on_host = all(s.device.type == "cpu" for s in storages)
        self.sealed = (
            SealedFrame(storages)
            if storages and on_host and total >= (SHM_MIN_BYTES if min_bytes is None else min_bytes)
            else None
        )

    def frame(self) -> Frame:
        if self.sealed is None:
            return Frame(rebase(self.tensors))
        sealed = self.sealed
        if sealed.fd is None:
            raise ValueError("parcel already closed")
        mm = mmap.mmap(sealed.fd, sealed.size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        stores = [
            torch.frombuffer(mm, dtype=torch.uint8, count=n, offset=o).untyped_storage()
            if n
            else torch.empty(0, dtype=torch.uint8).untyped_storage()
            for o, n in zip(sealed.offsets, sealed.sizes)
        ]
        frame = Frame(
            {
                name: torch.empty(0, dtype=t.dtype).set_(stores[self._of[name]], t.storage_offset(), t.shape, t.stride())
                for name, t in self.tensors.items()
            }
        )
        frame.sealed = sealed
        return frame

    def close(self) -> None:
        if self.sealed is not None:
            self.sealed.close()


def map_storages(fd: int, layout: Mapping[str, Any], sizes: Sequence[int]) -> list[Any]:
    """The worker's read-only views of a sealed frame's storages (untyped storages over one
    mapping). Refuses a file that is not a fully sealed memfd of the declared size: the host
    never sends one, and a writable one could change under the copy."""
    st = os.fstat(fd)
    offsets = layout.get("offsets")
    size = layout.get("size")
    if not stat.S_ISREG(st.st_mode) or not isinstance(size, int) or st.st_size != size:
        raise ValueError("shared frame: not a regular file of the declared size")
    if fcntl.fcntl(fd, fcntl.F_GET_SEALS) & SEALS != SEALS:
        raise ValueError("shared frame: not sealed against writes")
    if (
        not isinstance(offsets, list)
        or len(offsets) != len(sizes)
        or not all(isinstance(o, int) and 0 <= o and o + n <= size for o, n in zip(offsets, sizes))
    ):
        raise ValueError("shared frame: storage table out of bounds")
    mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0), prot=mmap.PROT_READ)
    stores = []
    with warnings.catch_warnings():  # read-only on purpose: the worker copies, never writes here
        warnings.simplefilter("ignore", UserWarning)
        for off, n in zip(offsets, sizes):
            raw = torch.frombuffer(mm, dtype=torch.uint8, count=n, offset=off) if n else torch.empty(0, dtype=torch.uint8)
            stores.append(raw.untyped_storage())
    return stores
