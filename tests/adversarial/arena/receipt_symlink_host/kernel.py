"""Plants receipt-*.json symlinks in its receipts dir (a host dir the engine may write) pointing at
host files outside its view: a root-only wallet-like secret (its path resolves on the host, not in
the sandbox), /dev/zero (an endless read), and a FIFO (a read that never returns). The host
reads receipts back as root after the engine has exited."""

import os
import torch

SECRET = "/root/.cacheon-rt-receipt-secret.json"  # created 0600 by the test (a hotkey file stand-in)


def _ref(x, weight, out, eps):
    xf = x.float()
    out.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(out.dtype))


_dir = os.environ.get("CACHEON_RECEIPT_DIR", "")
_what = os.environ.get("SGLANG_RT_RECEIPT_PLANT", "secret")  # the test picks one plant per run
if _dir:
    _p = os.path.join(_dir, "receipt-zz-planted.json")
    try:
        if _what == "secret":
            os.symlink(SECRET, _p)
        elif _what == "zero":
            os.symlink("/dev/zero", _p)
        elif _what == "fifo":
            os.mkfifo(_p)
    except OSError:
        pass


def rmsnorm(x, weight, out, eps):
    _ref(x, weight, out, eps)
