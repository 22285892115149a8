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


def vs_stock(x: float | None) -> str:
    """×ratio in words, so a 1000× slower kernel never reads like a pass."""
    if x is None or not x > 0:
        return "× ? vs stock"
    if x >= 1:
        return f"×{x:.4f} vs stock ({(x - 1):.1%} faster)"
    return f"×{x:.4f} vs stock ({1 / x:.1f}× slower)" if x < 0.5 else f"×{x:.4f} vs stock ({(1 - x):.1%} slower)"


def link(cid: str) -> str:
    return "/contributions/" + quote(cid, safe="")


def _render(name: str, **ctx: Any) -> str:
    css = Markup((TEMPLATES / "style.css").read_text())  # ours, not user input: the one unescaped insert
    return _ENV.get_template(name).render(css=css, ago=ago, link=link, vs_stock=vs_stock, geometry=plots.geometry, **ctx)


def index(crowns: dict[str, Any], page: dict[str, Any], schema: str) -> str:
    return _render("index.html", title="Cacheon leaderboard", crowns=crowns, page=page, schema=schema)


def detail(doc: dict[str, Any], schema: str) -> str:
    return _render("detail.html", title=f"Contribution {doc['contribution']['id'][:16]}", doc=doc, schema=schema)
