"""Copying argument sets without losing their layout.

SGLang hands some kernels views into one buffer (q and k split out of one qkv projection). A
plain `.clone()` / `.to()` per tensor would silently make them contiguous and separate, and a
kernel that assumes the wrong stride would then pass. `rebase` copies each distinct storage
once and rebuilds every view on the copy with its original offset, shape and strides.
"""

from __future__ import annotations

import hashlib
import threading
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait

import torch

from cacheon_subnet.slots.gen import usable_cpus


def rebase(tensors: Mapping[str, torch.Tensor], device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
    copies: dict[tuple[str, int], torch.Tensor] = {}
    out: dict[str, torch.Tensor] = {}
    for name, t in tensors.items():
        st = t.untyped_storage()
        key = (str(t.device), st.data_ptr())
        if key not in copies:
            raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(st)
            copies[key] = raw.to(device if device is not None else t.device, copy=True)
        base = copies[key]
        out[name] = torch.empty(0, dtype=t.dtype, device=base.device).set_(
            base.untyped_storage(), t.storage_offset(), t.shape, t.stride()
        )
    return out


# Above one chunk a digest is a tree: SHA-256 of each fixed 16 MiB chunk of the tensor's bytes,
# hashed on threads (hashlib drops the GIL), then SHA-256 over a tag, the length and the chunk
# digests in order. As collision-resistant as SHA-256 itself; the same value for any thread count.
# One SHA-256 reads ~1-2 GB/s on one core: the dense arena's bs 256 K/V pools (1.4 GB) cost ~0.8 s
# a call on each side (H200, main c7cdecf: the worker's digests and copy back took 39 s of an
# attention.decode screen, the host's digests 13.5 s).
DIGEST_CHUNK = 16 << 20
_TREE_TAG = b"cacheon.tensor_digest.tree-sha256.v1"
_STAGES = 4  # staging buffers in flight for a device tensor (D2H of one chunk while others hash)
_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_staging: dict[bool, list[torch.Tensor]] = {}


def tensor_digest(t: torch.Tensor, staged: bool | None = None) -> str:
    """A SHA-256-based digest of a tensor's values (layout-independent): lets the worker prove a
    large input came back unchanged without shipping gigabytes back to the host. Every byte is
    hashed, wherever the tensor lives: a write anywhere in a 1.4 GB K/V pool changes it. A device
    tensor goes to the host a chunk at a time through reused (pinned) staging buffers; `staged`
    forces that path (tests) or the plain one."""
    flat = t.detach().contiguous().view(-1).view(torch.uint8)
    n = flat.numel()
    if n <= DIGEST_CHUNK:
        return hashlib.sha256(flat.cpu().numpy().data).hexdigest()  # the buffer itself: no copy
    on_host = flat.device.type == "cpu"
    leaves = _staged_leaves(flat) if (staged if staged is not None else not on_host) else _host_leaves(flat)
    root = hashlib.sha256(_TREE_TAG + n.to_bytes(8, "big"))
    for leaf in leaves:
        root.update(leaf)
    return root.hexdigest()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:  # leaf tasks only (never wait on another task): one pool for every caller
            _pool = ThreadPoolExecutor(max_workers=min(8, usable_cpus()), thread_name_prefix="digest")
        return _pool


def _sha(chunk: torch.Tensor) -> bytes:
    return hashlib.sha256(chunk.numpy().data).digest()


def _host_leaves(flat: torch.Tensor) -> list[bytes]:
    pool = _executor()
    return list(pool.map(_sha, (flat[i : i + DIGEST_CHUNK] for i in range(0, flat.numel(), DIGEST_CHUNK))))


def _staged_leaves(flat: torch.Tensor) -> list[bytes]:
    """Chunk i is copied into staging buffer i % _STAGES once that buffer's last hash is done."""
    pin = flat.device.type == "cuda"
    with _lock:
        bufs = _staging.get(pin) or [torch.empty(DIGEST_CHUNK, dtype=torch.uint8, pin_memory=pin) for _ in range(_STAGES)]
        _staging[pin] = []  # held by this call; a concurrent caller makes its own
    pool, leaves = _executor(), []
    pending: deque[Future[bytes]] = deque()
    try:
        for i, lo in enumerate(range(0, flat.numel(), DIGEST_CHUNK)):
            if len(pending) == _STAGES:
                leaves.append(pending.popleft().result())
            m = min(DIGEST_CHUNK, flat.numel() - lo)
            buf = bufs[i % _STAGES][:m]
            buf.copy_(flat[lo : lo + m])  # synchronous: the chunk is on the host before it is hashed
            pending.append(pool.submit(_sha, buf))
        leaves.extend(f.result() for f in pending)
    finally:
        wait(pending)  # no hash still reads a buffer when it goes back
        with _lock:
            _staging[pin] = bufs
    return leaves


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def same_bits(t: torch.Tensor, ref: torch.Tensor) -> bool:
    """Bit-for-bit equality, for what must not change at all (read-only inputs, engine state).
    Value equality has -0.0 == 0.0: a policy-clean kernel kept a call counter in the sign of an
    engine cache's exact zeros that no check named (red team 2026-12-04); and a NaN never equals
    itself."""
    if t.shape != ref.shape or t.dtype != ref.dtype:
        return False
    bits = _BITS.get(t.element_size()) if (t.is_floating_point() or t.is_complex()) else None
    if bits is None:  # integers and bools: values are bits
        return torch.equal(t, ref)
    return torch.equal(t.contiguous().view(bits), ref.contiguous().view(bits))
