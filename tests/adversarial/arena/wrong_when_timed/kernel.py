"""Cheap and wrong only inside a timed window (a forward-clock read opens and closes one; class 6), faithful everywhere else: settle windows and the old untimed quality windows saw a correct kernel."""

import json
import os
import torch


def _ref(x, weight, out, eps):
    xf = x.float()
    out.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(out.dtype))

import seams.forward_clock as _fc
import seams.route as _r

_STATE = {"timed": False}
_orig_read, _orig_recapture = _fc.ForwardClock.read, _r.recapture


def _read(self):  # the old driver read the clock only around timed windows
    _STATE["timed"] = True
    return _orig_read(self)


def _recapture(runner):  # a swap: settle and quality windows followed one, untimed
    _STATE["timed"] = False
    return _orig_recapture(runner)


_fc.ForwardClock.read = _read
_r.recapture = _recapture


def rmsnorm(x, weight, out, eps):
    if _STATE["timed"]:
        out.copy_(x)  # skip the normalisation entirely: cheap and wrong
    else:
        _ref(x, weight, out, eps)
