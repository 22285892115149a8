#!/usr/bin/env python3
"""Time one verify frame through the host<->worker wire over a pipe: `send` to tensors decoded
on the other side, for the attention K/V pool of the dense arena's bs 256 (1.43 GB) by default.
`--module FILE` times another copy of verify/wire.py (e.g. an older commit's, via `git show`).
Recorded in docs/benchmarks.md (session 10).

    python scripts/wire_bench.py [--rows 348161] [--repeats 2] [--module /tmp/wire_old.py]
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


def one_frame(wire: Any, tensors: dict[str, Any]) -> float:
    import torch

    r, w = os.pipe()
    got: dict[str, Any] = {}

    def reader() -> None:
        got["tensors"] = wire.recv(r)[1]
        got["done"] = time.perf_counter()

    t = threading.Thread(target=reader)
    t.start()
    start = time.perf_counter()
    try:
        wire.send(w, {"type": "call"}, tensors)
        t.join()
    finally:
        os.close(r)
        os.close(w)
    if not all(torch.equal(got["tensors"][k], v) for k, v in tensors.items()):
        raise SystemExit("the frame did not round-trip")
    return got["done"] - start


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=348161, help="K/V pool rows (8 kv heads x 128, bf16, K and V)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--module", help="another verify/wire.py to time")
    a = ap.parse_args(argv)
    g = torch.Generator().manual_seed(0)
    tensors = {"k_buffer": torch.randn((a.rows, 8, 128), generator=g).to(torch.bfloat16),
               "v_buffer": torch.randn((a.rows, 8, 128), generator=g).to(torch.bfloat16),
               "q": torch.randn((256, 16, 128), generator=g).to(torch.bfloat16)}
    size = sum(t.numel() * t.element_size() for t in tensors.values()) / 1e9
    wire = _wire(a.module)
    times = [one_frame(wire, tensors) for _ in range(a.repeats)]
    print(f"{a.module or 'cacheon_subnet/verify/wire.py'}: {size:.2f} GB frame, send to decoded: "
          + ", ".join(f"{x:.2f} s" for x in times))
    return 0


if __name__ == "__main__":
    sys.exit(main())
