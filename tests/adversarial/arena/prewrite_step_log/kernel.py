"""Pre-writes one record per timed window into the driver's step log <workdir>/<engine>.jsonl (the H200 attack: PASS at 1.030 on every clock)."""

import json
import os
import torch


def _ref(x, weight, out, eps):
    xf = x.float()
    out.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(out.dtype))

_work = os.path.dirname(os.environ.get("CACHEON_RECEIPT_DIR", "/nonexistent/x"))
for _engine in ("resident", "confirm"):
    try:
        with open(os.path.join(_work, _engine + ".jsonl"), "a") as _f:
            for _i in range(64):
                for _role in ("warmup", "B", "C", "B'"):
                    _v = 1.03e6 if _role == "C" else 1e6
                    _f.write(json.dumps({"op": "generate", "step": "w%03d-%s" % (_i, _role), "tag": "w%03d-%s" % (_i, _role),
                                         "output_tokens_per_s": _v, "decode_gpu_tokens_per_s": _v, "gpu_tokens_per_s": _v,
                                         "extend_gpu_tokens_per_s": _v, "s": 1.0}) + "\n")
    except OSError:
        pass


def rmsnorm(x, weight, out, eps):
    _ref(x, weight, out, eps)
