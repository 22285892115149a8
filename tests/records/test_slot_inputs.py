"""The per-arena slot-input fixture (issue 34 item 1): strict JSON, every figure sourced, the
committed seeds read back and name only files that exist."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cacheon_subnet.records import slot_inputs as si

REPO = Path(__file__).resolve().parents[2]


def _figures(fx: si.ArenaFixture) -> list[si.Figure]:
    out = [f for f in (fx.decode_step_us, fx.prefill_step_us) if f is not None]
    for s in fx.slots.values():
        for st in (s.decode, s.prefill):
            if st is not None:
                out += [f for f in (st.stock_us, st.calls_per_step, st.share) if f is not None]
    return out


@pytest.mark.parametrize("arena", ["qwen3-0.6b-dense", "qwen3-moe-mini"])
def test_committed_fixtures_load_and_every_figure_names_its_source(arena):
    fx = si.load(arena)
    assert fx is not None and fx.card == "H200" and (REPO / fx.config).is_file()
    assert si.parse(si.dump(fx), "again") == fx  # canonical: what is written reads back the same
    for f in _figures(fx):
        cited = [w.rstrip(":,()") for w in f.source.split() if w.startswith("docs/results/")]
        assert cited or f.source.startswith("issue 34"), f.source
        assert all((REPO / c).is_file() for c in cited), f.source


def test_the_dense_seed_is_the_profiles_arithmetic():
    fx = si.load("qwen3-0.6b-dense")
    assert fx is not None and fx.decode_step_us is not None
    doc = json.loads((REPO / "docs/results/2026-12-02/h200-s7-profile.json").read_text())
    decode = next(s for s in doc["stages"] if s["stage"] == "DECODE")
    row = next(r for r in decode["shares"] if r["category"] == "norm.fused_add_rmsnorm")
    use = fx.slots["norm.fused_add_rmsnorm"].decode
    assert use is not None and use.stock_us is not None and use.calls_per_step is not None
    assert use.stock_us.value == pytest.approx(row["us"] / row["calls"], abs=1e-3)
    assert use.calls_per_step.value == 56 and fx.decode_step_us.value == pytest.approx(decode["kernel_us"] / 16, abs=0.1)
    moe = si.load("qwen3-moe-mini")
    assert moe is not None and moe.decode_step_us is None  # not measured: absent, never derived


def _doc() -> dict:
    fx = si.load("qwen3-0.6b-dense")
    assert fx is not None
    return json.loads(si.dump(fx))


@pytest.mark.parametrize(
    ("mutate", "said"),
    [
        (lambda d: d["slots"]["rope.neox"]["decode"].update(tokenz=1), "slots['rope.neox'].decode.tokenz: unknown key"),
        (lambda d: d["slots"]["rope.neox"]["decode"]["share"].update(value=1.5), "StageUse.share"),
        (lambda d: d["slots"]["rope.neox"]["decode"]["stock_us"].update(value=-1), "StageUse.stock_us"),
        (lambda d: d["slots"]["rope.neox"]["decode"]["stock_us"].update(source=" "), "Figure.source"),
        (lambda d: d.update(schema=2), "ArenaFixture.schema"),
        (
            lambda d: d["slots"]["moe.fused_experts"].update(
                routing={"tokens": 4, "top_k": 2, "calls": 1, "tokens_per_expert": [3, 3, 3], "source": "x"}
            ),
            "must sum to calls x tokens x top_k = 8",
        ),
    ],
)
def test_a_malformed_fixture_is_refused_naming_the_file_and_the_field(tmp_path, mutate, said):
    doc = _doc()
    doc["slots"]["moe.fused_experts"] = {"args": []}
    mutate(doc)
    path = tmp_path / "qwen3-0.6b-dense.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(si.FixtureError, match=str(path)) as e:
        si.load("qwen3-0.6b-dense", tmp_path)
    assert said in str(e.value)


def test_a_file_named_for_another_arena_is_refused(tmp_path):
    (tmp_path / "other.json").write_text(json.dumps(_doc()))
    with pytest.raises(si.FixtureError, match="in a file named for 'other'"):
        si.load("other", tmp_path)
    assert si.load("none-here", tmp_path) is None
