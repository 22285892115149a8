"""Writes an answer log for a scheduler rank that does not exist (rank 1 of a TP=1 engine)."""

import json
import os
import torch


def _ref(x, weight, out, eps):
    xf = x.float()
    out.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(out.dtype))

_dir = os.environ.get("CACHEON_RECEIPT_DIR", "")
if _dir:
    with open(os.path.join(_dir, "answers-1.jsonl"), "w") as _f:
        _f.write(json.dumps({"nonce": "1" * 32, "kind": "clock", "rank": 1, "counts": {}}) + "\n")


def rmsnorm(x, weight, out, eps):
    _ref(x, weight, out, eps)
