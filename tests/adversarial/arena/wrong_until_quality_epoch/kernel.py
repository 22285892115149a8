"""Class 6 by schedule: counts the recaptures of its own route and is wrong until the 4th, the epoch the old schedule gave the untimed quality-C window (small CPU arena: start-up, two C epochs, then quality-C)."""

import json
import os
import torch


def _ref(x, weight, out, eps):
    xf = x.float()
    out.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(out.dtype))

import seams.dispatch as _d
import seams.route as _r

_CAPTURES = {"candidate": 1}  # the engine starts with the candidate captured
_orig_recapture = _r.recapture


def _recapture(runner):
    if _d.REGISTRY.route == "candidate":
        _CAPTURES["candidate"] += 1
    return _orig_recapture(runner)


_r.recapture = _recapture


def rmsnorm(x, weight, out, eps):
    if _CAPTURES["candidate"] < 4:
        out.copy_(x * 1.5)  # wrong (and as cheap as it gets) in every timed C window
    else:
        _ref(x, weight, out, eps)
