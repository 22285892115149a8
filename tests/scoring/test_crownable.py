"""configs/crownable.toml as typed records (issue 34 item 3): the committed figures load, bad entries
are refused by name, and `bench --arena` prints one line per slot (the figure or "not measured")."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from cacheon_subnet.records import crownable

REPO = Path(__file__).resolve().parents[2]

GOOD = """schema = 1
[[measured]]
arena = "a"
arena_id = "arena-x"
slot = "norm.rmsnorm"
metric = "decode_gpu_tokens_per_s"
bar = 1.0075
noise = 0.001
half_gain = 1.008
smallest_gain = 1.019
runs = 3
measured_in = "docs/results/x.json"
method = "scripts/consensus_sim.py"
"""


def test_committed_table_has_both_measured_arenas():
    table = crownable.load()
    assert set(table) == {("qwen3-0.6b-dense", "norm.rmsnorm"), ("qwen3-moe-mini", "norm.rmsnorm")}
    for c in table.values():
        assert c.bar <= c.half_gain <= c.smallest_gain and c.runs >= 3
        files = c.measured_in.split(", ")
        assert len(files) >= 3 and all(f.startswith("docs/results/") and (REPO / f).is_file() for f in files)


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        ("smallest_gain = 1.019", "smallest_gain = 1.001", "bar <= half_gain <= smallest_gain"),
        ("runs = 3", "runs = 0", "`runs` must be an int >= 1"),
        ('measured_in = "docs/results/x.json"', 'measured_in = ""', "`measured_in` must be a non-empty string"),
        ("noise = 0.001", 'noise = "low"', "`noise` must be a finite number"),
    ],
)
def test_bad_entries_are_named(tmp_path, old, new, why):
    p = tmp_path / "c.toml"
    p.write_text(GOOD.replace(old, new))
    with pytest.raises(crownable.CrownableError, match=rf"\[\[measured\]\] #1: .*{re.escape(why)}"):
        crownable.load(p)


def test_a_slot_listed_twice_is_refused(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(GOOD + GOOD.replace("schema = 1\n", ""))
    with pytest.raises(crownable.CrownableError, match=r"#2: \(a, norm.rmsnorm\) listed twice"):
        crownable.load(p)


def test_bench_arena_prints_one_line_per_slot():
    from cacheon_subnet.bench import _arena_line

    arena = SimpleNamespace(
        name="qwen3-moe-mini",
        profile="p",
        window=(("decode", 256),),
        decode_context=0,
        decode_batches=(1,),
        prefill_tokens=(8,),
    )
    lines = _arena_line(arena, ["moe.fused_experts", "norm.rmsnorm"]).splitlines()
    assert lines[1] == "smallest crownable gain: not measured (qwen3-moe-mini, moe.fused_experts: no stock-vs-stock run)"
    assert lines[2].startswith("smallest crownable gain +1.35% end to end (qwen3-moe-mini, norm.rmsnorm; bar 1.0075")
    assert len(lines) == 3
