#!/usr/bin/env python3
"""Launch-configuration sweep of examples/attention.decode against stock SGLang at the arena's decode shapes.

    python scripts/sweep_attention_decode.py --config configs/arena/dense.toml --out attnsweep.json
    python scripts/sweep_attention_decode.py --shapes 256x1088,256x1152 --block-n 32,64 --warps 4 --stages 2,3
    python scripts/sweep_attention_decode.py --configs bn32-w4-s3-hint,bn64-w8-s2-sp2 --control

A development tool: it runs the repo's own example kernel and stock SGLang in this process, outside
the sandbox, and decides nothing (the arena decides crowns; docs/benchmarks.md records what was
measured). Why it exists: in the dense arena decode attention is 87 % of the decode step's GPU time
(bs 256, ~1024-1152 tokens a request), and the example was only ever timed at bs 32 / ctx 4096.

What it does, per shape BSxCTX (default: the arena's window batch at its mean decode context, the
next three captured batches below it at that context, and the window batch at the shortest and the
longest context of the window; the first shape is "the window shape"):
  * inputs: one K/V pool, q and paging made by the slot's own case generator
    (cacheon_subnet.slots.defs.attention via bench_timing.build_args) at the largest shape; each
    shape then pages it as the arena does: every request holds exactly CTX tokens (all prompts of a
    window start together; --lengths slot keeps the generator's varied lengths), at pool slots drawn
    by a random permutation (slot 0 is SGLang's padding slot), and num_kv_splits as SGLang's
    TritonAttnBackend sets it (attnsweep.inputs.sglang_split_hint);
  * stock: decode_attention_fwd exactly as TritonAttnBackend.forward_decode calls it
    (triton_backend.py:1383-1402: k/v scale 1.0, use_pdl = is_arch_support_pdl());
  * the example under each (BLOCK_N, num_warps, num_stages, splits) of the grid, injected by
    replacing its `_launch_config` (the shipped defaults stay as they are); splits "hint" is the
    example's default (SGLang's per-request hint), spK forces K splits per request;
  * correctness: every config's output against stock (max |d|) and against the slot's fp32
    reference under the slot's tolerance; a config outside it is marked "wrong" and never "best".
    --control adds one row that is wrong on purpose (each request's last token replaced by its
    first token's row) to show the check bites at these shapes;
  * timing (CUDA only): each side captured in a CUDA graph (as the arena replays decode), the L2
    flushed before every replay, stock and the config interleaved in alternating order, median of
    --reps; GB/s counts K and V rows, their int64 slot ids, q and o (not the split scratch), and %
    is of a measured device-to-device copy (bench_timing.measure_copy_bandwidth).
The full grid is timed at the window shape only; the other shapes time the --top best correct
configs plus the example's default. --budget-s stops early (what was measured is reported). Before
timing, --jobs worker processes compile every config once on a tiny input of the same head shape,
filling Triton's cache (compilation, ~1 s a config, would otherwise dominate).

The pieces live in scripts/attnsweep/ (one module each: grid, inputs, sides, check, timing,
precompile, sweep, render); this file is the command line. --render-json FILE prints a saved --out
JSON as the same text, running nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# run by path from any cwd: the repo root for cacheon_subnet/arena, scripts/ for attnsweep (Python puts the
# script's directory first unless -P / PYTHONSAFEPATH); spawned precompile workers inherit this sys.path
for _p in (REPO, HERE):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from attnsweep.grid import GRID, SGLANG_MAX_KV_SPLITS  # noqa: E402
from attnsweep.render import finite, render  # noqa: E402
from attnsweep.sweep import run  # noqa: E402

DEFAULT_CONFIG = REPO / "configs" / "arena" / "dense.toml"


def parser() -> argparse.ArgumentParser:
    """The command line (flags and defaults are what scripts/device_trust.sh and docs rely on)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(DEFAULT_CONFIG), help="arena config (shapes, profile, dtype)")
    ap.add_argument("--shapes", default="", help="BSxCTX,... (first: the window shape); default: from the arena")
    ap.add_argument("--block-n", default=",".join(map(str, GRID["block_n"])))
    ap.add_argument("--warps", default=",".join(map(str, GRID["warps"])))
    ap.add_argument("--stages", default=",".join(map(str, GRID["stages"])))
    ap.add_argument("--splits", default=",".join(map(str, GRID["splits"])), help="0: SGLang's hint (the default)")
    ap.add_argument("--configs", default="", help="explicit list bnN-wW-sS-(hint|spK),... instead of the grid")
    ap.add_argument("--top", type=int, default=5, help="configs timed at the other shapes (best at the window)")
    ap.add_argument("--reps", type=int, default=100, help="timed replays per side and config")
    ap.add_argument("--budget-s", type=float, default=330.0, help="stop starting new measurements after this")
    ap.add_argument(
        "--jobs",
        type=int,
        default=max(1, min(16, (os.cpu_count() or 2) - 2)),
        help="compile processes (0: compile in the timed process)",
    )
    ap.add_argument("--max-splits", type=int, default=SGLANG_MAX_KV_SPLITS, help="SGLang's max_kv_splits")
    ap.add_argument(
        "--lengths",
        choices=("arena", "slot"),
        default="arena",
        help="arena: every request at CTX tokens; slot: the slot generator's lengths in [1, CTX]",
    )
    ap.add_argument("--layout", choices=("permuted", "contiguous"), default="permuted", help="pool slots of the tokens")
    ap.add_argument("--dtype", default="", help="default: the arena model's dtype")
    ap.add_argument("--device", choices=("auto", "cpu"), default="auto")
    ap.add_argument("--control", action="store_true", help="add a row that is wrong on purpose (the check must catch it)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rows", type=int, default=25, help="window rows printed (0: all; the JSON has all)")
    ap.add_argument("--out", default="", help="JSON with every row")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument(
        "--render-json", default="", metavar="FILE", help="print a saved --out JSON as text (runs nothing; --rows applies)"
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run the sweep, print its text, write --out; or only re-render a saved document."""
    args = parser().parse_args(argv)
    if args.render_json:
        print(render(json.loads(Path(args.render_json).read_text()), args.rows), flush=True)
        return 0
    doc = run(args)
    print(render(doc, args.rows), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(finite(doc), indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
