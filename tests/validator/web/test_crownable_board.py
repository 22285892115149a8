"""Each slot's smallest crownable gain (issue 34 item 3) on the API and the page: measured slots
carry the figure and where it was measured, every other slot reads "not measured", never a number."""

from __future__ import annotations

import re

from board_fixtures import make_state

from cacheon_subnet.records import crownable
from cacheon_subnet.validator.web import data, page
from cacheon_subnet.webapi import SCHEMA


def test_api_carries_a_crownable_entry_per_slot(tmp_path):
    doc = data.crowns(make_state(tmp_path))
    assert doc["schema"] == SCHEMA and set(doc["crownable"]) == set(doc["slots"])  # additive: same schema id
    rms = doc["crownable"]["norm.rmsnorm"]
    assert rms["measured"] is True and set(rms["arenas"]) == {"qwen3-0.6b-dense", "qwen3-moe-mini"}
    moe = rms["arenas"]["qwen3-moe-mini"]
    assert moe["smallest_gain"] == 1.0135 and moe["bar"] == 1.0075 and moe["measured_in"].startswith("docs/results/")
    fused = doc["crownable"]["moe.fused_experts"]
    assert fused == {"measured": False, "lines": ["smallest crownable gain: not measured (no stock-vs-stock run)"]}


def test_page_shows_one_row_per_slot(tmp_path):
    state = make_state(tmp_path)
    doc = data.crowns(state)
    html = page.index(doc, data.contributions(state), SCHEMA)
    table = html[html.index('<table id="crownable">') :]
    table = table[: table.index("</table>")]
    rows = re.findall(r'<tr data-slot="([^"]+)"><td class="mono">[^<]+</td>\s*<td class="([^"]*)">(.*?)</td>', table, re.S)
    assert [s for s, _, _ in rows] == doc["slots"]
    text = {s: t for s, _, t in rows}
    assert "+1.35% end to end (qwen3-moe-mini, norm.rmsnorm" in text["norm.rmsnorm"]
    assert "not measured" in text["attention.decode"] and "%" not in text["attention.decode"]


def test_a_table_without_the_slot_reads_not_measured():
    assert crownable.slot_doc("norm.rmsnorm", {})["measured"] is False
    assert "not measured" in crownable.line("qwen3-moe-mini", "norm.rmsnorm", {})
