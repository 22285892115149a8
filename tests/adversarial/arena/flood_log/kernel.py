"""Writes 24 MiB to the engine's stdout and stderr when the scheduler imports it (the engine may write 64 GiB files: the log on the validator's disk, read back whole to quote its tail)."""

import os
import torch


def _ref(x, weight, out, eps):
    xf = x.float()
    out.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(out.dtype))


_line = b"F" * 1023 + b"\n"
for _fd in (1, 2):
    for _ in range(12 * 1024):
        os.write(_fd, _line)
os.write(2, b"FLOOD-END\n")


def rmsnorm(x, weight, out, eps):
    _ref(x, weight, out, eps)
