"""Faithful RMSNorm that, only while being captured into a CUDA graph, zeroes its read-only
input x after computing out (policy-clean: is_current_stream_capturing and in-place ops on
arguments are allowed). Outputs stay right on every replay; only the input check sees it."""

import torch


def rmsnorm(x, weight, out, eps):
    x32 = x.float()
    out.copy_((x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype))
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        x.zero_()
