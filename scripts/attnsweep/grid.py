"""What the sweep measures: launch configs, decode shapes and one result row each.

Pure data and parsing (no torch), so the CLI, the precompile workers (which unpickle Config)
and the renderer share one definition."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

GRID = {"block_n": (16, 32, 64, 128), "warps": (2, 4, 8), "stages": (1, 2, 3, 4), "splits": (1, 2, 4, 0)}
# --triton-attention-num-kv-splits, server_args.py:775 (8 on CUDA; the arena does not set it): the
# backend's max_kv_splits, attn_logits.shape[2] and the largest hint
SGLANG_MAX_KV_SPLITS = 8
H200_SMS = 132  # device_core_count when no GPU answers (cacheon_subnet.slots.defs.attention.H200_SMS)
CONTROL = "control-wrong"


@dataclass(frozen=True)
class Config:
    block_n: int
    warps: int
    stages: int
    splits: int  # 0: SGLang's per-request hint (the example's default); k: k splits for every request

    @property
    def name(self) -> str:
        return f"bn{self.block_n}-w{self.warps}-s{self.stages}-" + ("hint" if self.splits <= 0 else f"sp{self.splits}")

    @classmethod
    def parse(cls, text: str) -> Config:
        """bn32-w4-s3-hint / bn64-w8-s2-sp2"""
        try:
            bn, w, s, sp = text.strip().split("-")
            assert bn.startswith("bn") and w.startswith("w") and s.startswith("s")
            splits = 0 if sp in ("hint", "sgl", "sp0") else int(sp.removeprefix("sp"))
            return cls(int(bn[2:]), int(w[1:]), int(s[1:]), splits)
        except (AssertionError, ValueError):
            raise SystemExit(f"bad config {text!r}: want bnN-wW-sS-(hint|spK), e.g. bn32-w4-s3-hint") from None


@dataclass(frozen=True)
class Shape:
    batch: int
    ctx: int

    @property
    def label(self) -> str:
        return f"bs{self.batch}-ctx{self.ctx}"


@dataclass
class Row:
    """One config at one shape; mutable because it is filled in as it is checked and timed,
    then stored as asdict(row) (the JSON's row keys are these fields)."""

    shape: str
    config: str
    block_n: int | None = None
    warps: int | None = None
    stages: int | None = None
    splits: int | None = None
    default: bool = False  # the example's own launch config at this shape
    status: str = "skipped"  # ok | wrong | error | skipped
    detail: str = ""
    us: float | None = None
    stock_us: float | None = None  # the paired stock median (same reps, interleaved)
    speedup: float | None = None
    gbps: float | None = None
    pct_copy: float | None = None
    rel_stderr: float | None = None
    max_abs_vs_stock: float | None = None
    max_abs_vs_ref: float | None = None
    rel_l2_vs_ref: float | None = None


def grid_configs(args: argparse.Namespace) -> list[Config]:
    if args.configs:
        return [Config.parse(x) for x in args.configs.split(",") if x.strip()]
    ints = lambda text: tuple(int(x) for x in text.split(","))  # noqa: E731
    out = [
        Config(bn, w, s, sp)
        for bn in ints(args.block_n)
        for w in ints(args.warps)
        for s in ints(args.stages)
        for sp in ints(args.splits)
    ]
    return out


def default_shapes(cfg: Any, arena: Any) -> list[Shape]:
    """The window's batch at the mean decode context, the next three captured batches below it
    at that context, the window's batch at its shortest and longest context."""
    w = cfg.workload
    window = next((n for k, n in arena.window if k == "decode"), arena.decode_batches[-1])
    ctx = arena.decode_context or w.input_len
    below = [b for b in sorted(arena.decode_batches, reverse=True) if b < window][:3]
    out = [Shape(window, ctx)] + [Shape(b, ctx) for b in below]
    out += [Shape(window, c) for c in (w.input_len, w.input_len + w.output_len) if c != ctx]
    return list(dict.fromkeys(out))


def parse_shapes(text: str) -> list[Shape]:
    out = []
    for part in text.split(","):
        try:
            b, c = part.lower().strip().split("x")
            out.append(Shape(int(b), int(c)))
        except ValueError:
            raise SystemExit(f"bad shape {part!r}: want BSxCTX, e.g. 256x1088") from None
    return out
