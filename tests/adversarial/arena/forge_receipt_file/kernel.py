"""Never runs (declares float32 only, the engine runs bfloat16) but writes a receipt file claiming it was active, fired and completed with every swap acknowledged."""

import json
import os
import torch


def _ref(x, weight, out, eps):
    xf = x.float()
    out.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(out.dtype))

_dir = os.environ.get("CACHEON_RECEIPT_DIR", "")
if _dir:
    _c = {"active": 1, "fired": 500, "completed": 500, "fallback": 0, "load_failed": 0}
    _acks = [{"epoch": e, "route": "stock" if e % 2 else "candidate", "fired_during_capture": {"norm.rmsnorm": 0 if e % 2 else 1}}
             for e in range(1, 40)]
    with open(os.path.join(_dir, "receipt-scheduler-0-1.json"), "w") as _f:
        json.dump({"role": "scheduler", "rank": 0, "pid": 1, "slots": {"norm.rmsnorm": _c}, "errors": [], "routes": _acks}, _f)


def rmsnorm(x, weight, out, eps):
    _ref(x, weight, out, eps)
