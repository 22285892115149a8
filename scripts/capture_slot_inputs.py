#!/usr/bin/env python3
"""Write an arena's slot-input fixture (configs/arena/fixtures/<arena>.json; issue 34 item 1) from
what a pristine engine of that arena measured.

    # on the H200: profile the pristine engine (scripts/profile_decode.py), then write the fixture
    python scripts/profile_decode.py --config configs/arena/moe.toml --out /tmp/moe-profile.json
    python scripts/capture_slot_inputs.py --config configs/arena/moe.toml --profile /tmp/moe-profile.json \
        --source docs/results/<date>/h200-moe-profile.json
    # anywhere (no GPU): the same from a committed profile, printed instead of written
    python scripts/capture_slot_inputs.py --config configs/arena/dense.toml \
        --profile docs/results/2026-12-02/h200-s7-profile.json --dry-run

From the profile: each slot's stock GPU time a call, calls a step and share of the decode step and
of prefill, and the steps' GPU time (the decode stage is at the window's batch; the prefill stage
at its largest forward). Argument statistics (shapes/strides/value ranges, MoE tokens per expert,
attention KV lengths) are summarised by `summarize_args`/`routing_of`/`kv_lengths_of` from
argument sets a recorder hands them; the observe-only engine hook that records them in the
scheduler is not built yet (docs/benchmarks.md "Next lease"), so a fixture written here has none
and bench draws those slots synthetically, saying so.

A development tool: it runs no contribution code and decides nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cacheon_subnet.records import slot_inputs as si  # noqa: E402

PROFILE_STAGES = {"DECODE": "decode", "EXTEND": "prefill"}
ATTENTION_STAGE1 = "_fwd_grouped_kernel_stage1"  # counted as "other" by profiles older than its pattern


def stage_uses(doc: Mapping[str, Any], source: str, tokens: Mapping[str, int]) -> dict[str, dict[str, si.StageUse]]:
    """slot -> stage -> its figures, from a scripts/profile_decode.py document. tokens: the stage's size."""
    out: dict[str, dict[str, si.StageUse]] = {}
    for st in doc.get("stages") or []:
        stage = PROFILE_STAGES.get(st.get("stage"))
        steps, total = int(st.get("steps") or 0), float(st.get("kernel_us") or 0)
        if stage is None or steps <= 0 or total <= 0:
            continue
        stray = dict(st.get("top_other") or []).get(ATTENTION_STAGE1, 0.0) if stage == "decode" else 0.0
        for row in st.get("shares") or []:
            slot, calls = row["category"], int(row["calls"])
            if " " in slot or slot == "other" or calls <= 0:  # "gemm (no slot)": not a slot
                continue
            us = float(row["us"]) + (stray if slot == "attention.decode" else 0.0)
            said = f"{source}: {st['stage']} {slot} {us:.1f} us / {calls} calls / {steps} steps of {total:.1f} us"
            out.setdefault(slot, {})[stage] = si.StageUse(
                tokens[stage],
                si.Figure(round(us / calls, 3), said),
                si.Figure(calls / steps, said),
                si.Figure(round(us / total, 5), said),
            )
    return out


def step_figures(doc: Mapping[str, Any], source: str) -> dict[str, si.Figure]:
    out = {}
    for st in doc.get("stages") or []:
        stage = PROFILE_STAGES.get(st.get("stage"))
        if stage is not None and int(st.get("steps") or 0) > 0:
            us = float(st["kernel_us"]) / int(st["steps"])
            out[stage] = si.Figure(round(us, 1), f"{source}: {st['stage']} kernel_us / {st['steps']} steps")
    return out


def summarize_args(tensors: Mapping[str, Any]) -> tuple[si.ArgStats, ...]:
    """Shape, stride, dtype and value range of each tensor argument of one recorded call."""
    import torch

    out = []
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            continue
        lo = hi = mean = std = None
        if t.numel():
            f = t.detach().float()
            lo, hi, mean = float(f.min()), float(f.max()), float(f.mean())
            std = float(f.std()) if t.numel() > 1 else 0.0
        dtype = str(t.dtype).removeprefix("torch.")
        out.append(si.ArgStats(name, tuple(t.shape), tuple(t.stride()), dtype, lo, hi, mean, std))
    return tuple(out)


def routing_of(calls: Sequence[Any], experts: int, source: str) -> si.Routing:
    """Tokens per expert over recorded `topk_ids` [T, K] of calls at one size."""
    import torch

    hist = torch.zeros(experts, dtype=torch.int64)
    for ids in calls:
        hist += torch.bincount(ids.flatten().long().cpu(), minlength=experts)
    T, K = calls[0].shape
    return si.Routing(int(T), int(K), len(calls), tuple(int(n) for n in hist.tolist()), source)


def kv_lengths_of(calls: Sequence[Any], source: str) -> si.KvLengths:
    """KV length per request from recorded `kv_indptr` [B + 1] of calls at one size."""
    lengths: list[int] = []
    for ptr in calls:
        p = ptr.long().cpu()
        lengths += [int(n) for n in (p[1:] - p[:-1]).tolist()]
    return si.KvLengths(len(calls), tuple(lengths), source)


def build(config: str, profile: Mapping[str, Any], source: str, card: str) -> si.ArenaFixture:
    from arena.config import load_config
    from cacheon_subnet.verify.shapes import from_arena_config

    cfg = load_config(config)
    window = dict(from_arena_config(cfg).window)
    tokens = {"decode": window.get("decode", 0) or 1, "prefill": window.get("prefill", 0) or 1}
    uses = stage_uses(profile, source, tokens)
    steps = step_figures(profile, source)
    slots = {s: si.SlotInputs((), decode=u.get("decode"), prefill=u.get("prefill")) for s, u in sorted(uses.items())}
    return si.ArenaFixture(
        si.SCHEMA,
        cfg.name,
        str(Path(config).resolve().relative_to(REPO)) if Path(config).resolve().is_relative_to(REPO) else config,
        card,
        f"captured by scripts/capture_slot_inputs.py from {source} (a pristine engine's profile: decode at bs "
        f"{tokens['decode']}, prefill at {tokens['prefill']} tokens); no argument statistics yet",
        slots,
        steps.get("decode"),
        steps.get("prefill"),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="the arena config (configs/arena/*.toml)")
    ap.add_argument("--profile", required=True, help="scripts/profile_decode.py's JSON of a pristine engine of it")
    ap.add_argument("--source", help="what the fixture cites for the profile (default: --profile's path)")
    ap.add_argument("--card", default="H200", help="the GPU the profile was measured on, as configs/cards.toml names it")
    ap.add_argument("--out", help="default: configs/arena/fixtures/<arena>.json")
    ap.add_argument("--dry-run", action="store_true", help="print the fixture, write nothing")
    a = ap.parse_args(argv)
    try:
        doc = json.loads(Path(a.profile).read_text())
    except (OSError, ValueError) as e:
        print(f"capture: cannot read the profile {a.profile}: {e}", file=sys.stderr)
        return 2
    fx = build(a.config, doc, a.source or a.profile, a.card)
    text = si.dump(fx)
    si.parse(text, "the fixture just built")  # what is written must read back
    if a.dry_run:
        print(text, end="")
        return 0
    out = Path(a.out) if a.out else si.path_for(fx.arena)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"capture: wrote {out} ({len(fx.slots)} slots)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
