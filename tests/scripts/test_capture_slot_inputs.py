"""scripts/capture_slot_inputs.py (issue 34 item 1): a profile of a pristine engine becomes the
arena's slot-input fixture; on the committed H200 profile it reproduces the seeded dense fixture."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import capture_slot_inputs as cap  # noqa: E402

from cacheon_subnet.records import slot_inputs as si  # noqa: E402

PROFILE = "docs/results/2026-12-02/h200-s7-profile.json"
torch = pytest.importorskip("torch")


def _figures(fx: si.ArenaFixture) -> dict[tuple[str, str, str], float]:
    out = {}
    for slot, s in fx.slots.items():
        for stage in ("decode", "prefill"):
            use = getattr(s, stage)
            for k in ("stock_us", "calls_per_step", "share"):
                f = getattr(use, k) if use is not None else None
                if f is not None:
                    out[(slot, stage, k)] = f.value
    return out


def test_the_committed_profile_gives_the_seeded_dense_fixture(tmp_path, capsys):
    out = tmp_path / "fx.json"
    rc = cap.main(["--config", str(REPO / "configs/arena/dense.toml"), "--profile", str(REPO / PROFILE),
                   "--source", PROFILE, "--out", str(out)])  # fmt: skip
    assert rc == 0 and "wrote" in capsys.readouterr().out
    got = si.parse(out.read_text(), str(out))
    seeded = si.load("qwen3-0.6b-dense")
    assert seeded is not None and got.arena == seeded.arena and got.config == "configs/arena/dense.toml"
    want = _figures(seeded)
    assert want and {k: pytest.approx(v, rel=1e-4) for k, v in want.items()} == _figures(got)
    assert got.decode_step_us is not None and seeded.decode_step_us is not None
    assert got.decode_step_us.value == seeded.decode_step_us.value


def test_an_unreadable_profile_is_refused_by_name(tmp_path, capsys):
    rc = cap.main(
        ["--config", str(REPO / "configs/arena/dense.toml"), "--profile", str(tmp_path / "nope.json"), "--dry-run"]
    )
    assert rc == 2 and "nope.json" in capsys.readouterr().err


def test_argument_statistics_from_recorded_calls():
    ids = [torch.tensor([[0, 1], [0, 2], [0, 3]], dtype=torch.int32)] * 2
    r = cap.routing_of(ids, 4, "test")
    assert (r.tokens, r.top_k, r.calls, r.tokens_per_expert) == (3, 2, 2, (6, 2, 2, 2))
    kv = cap.kv_lengths_of([torch.tensor([0, 5, 7], dtype=torch.int32)], "test")
    assert kv.lengths == (5, 2)
    q = torch.zeros(4, 48)[:, :16].view(4, 2, 8)  # a strided view, as the engine hands q over
    (a,) = cap.summarize_args({"q": q, "eps": 1e-6})
    assert a.shape == (4, 2, 8) and a.stride == (48, 8, 1) and a.dtype == "float32" and a.lo == a.hi == 0.0
