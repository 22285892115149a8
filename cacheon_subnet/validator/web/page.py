"""Server-rendered HTML for the leaderboard: jinja2 with autoescaping on for every template, so a
hostile string (a miner's hotkey, a reason quoting a miner's exception) is always text, never
markup. No script, no external asset: the page and its SVG plots render offline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from markupsafe import Markup

from cacheon_subnet.validator.web import plots
from cacheon_subnet.words import state_name, verdict_tone

TEMPLATES = Path(__file__).with_name("templates")
_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    autoescape=True,  # .svg too: every template
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def ago(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    return (
        f"{s}s ago"
        if s < 120
        else f"{s // 60}m ago"
        if s < 7200
        else f"{s // 3600}h ago"
        if s < 172800
        else f"{s // 86400}d ago"
    )


def vs_stock(x: float | None, label: str | None = None) -> str:
    """×ratio in words, so a 1000× slower kernel never reads like a pass; against what it was
    timed against (the CPU arena's `cpu-timing` rows: the fp32 reference, not stock)."""
    base = "vs stock" if not (label or "").startswith("cpu") else "vs the fp32 reference"
    if x is None or not x > 0:
        return f"× ? {base}"
    if x >= 1:
        return f"×{x:.4f} {base} ({(x - 1):.1%} faster)"
    return f"×{x:.4f} {base} ({1 / x:.1f}× slower)" if x < 0.5 else f"×{x:.4f} {base} ({(1 - x):.1%} slower)"


HOTKEY_CHARS = 48  # an SS58 address


def mono(text: str | None) -> str:
    """The CSS class of a hotkey cell. Whole words (`break-word`): a table column cannot be
    squeezed below an SS58 hotkey, which broke mid-word on the page under `overflow-wrap:
    anywhere`. A longer one (a local chain takes any name) may break anywhere: it wraps inside its
    column instead of pushing the table past the window."""
    return "mono long" if len(text or "") > HOTKEY_CHARS else "mono"


def link(cid: str) -> str:
    return "/contributions/" + quote(cid, safe="")


def _render(name: str, **ctx: Any) -> str:
    css = Markup((TEMPLATES / "style.css").read_text())  # ours, not user input: the one unescaped insert
    return _ENV.get_template(name).render(
        css=css,
        ago=ago,
        link=link,
        vs_stock=vs_stock,
        tone=verdict_tone,
        mono=mono,
        state_name=state_name,
        geometry=plots.geometry,
        **ctx,
    )


def index(crowns: dict[str, Any], page: dict[str, Any], schema: str) -> str:
    held = {c["target"]: c for c in crowns["crowns"]}
    slots = [(s, held.get(s)) for s in crowns.get("slots") or sorted(held)]  # every slot, crowned or not
    return _render("index.html", title="Cacheon leaderboard", crowns=crowns, page=page, slots=slots, schema=schema)


def detail(doc: dict[str, Any], schema: str) -> str:
    return _render("detail.html", title=f"Contribution {doc['contribution']['id'][:16]}", doc=doc, schema=schema)
