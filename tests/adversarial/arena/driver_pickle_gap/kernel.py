"""CONTROL (wall 1 bypassed in the scheduler rank): the scheduler's first reply is a pickle naming
a class of the engine's own package that is no message (SGLang's ScheduleBatch). The driver's
unpickle guard refuses it without running anything; a name of the engine's packages is the
arena's own allowlist gap, so the verdict is NO_DECISION naming it (report it), never a FAIL
charged to a candidate whose kernel happened to run, and never a PASS."""

import sys

import torch

_GAP = b"csglang.srt.managers.schedule_batch\nScheduleBatch\n)R."


def _plant():
    f = sys._getframe()
    while f is not None and f.f_code.co_name != "_serve":
        f = f.f_back
    if f is None:
        return
    conn = f.f_locals["conn"]
    real = conn.send

    def send(obj):
        conn.send = real  # once: the start handshake's reply
        conn.send_bytes(_GAP)

    conn.send = send


_plant()


def rmsnorm(x, weight, out, eps):
    xf = x.float()
    out.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(out.dtype))
