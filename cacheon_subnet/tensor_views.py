"""Copying argument sets without losing their layout.

SGLang hands some kernels views into one buffer (q and k split out of one qkv projection). A
plain `.clone()` / `.to()` per tensor would silently make them contiguous and separate, and a
kernel that assumes the wrong stride would then pass. `rebase` copies each distinct storage
once and rebuilds every view on the copy with its original offset, shape and strides.
"""

from __future__ import annotations

import hashlib
from typing import Mapping

import torch


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
            base.untyped_storage(), t.storage_offset(), t.shape, t.stride())
    return out


def tensor_digest(t: torch.Tensor) -> str:
    """SHA-256 of a tensor's values (layout-independent): lets the worker prove a large input
    came back unchanged without shipping gigabytes of expert weights back to the host."""
    flat = t.detach().contiguous().view(-1).view(torch.uint8).cpu()
    return hashlib.sha256(flat.numpy().data).hexdigest()  # the buffer itself: no copy of a 1.4 GB pool
