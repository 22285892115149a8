"""Writes 48 MiB at the bottom of a chain of 17 directories with 250-character names in its receipts
dir (kept in the verdict's workdir): the path is longer than PATH_MAX (4096), so a walk that joins
path strings gets ENAMETOOLONG there, and os.walk skips such errors silently. Built with dir fds
(openat), which have no length limit."""

import os
import torch


def _ref(x, weight, out, eps):
    xf = x.float()
    out.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(out.dtype))


_dir = os.environ.get("CACHEON_RECEIPT_DIR")
if _dir:
    _fd = os.open(_dir, os.O_RDONLY | os.O_DIRECTORY)
    for _i in range(17):
        _name = f"{os.getpid()}-" + "x" * 240 if _i == 0 else "x" * 250
        os.mkdir(_name, dir_fd=_fd)
        _nfd = os.open(_name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=_fd)
        os.close(_fd)
        _fd = _nfd
    _f = os.open("ballast.bin", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=_fd)
    _block = b"\xa5" * (1 << 20)
    for _ in range(48):
        os.write(_f, _block)
    os.close(_f)
    os.close(_fd)


def rmsnorm(x, weight, out, eps):
    _ref(x, weight, out, eps)
