"""The verify worker's process start, everything before the audit guard is armed: its arguments,
the rank group's rendezvous, the stock kernels bench preloads (JIT builds and their dlopen are the
validator's, never the contribution's), and where bundle code may write once the guard is on.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from typing import Any

import torch

from cacheon_subnet.env import SANDBOX_MODE, SANDBOX_SCRATCH
from cacheon_subnet.verify import protocol as P
from cacheon_subnet.verify import wire


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m cacheon_subnet.verify.worker")
    ap.add_argument("--fd", type=int, required=True)
    ap.add_argument("--bundle-root", required=True)
    ap.add_argument("--package", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world-size", type=int, default=1)
    ap.add_argument("--init-file", help="file:// rendezvous of the rank group (world size > 1)")
    ap.add_argument("--pg-timeout", type=float, default=600.0)
    ap.add_argument("--native-root", help="dir of the sealed CUDA artifacts the host built (read-only)")
    ap.add_argument("--native", action="append", default=[], help="OPKEY=DIGEST: a CUDA op's artifact")
    ap.add_argument("--preload-stock", default="", help="bench: slots whose stock kernels load before the guard")
    ap.add_argument(
        "--preload-cases", default="", help="bench: JSON [{slot, dtype, case}] each stock kernel runs once before the guard"
    )
    return ap.parse_args(argv)


def device_of(a: argparse.Namespace) -> str:
    """This process's device (one GPU a rank, all visible to every rank for NCCL P2P), initialised."""
    device = str(a.device)
    if device == "cuda" and a.world_size > 1:
        device = f"cuda:{a.rank}"
    if device.startswith("cuda"):
        torch.cuda.init()
        torch.cuda.set_device(torch.device(device if ":" in device else "cuda:0"))
    return device


def preload(a: argparse.Namespace, device: str) -> None:
    """Triton's import, and bench's stock kernels loaded and run once, while nothing is armed."""
    try:
        import triton  # noqa: F401 - imported before the guard so its own setup is not audited
    except ImportError:
        pass
    if a.preload_stock:  # memoized: run_bench_request gets these
        from seams.stock import stock_kernel

        for slot in filter(None, a.preload_stock.split(",")):
            stock_kernel(slot)
    if a.preload_cases:  # JIT builds (nvcc) and their dlopen happen on first call
        from cacheon_subnet.bench_timing import warm_stock

        calls = json.loads(a.preload_cases)  # a frame per call done: the host shows it (a first call may build minutes)

        def done(i: int) -> None:
            wire.send(a.fd, P.reply(P.Progress("warm", i, len(calls))))

        for why in warm_stock(calls, torch.device(device), on_done=done):
            print(f"bench: stock warm-up: {why}", file=sys.stderr, flush=True)


def guard_writable(env: dict[str, str], cwd: str) -> list[str]:
    """Where bundle code may write: its scratch, the TVM cache, and TMPDIR (Triton builds its
    launcher there): behind the wall /tmp is the child's own tmpfs; in weak mode TMPDIR is the
    child's private short dir (sandbox.short_tmpdir), never the shared /tmp."""
    writable = [env.get(SANDBOX_SCRATCH.name, cwd)] + [env[k] for k in ("TVM_FFI_CACHE_DIR",) if env.get(k)]
    mode = SANDBOX_MODE.get(env)
    if mode == "wall":
        writable.append(env.get("TMPDIR") or "/tmp")
    elif mode == "weak" and env.get("TMPDIR") and env["TMPDIR"] not in ("/tmp", "/var/tmp"):
        writable.append(env["TMPDIR"])
    return writable


def join_group(a: argparse.Namespace, device: str) -> Any:
    """Rendezvous through a file in the shared scratch dir (no TCP store; inside the rank group's
    own network namespace, only loopback exists). Returns a fresh group over all ranks, as
    SGLang hands kernels a `new_group` (its `device_group`), not the default group."""
    import torch.distributed as dist

    if not a.init_file:
        raise SystemExit("--init-file is required when --world-size > 1")
    backend = "nccl" if device.startswith("cuda") else "gloo"
    timeout = datetime.timedelta(seconds=a.pg_timeout)
    dist.init_process_group(
        backend, init_method=f"file://{a.init_file}", rank=a.rank, world_size=a.world_size, timeout=timeout
    )
    return dist.new_group(ranks=list(range(a.world_size)), backend=backend, timeout=timeout)
