"""The text a device log keeps: the summary first, then the tables. It reads only the document
(JSON types), so a saved --out JSON renders to the same text (--render-json)."""

from __future__ import annotations

import math
from typing import Any


def _f(x: Any, fmt: str, width: int) -> str:
    """A right-aligned cell; "-" where nothing was measured."""
    return format(x, fmt).rjust(width) if x is not None else "-".rjust(width)


def render(doc: dict[str, Any], limit: int) -> str:
    """The summary first (shapes, stock, best per shape: what a truncated device log must keep),
    then the window shape's rows by speedup, what failed, and the other shapes' rows."""
    lines = [
        f"attention.decode sweep: {doc['device']}, {doc['profile']} {doc['dtype']}, timing: {doc['timing']}",
        f"stock: {doc['stock']}",
    ]
    if doc.get("copy_gbps"):
        lines.append(f"measured copy bandwidth {doc['copy_gbps']:,.0f} GB/s = 100 %")
    for s in doc["shapes"]:
        st = s["stock"] or {}
        lines.append(
            f"  {s['label']}: {s['tokens']} tokens, {s['bytes'] / 1e9:.3f} GB, SGLang hint {s['hint']} "
            f"({s['hint_vs_sglang']}); stock "
            + (f"{st['us']:.1f} µs {st['pct_copy']:.1f} %" if st.get("us") else st.get("status", "n/a"))
        )
    lines.append("best per shape (correct configs only, lowest µs; the example's default for comparison):")
    for s in doc["shapes"]:
        b = doc["best"].get(s["label"])
        d = next((r for r in doc["rows"] if r["shape"] == s["label"] and r["default"]), None)
        text = "none timed"
        if b:
            text = f"{b['config']:20} {b['us']:8.1f} µs" + (f" {b['speedup']:.3f}x vs stock" if b["speedup"] else "")
        if d and d["us"]:
            text += f"   (default {d['config']} {d['us']:.1f} µs" + (f" {d['speedup']:.3f}x)" if d["speedup"] else ")")
        lines.append(f"  {s['label']:16} {text}")
    if doc["stopped"]:
        lines.append(f"stopped early: {doc['stopped']}")
    win = [r for r in doc["rows"] if r["shape"] == doc["window"]]
    win.sort(key=lambda r: (r["status"] == "error", -(r["speedup"] or 0.0), r["us"] or 0.0))
    hdr = (
        f"{'config':20} {'status':6} {'µs':>8} {'stock µs':>9} {'speedup':>8} {'GB/s':>7} {'%copy':>6} "
        f"{'±':>6} {'max|d| stock':>12} {'rel_l2 ref':>10}"
    )
    lines += ["", f"window shape {doc['window']} (sorted by speedup; * = the example's default)", hdr]
    lines += [_row_line(r) for r in (win[:limit] if limit else win)]
    if limit and len(win) > limit:
        lines.append(f"... {len(win) - limit} more rows in the JSON")
    bad = [r for r in doc["rows"] if r["status"] in ("wrong", "error")]
    for r in bad[:10]:
        lines.append(f"{r['status'].upper()}: {r['shape']} {r['config']}: {r['detail']}")
    if len(bad) > 10:
        lines.append(f"... {len(bad) - 10} more wrong or failed rows in the JSON")
    for s in doc["shapes"][1:]:
        rows = sorted((r for r in doc["rows"] if r["shape"] == s["label"]), key=lambda r: -(r["speedup"] or 0.0))
        lines += ["", f"shape {s['label']}", hdr] + [_row_line(r) for r in rows]
    lines.append(f"({doc['duration_s']} s)")
    return "\n".join(lines)


def _row_line(r: dict[str, Any]) -> str:
    """One table row (a JSON row dict), the example's default marked *."""
    name = r["config"] + ("*" if r["default"] else "")
    return (
        f"{name:20} {r['status']:6} {_f(r['us'], '.1f', 8)} {_f(r['stock_us'], '.1f', 9)} "
        f"{_f(r['speedup'], '.3f', 7)}x {_f(r['gbps'], ',.0f', 7)} {_f(r['pct_copy'], '.1f', 6)} "
        f"{_f(100 * r['rel_stderr'] if r['rel_stderr'] is not None else None, '.2f', 5)}% "
        f"{_f(r['max_abs_vs_stock'], '.2e', 12)} {_f(r['rel_l2_vs_ref'], '.2e', 10)}"
    )


def finite(x: Any) -> Any:
    """NaN / inf (a NaN output's max |d|) as null: the JSON stays standard."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x
