"""scripts/sweep_attention_decode.py on CPU: the GPU timing needs an H200, but a broken sweep would
waste a lease, so its correctness half runs here (Triton interpreter, a tiny shape, the stand-in
SGLang whose stock kernel is the slot reference) and must mark a wrong-on-purpose row wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import arena_harness as h
import torch

sys.path.insert(0, str(h.REPO / "scripts"))
import sweep_attention_decode as sw  # noqa: E402


def _sweep(tmp_path, *argv: str) -> tuple[subprocess.CompletedProcess, dict]:
    root = h.seam_harness.write_runtime(tmp_path / "fake-sglang")
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{h.REPO}", TRITON_INTERPRET="1")
    out = tmp_path / "sweep.json"
    r = subprocess.run([sys.executable, "scripts/sweep_attention_decode.py", "--config", str(h.DENSE), "--out", str(out),
                        *argv], capture_output=True, text=True, env=env, cwd=h.REPO, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r, json.loads(out.read_text())


def test_the_correctness_check_runs_and_marks_the_wrong_control_wrong(tmp_path):
    r, doc = _sweep(tmp_path, "--shapes", "2x40", "--configs", "bn16-w2-s1-sp1,bn32-w4-s2-hint", "--control")
    assert "timing skipped: no CUDA device" in r.stdout and doc["timing"].startswith("skipped")
    rows = {x["config"]: x for x in doc["rows"]}
    # the two asked for, the example's own default at this shape (64-token steps: bs 2 x 8 kv heads <= 16),
    # and the control (the default config reading each request's first token in place of its last)
    assert set(rows) == {"bn16-w2-s1-sp1", "bn32-w4-s2-hint", "bn64-w4-s3-hint", sw.CONTROL}
    assert rows["bn64-w4-s3-hint"]["default"] and not rows[sw.CONTROL]["default"]
    assert all(x["shape"] == "bs2-ctx40" and x["us"] is None and x["speedup"] is None for x in doc["rows"])
    for name in ("bn16-w2-s1-sp1", "bn32-w4-s2-hint", "bn64-w4-s3-hint"):
        x = rows[name]
        assert x["status"] == "ok", (name, x["detail"])
        assert x["rel_l2_vs_ref"] < 8e-3 and x["max_abs_vs_stock"] < 2e-2
    bad = rows[sw.CONTROL]
    assert bad["status"] == "wrong" and bad["rel_l2_vs_ref"] > 8e-3 and bad["max_abs_vs_stock"] > 0.1
    assert "WRONG: bs2-ctx40 control-wrong" in r.stdout
    (shape,) = doc["shapes"]
    assert shape["tokens"] == 80 and shape["hint"] == {"8": 2}  # SGLang's policy at 2 x 40 tokens: 8 splits each
    assert shape["stock"]["status"] == "ok"  # the stand-in SGLang's stock (the slot reference) ran
    assert doc["best"] == {}  # nothing timed, nothing best


def test_sglangs_split_policy_at_the_arenas_window_is_one_split():
    """At bs 256 x 1088 tokens the backend's grid (256 x 8 head groups) already exceeds the H200's
    132 SMs x log2(1088/64): every request gets one split (why the splits axis is swept)."""
    lens = torch.full((256,), 1088)
    assert sw.sglang_split_hint(lens, 16, 8, 8, 132).tolist() == [1] * 256
    lens = torch.tensor([1088] * 3 + [100])  # lengths 10x apart: split by the ratio too
    assert sw.sglang_split_hint(lens, 16, 8, 8, 132).tolist() == [8, 8, 8, 1]


def test_default_shapes_come_from_the_arena_and_the_example_keeps_its_defaults():
    from arena.config import load_config
    from cacheon_subnet.verify.shapes import from_arena_config

    cfg = load_config(h.DENSE)
    shapes = sw.default_shapes(cfg, from_arena_config(cfg))
    assert [s.label for s in shapes] == ["bs256-ctx1088", "bs192-ctx1088", "bs128-ctx1088", "bs64-ctx1088",
                                         "bs256-ctx1024", "bs256-ctx1152"]
    mod = sw.load_example()
    assert sw.default_config(mod, 256, 8) == sw.Config(32, 4, 3, 0)  # the shipped constants, unchanged
    assert sw.default_config(mod, 2, 8) == sw.Config(64, 4, 3, 0)
    assert sw.Config.parse("bn128-w8-s4-sp2") == sw.Config(128, 8, 4, 2) and sw.Config(32, 4, 3, 0).name == "bn32-w4-s3-hint"
