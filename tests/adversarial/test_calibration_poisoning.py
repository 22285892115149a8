"""Attack on the quality calibration (arena/verdict/calibrate.py, scripts/calibrate_quality.py): a miner's
own arena run records a stock spread from B windows that shared an engine with its kernel. If the
operator calibrates from it, a widened spread loosens every later verdict's limits. Only runs of
the shipped examples and controls may set limits unless the operator opts in."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SMOLLM2 = ["docs/results/2026-12-02/h200-s8-sm-norm.rmsnorm.json"] + [
    f"docs/results/2026-12-03/h200-s11-sm-{n}.json"
    for n in (
        "norm.fused_add_rmsnorm",
        "wrong_math",
        "subtle_skip_row",
        "subtle_bf16_accumulation",
        "subtle_approx_rsqrt",
        "subtle_batch_ge128",
        "subtle_prefill_only",
    )
]


def _poisoned(tmp_path: Path) -> Path:
    """A contribution's result whose B′ half reads far worse than its B half."""
    doc = json.loads((REPO / SMOLLM2[1]).read_text())
    doc["bundle_digest"], doc["control"] = "ab" * 32, None
    spread = doc["quality"]["metrics"]["stock_spread"]
    spread["b_prime"] = {
        **spread["b_prime"],
        "nll_mean": spread["b"]["nll_mean"] + 2.0,
        "kl_mean": spread["b"]["kl_mean"] * 20,
    }
    out = tmp_path / "miner-run.json"
    out.write_text(json.dumps(doc))
    return out


def _policy(capsys, *argv: str) -> tuple[str, str]:
    sys.path.insert(0, str(REPO / "scripts"))
    import calibrate_quality

    assert calibrate_quality.main(list(argv)) == 0
    cap = capsys.readouterr()
    return cap.out, cap.err


def test_a_miners_widened_spread_sets_no_limit(tmp_path, capsys):
    honest, _ = _policy(capsys, *[str(REPO / p) for p in SMOLLM2])
    evil = _poisoned(tmp_path)
    out, err = _policy(capsys, *[str(REPO / p) for p in SMOLLM2], str(evil))
    assert out == honest  # the same policy: the poisoned spread was left out
    assert str(evil) in err and "left out" in err


def test_the_opt_in_takes_it_and_the_limits_widen(tmp_path, capsys):
    """The broken control: with untrusted runs admitted, the same file loosens the limits."""
    honest, _ = _policy(capsys, *[str(REPO / p) for p in SMOLLM2])
    out, _ = _policy(capsys, *[str(REPO / p) for p in SMOLLM2], str(_poisoned(tmp_path)), "--include-untrusted")
    assert out != honest and "# 9 stock spreads" in out


def test_the_arenas_own_controls_are_trusted_and_a_forged_control_label_is_not():
    from arena.verdict import calibrate

    digests = calibrate.shipped_digests(REPO / "examples")
    handicap = "stock + 150 µs GPU spin per call (handicap control)"
    assert calibrate.trusted({"bundle_digest": "handicap", "control": "handicap", "baseline": handicap}, digests)
    assert not calibrate.trusted({"bundle_digest": "handicap", "control": None, "baseline": handicap}, digests)
    assert all(calibrate.trusted(json.loads((REPO / p).read_text()), digests) for p in SMOLLM2)


def test_a_shipped_bundle_measured_against_a_crown_sets_no_limit(tmp_path, capsys):
    """Red team: a miner commits a shipped example; the validator measures it head-to-head, so its
    B and B′ windows ran the crowned bundle (the incumbent miner's code), which can widen the
    spread. Its bundle digest is a shipped one, and trusted() took it: every limit loosened."""
    honest, _ = _policy(capsys, *[str(REPO / p) for p in SMOLLM2])
    doc = json.loads(_poisoned(tmp_path).read_text())
    doc["bundle_digest"] = json.loads((REPO / SMOLLM2[0]).read_text())["bundle_digest"]  # examples/norm.rmsnorm
    doc["baseline"] = "incumbent " + "cd" * 32 + " (norm.rmsnorm/default)"
    evil = tmp_path / "h2h-shipped.json"
    evil.write_text(json.dumps(doc))
    out, err = _policy(capsys, *[str(REPO / p) for p in SMOLLM2], str(evil))
    assert out == honest
    assert str(evil) in err and "left out" in err
