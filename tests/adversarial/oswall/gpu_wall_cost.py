"""GPU box: a CUDA child behind the wall (gpu=True) vs weak mode: start-to-exit and a bf16 matmul (run by gpu_wall_check.sh)."""
import os
import subprocess
import sys
import time
from pathlib import Path

from cacheon_subnet import sandbox

CODE = ("import os, time, torch; t=time.perf_counter(); x=torch.randn(4096,4096,device='cuda',dtype=torch.bfloat16);"
        "torch.cuda.synchronize(); y=x@x; torch.cuda.synchronize(); "
        "print('CHILD', os.getuid(), torch.cuda.get_device_name(), round(float(y.float().abs().mean()),3), "
        "'init_s', round(time.perf_counter()-t,3), flush=True)")


def once(weak):
    if weak:
        os.environ["CACHEON_SANDBOX"] = "weak"
    else:
        os.environ.pop("CACHEON_SANDBOX", None)
    t0 = time.perf_counter()
    p = sandbox.launch([sys.executable, "-c", CODE], scratch=Path("/tmp/cacheon-gpu-cost"),
                       policy=sandbox.SandboxPolicy(gpu=True, cpu_seconds=None))
    out, _ = p.communicate(timeout=300)
    sandbox.stop(p)
    return time.perf_counter() - t0, out.decode()[-400:]


def pass_only(weak, n=5):
    if weak:
        os.environ["CACHEON_SANDBOX"] = "weak"
    else:
        os.environ.pop("CACHEON_SANDBOX", None)
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        p = sandbox.launch([sys.executable, "-I", "-S", "-c", "pass"], scratch=Path("/tmp/cacheon-gpu-cost"),
                           policy=sandbox.SandboxPolicy(gpu=True), stdout=subprocess.DEVNULL)
        p.wait(60)
        sandbox.stop(p)
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[n // 2]


for weak in (False, True, False, True):
    dt, out = once(weak)
    print("weak" if weak else "wall", round(dt, 3), out.strip().splitlines()[-1] if out.strip() else out)
print("pass-only median wall", round(pass_only(False) * 1000), "ms; weak", round(pass_only(True) * 1000), "ms")
