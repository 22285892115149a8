#!/usr/bin/env python3
"""Time one verify frame through the host<->worker wire over a pipe: `send` to tensors decoded
on the other side, for the attention K/V pool of the dense arena's bs 256 (1.43 GB) by default.
`--module FILE` times another copy of verify/wire.py (e.g. an older commit's, via `git show`);
`--sealed` sends it as a sealed memfd (verify/shm.py, session 13). Recorded in docs/benchmarks.md
(sessions 10 and 13).

    python scripts/wire_bench.py [--rows 348161] [--repeats 2] [--module /tmp/wire_old.py] [--sealed]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _wire(path: str | None) -> Any:
    if not path:
        from cacheon_subnet.verify import wire

        return wire
    spec = importlib.util.spec_from_file_location("wire_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_frame(wire: Any, tensors: dict[str, Any], sealed: bool = False) -> tuple[float, float]:
    """(send -> tensors on the other side, send -> the worker's private copy of them, as its
    materialise makes on CPU). sealed: a verify/shm.py Parcel over a unix socket (its memfd is
    built before the clock starts: verify builds it on a drawing thread, ahead of the call)."""
    import socket

    import torch

    from cacheon_subnet.tensor_views import rebase

    parcel = None
    if sealed:
        from cacheon_subnet.verify.shm import Parcel

        parcel = Parcel(tensors)
        a, b = socket.socketpair()
        w, r = a.fileno(), b.fileno()
    else:
        r, w = os.pipe()
    got: dict[str, Any] = {}

    def reader() -> None:
        got["tensors"] = wire.recv(r, allow_shm=True)[1] if sealed else wire.recv(r)[1]
        got["done"] = time.perf_counter()
        got["copy"] = rebase(got["tensors"], "cpu")
        got["copied"] = time.perf_counter()

    t = threading.Thread(target=reader)
    t.start()
    start = time.perf_counter()
    try:
        wire.send(w, {"type": "call"}, parcel.frame() if parcel is not None else tensors)
        t.join()
    finally:
        if sealed:
            a.close()
            b.close()
            parcel.close()
        else:
            os.close(r)
            os.close(w)
    if not all(torch.equal(got["copy"][k], v) for k, v in tensors.items()):
        raise SystemExit("the frame did not round-trip")
    return got["done"] - start, got["copied"] - start


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=348161, help="K/V pool rows (8 kv heads x 128, bf16, K and V)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--module", help="another verify/wire.py to time")
    ap.add_argument("--sealed", action="store_true", help="the frame as a sealed memfd (verify/shm.py), not bytes")
    a = ap.parse_args(argv)
    g = torch.Generator().manual_seed(0)
    tensors = {
        "k_buffer": torch.randn((a.rows, 8, 128), generator=g).to(torch.bfloat16),
        "v_buffer": torch.randn((a.rows, 8, 128), generator=g).to(torch.bfloat16),
        "q": torch.randn((256, 16, 128), generator=g).to(torch.bfloat16),
    }
    size = sum(t.numel() * t.element_size() for t in tensors.values()) / 1e9
    wire = _wire(a.module)
    times = [one_frame(wire, tensors, a.sealed) for _ in range(a.repeats)]
    how = "sealed memfd" if a.sealed else "bytes"
    print(
        f"{a.module or 'cacheon_subnet/verify/wire.py'} ({how}): {size:.2f} GB frame, send to decoded / to the "
        "worker's copy: " + ", ".join(f"{x:.2f} / {y:.2f} s" for x, y in times)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
