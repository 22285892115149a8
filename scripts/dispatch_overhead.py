"""Host-side cost of one seam dispatch (Python + custom-op call), per route, with a no-op kernel.

The arena's role-bias control read the candidate route 0.3–1.3 % slower than stock on the H200
(docs/benchmarks.md). With CUDA graphs, decode replays without Python; eager prefill calls the
dispatch 57 times per forward in the dense arena, so its per-call cost is the suspect.

    python scripts/dispatch_overhead.py [--calls 20000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from cacheon_subnet.slots import get_slot  # noqa: E402
from cacheon_subnet.slots.custom_op import register_slot_op  # noqa: E402
from cacheon_subnet.slots.spec import dtype_of  # noqa: E402
from seams.dispatch import Candidate, Registry, guarded, run  # noqa: E402
from seams.receipts import Receipts  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=20000)
    a = ap.parse_args(argv)
    spec = get_slot("norm.rmsnorm")
    reg = Registry()
    reg.receipts = Receipts(tempfile.mkdtemp(prefix="cacheon-dispatch-"), "scheduler", 0)

    def noop(**kw: object) -> None:
        return None

    call = register_slot_op(spec, guarded(spec, noop, reg, None), "cacheon_dispatch_bench", "noop")
    reg.add(spec, Candidate(spec.id, "noop", "bench", tuple(dtype_of(d) for d in spec.dtypes), (), call))
    reg.enabled = True
    x = torch.randn(8, 1024, dtype=torch.bfloat16)
    w = torch.ones(1024, dtype=torch.bfloat16)
    out = {}
    for route in ("stock", "candidate"):
        reg.route = route
        for _ in range(500):
            run(spec.id, {"x": x, "weight": w}, {"eps": 1e-6}, reg)
        t = time.perf_counter()
        for _ in range(a.calls):
            run(spec.id, {"x": x, "weight": w}, {"eps": 1e-6}, reg)
        out[f"{route}_us_per_call"] = round((time.perf_counter() - t) / a.calls * 1e6, 2)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
