"""Server-rendered HTML for the leaderboard: jinja2 with autoescaping on for every template, so a
hostile string (a miner's hotkey, a reason quoting a miner's exception) is always text, never
markup. No script, no external asset: the page and its SVG plots render offline.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import jinja2
from markupsafe import Markup

from cacheon_subnet.validator.web import plots

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#111;background:#fff}
h1{font-size:1.4em;margin:0 0 .2em} h2{font-size:1.15em;margin:1.4em 0 .4em}
table{border-collapse:collapse;width:100%} th,td{border:1px solid #ccc;padding:3px 6px;vertical-align:top;text-align:left}
th{background:#f0f0f0} td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.reason{white-space:pre-wrap;overflow-wrap:anywhere;font-family:ui-monospace,monospace;font-size:12px}
.mono{font-family:ui-monospace,monospace;overflow-wrap:anywhere}
.PASS{color:#11700e;font-weight:600}.FAIL{color:#b00020;font-weight:600}.NO_DECISION{color:#8a6d00;font-weight:600}
.muted{color:#666} .stage{margin:.6em 0 1.2em} svg{max-width:100%;height:auto;border:1px solid #ddd}
"""

BASE = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1"><title>{{ title }}</title>
<style>{{ css }}</style></head><body>{% block body %}{% endblock %}
<p class="muted">cacheon validator leaderboard · API schema {{ schema }} · JSON: <a href="/api/crowns">/api/crowns</a>
<a href="/api/contributions">/api/contributions</a> <a href="/api/health">/api/health</a></p></body></html>"""

INDEX = """{% extends "base" %}{% block body %}
<h1>Cacheon leaderboard</h1>
<p class="muted">last chain sync: block {{ crowns.last_sync_block if crowns.last_sync_block is not none else "never" }}
· {{ page.total }} contributions</p>
<h2>Crowns</h2>
{% if crowns.crowns %}<table id="crowns"><tr><th>slot</th><th>holder</th><th>contribution</th><th>speedup vs stock</th>
<th>arena</th><th>crowned</th><th>age</th></tr>
{% for c in crowns.crowns %}<tr class="crown" data-slot="{{ c.target }}"><td class="mono">{{ c.target }}</td>
<td class="mono">{{ c.hotkey }}</td><td class="mono"><a href="{{ link(c.contribution_id) }}">{{ c.contribution_id[:16] }}</a></td>
<td class="num">{{ vs_stock(c.speedup_vs_stock) }}</td>
<td class="mono">{{ c.arena_id }}{% if c.label %} <span class="muted">({{ c.label }})</span>{% endif %}</td>
<td class="num">block {{ c.crowned_block }}</td><td class="num">{{ ago(c.age_s) }}{% if c.age_blocks is not none %}
· {{ c.age_blocks }} blocks{% endif %}</td></tr>
{% endfor %}</table>{% else %}<p id="no-crowns">No crowns yet: every slot's share burns to the owner.</p>{% endif %}
<h2>Contributions</h2>
<table id="contributions"><tr><th>contribution</th><th>hotkey</th><th>commit block</th><th>state</th><th>verdicts</th>
<th>reason</th></tr>
{% for c in page.contributions %}<tr class="contribution"><td class="mono"><a href="{{ link(c.id) }}">{{ c.id[:16] }}</a></td>
<td class="mono">{{ c.hotkey }}</td><td class="num">{{ c.commit_block }}</td><td>{{ c.state }}{% if c.rule %} ({{ c.rule }}){% endif %}</td>
<td>{% for e in c.evidence %}<div><span class="mono">{{ e.target }}</span> <span class="{{ e.verdict }}">{{ e.verdict }}</span>
{{ vs_stock(e.speedup_vs_stock) }}
{% if e.settled %}· {{ e.outcome }}{% else %}· unsettled{% endif %} <span class="muted">{{ e.label }}</span></div>
<div class="reason">{{ e.reason }}</div>{% if e.outcome_reason %}<div class="reason muted">{{ e.outcome_reason }}</div>{% endif %}
{% endfor %}</td><td class="reason">{{ c.reason }}</td></tr>
{% endfor %}</table>
<p>{% if page.offset > 0 %}<a href="/?offset={{ [page.offset - page.limit, 0]|max }}">newer</a> {% endif %}
{% if page.next_offset is not none %}<a href="/?offset={{ page.next_offset }}">older</a>{% endif %}</p>
{% endblock %}"""

DETAIL = """{% extends "base" %}{% block body %}{% set c = doc.contribution %}
<p><a href="/">← leaderboard</a></p><h1>Contribution <span class="mono">{{ c.id }}</span></h1>
<table><tr><th>hotkey</th><td class="mono">{{ c.hotkey }}</td></tr><tr><th>uid</th><td>{{ c.uid }}</td></tr>
<tr><th>content digest</th><td class="mono">{{ c.digest }}</td></tr><tr><th>url</th><td class="mono">{{ c.url }}</td></tr>
<tr><th>commit / reveal block</th><td>{{ c.commit_block }} / {{ c.reveal_block }}</td></tr>
<tr><th>state</th><td>{{ c.state }}{% if c.rule %} ({{ c.rule }}){% endif %}</td></tr>
<tr><th>reason</th><td class="reason">{{ c.reason }}</td></tr>
{% if c.duplicate_of %}<tr><th>duplicate of</th><td class="mono">{{ c.duplicate_of }}</td></tr>{% endif %}
{% if c.superseded_by %}<tr><th>superseded by</th><td class="mono">{{ c.superseded_by }}</td></tr>{% endif %}</table>
<h2>Verdicts</h2>{% if not c.evidence %}<p>No measurement yet.</p>{% endif %}
{% for e in c.evidence %}<div class="evidence"><h3><span class="mono">{{ e.target }}</span> round {{ e.round }}:
<span class="{{ e.verdict }}">{{ e.verdict }}</span> {{ vs_stock(e.speedup_vs_stock) }} (×{{ "%.4f"|format(e.speedup) if e.speedup is not none else "?" }} vs the incumbent stack, noise
{{ "%.2f%%"|format(100 * e.noise) if e.noise is not none else "?" }})</h3>
<p class="muted">{{ e.label }} · arena {{ e.arena_id }} · block {{ e.evaluated_block }}{% if e.speedup_basis %} · {{ e.speedup_basis }}{% endif %}
· {% if e.settled %}settled: {{ e.outcome }}{% else %}unsettled{% endif %}</p>
<div class="reason">{{ e.reason }}</div>{% if e.outcome_reason %}<div class="reason muted">settlement: {{ e.outcome_reason }}</div>{% endif %}
{% for s in e.stages %}<div class="stage"><p><b>{{ s.name }} engine</b>, {{ s.metric }} per window:
{{ s.verdict or "" }} C/B {{ "%.4f"|format(s.ratio) if s.ratio is not none else "?" }}, bar
{{ "%.4f"|format(s.bar) if s.bar is not none else "?" }}, noise {{ "%.2f%%"|format(100 * s.noise) if s.noise is not none else "?" }}</p>
{% set g = geometry(s) %}{% if g %}{{ svg(g) }}{% endif %}</div>{% endfor %}
{% if not e.stages and e.label != "cpu-timing" %}<p class="muted">No per-window figures stored for this verdict.</p>{% endif %}
</div>{% endfor %}
<h2>History</h2><table><tr><th>from</th><th>to</th><th>reason</th></tr>
{% for t in c.history %}<tr><td>{{ t.from_state or "" }}</td><td>{{ t.to_state }}</td><td class="reason">{{ t.reason }}</td></tr>{% endfor %}
</table>{% endblock %}"""

SVG = """{% macro svg(g) %}<svg xmlns="http://www.w3.org/2000/svg" class="plot" width="{{ g.width }}" height="{{ g.height + 18 * g.legend|length }}"
viewBox="0 0 {{ g.width }} {{ g.height + 18 * g.legend|length }}" role="img">
<rect x="{{ g.plot_box[0] }}" y="{{ g.plot_box[1] }}" width="{{ g.plot_box[2] - g.plot_box[0] }}" height="{{ g.plot_box[3] - g.plot_box[1] }}" fill="#fafafa" stroke="#bbb"/>
{% if g.band %}<rect class="band" x="{{ g.plot_box[0] }}" y="{{ g.band[0] }}" width="{{ g.plot_box[2] - g.plot_box[0] }}" height="{{ [g.band[1] - g.band[0], 0.5]|max }}" fill="#f3c969" fill-opacity="0.45"/>{% endif %}
{% for t in g.ticks %}<text x="{{ g.plot_box[0] - 4 }}" y="{{ t[0] + 4 }}" font-size="10" text-anchor="end">{{ t[1] }}</text>{% endfor %}
{% for l in g.lines %}<line class="ref" x1="{{ g.plot_box[0] }}" x2="{{ g.plot_box[2] }}" y1="{{ l.y }}" y2="{{ l.y }}" stroke="{{ l.color }}" stroke-dasharray="{{ l.dash }}"/>
<text x="{{ g.plot_box[2] - 4 if l.anchor == "end" else g.plot_box[0] + 4 }}" y="{{ l.y - 3 }}" font-size="10" text-anchor="{{ l.anchor }}" fill="{{ l.color }}">{{ l.label }}</text>{% endfor %}
{% for p in g.points %}<circle class="window" cx="{{ p.x }}" cy="{{ p.y }}" r="4" fill="{{ p.color }}"><title>{{ p.title }}</title></circle>{% endfor %}
<text x="{{ (g.plot_box[0] + g.plot_box[2]) / 2 }}" y="{{ g.height - 8 }}" font-size="11" text-anchor="middle">window (run order)</text>
{% for item in g.legend %}<rect x="{{ g.plot_box[0] }}" y="{{ g.height + 18 * loop.index0 }}" width="10" height="10" fill="{{ item[0] }}"/>
<text x="{{ g.plot_box[0] + 16 }}" y="{{ g.height + 9 + 18 * loop.index0 }}" font-size="11">{{ item[1] }}</text>{% endfor %}
</svg>{% endmacro %}"""

_ENV = jinja2.Environment(loader=jinja2.DictLoader({"base": BASE, "index": INDEX, "detail": DETAIL, "svg": SVG}),
                          autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True)


def ago(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    return f"{s}s ago" if s < 120 else f"{s // 60}m ago" if s < 7200 else f"{s // 3600}h ago" if s < 172800 \
        else f"{s // 86400}d ago"


def vs_stock(x: float | None) -> str:
    """×ratio in words, so a 1000× slower kernel never reads like a pass."""
    if x is None or not x > 0:
        return "× ? vs stock"
    if x >= 1:
        return f"×{x:.4f} vs stock ({(x - 1):.1%} faster)"
    return f"×{x:.4f} vs stock ({1 / x:.3g}× slower)" if x < 0.5 else f"×{x:.4f} vs stock ({(1 - x):.1%} slower)"


def link(cid: str) -> str:
    return "/contributions/" + quote(cid, safe="")


def _render(name: str, **ctx: Any) -> str:
    svg = _ENV.get_template("svg").module.svg  # type: ignore[attr-defined]
    return _ENV.get_template(name).render(css=Markup(CSS), ago=ago, link=link, vs_stock=vs_stock, geometry=plots.geometry, svg=svg, **ctx)


def index(crowns: dict[str, Any], page: dict[str, Any], schema: str) -> str:
    return _render("index", title="Cacheon leaderboard", crowns=crowns, page=page, schema=schema)


def detail(doc: dict[str, Any], schema: str) -> str:
    return _render("detail", title=f"Contribution {doc['contribution']['id'][:16]}", doc=doc, schema=schema)
