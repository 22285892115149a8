"""scripts/sweep_attention_decode.py on CPU: the GPU timing needs an H200, but a broken sweep would
waste a lease, so its correctness half runs here (Triton interpreter, a tiny shape, the stand-in
SGLang whose stock kernel is the slot reference) and must mark a wrong-on-purpose row wrong."""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing as mp
import os
import subprocess
import sys

import arena_harness as h
import pytest
import torch

sys.path.insert(0, str(h.REPO / "scripts"))
from attnsweep import grid, inputs, precompile, sides  # noqa: E402

SAVED = h.REPO / "docs" / "results" / "2026-12-02" / "h200-s8-attnsweep"  # the first H200 run's .json and .txt


def _sweep(tmp_path, *argv: str) -> tuple[subprocess.CompletedProcess, dict]:
    root = h.seam_harness.write_runtime(tmp_path / "fake-sglang")
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{h.REPO}", TRITON_INTERPRET="1")
    out = tmp_path / "sweep.json"
    r = subprocess.run(
        [sys.executable, "scripts/sweep_attention_decode.py", "--config", str(h.DENSE), "--out", str(out), *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=h.REPO,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r, json.loads(out.read_text())


@pytest.mark.slow
def test_the_correctness_check_runs_and_marks_the_wrong_control_wrong(tmp_path):
    r, doc = _sweep(tmp_path, "--shapes", "2x40", "--configs", "bn16-w2-s1-sp1,bn32-w4-s2-hint", "--control")
    assert "timing skipped: no CUDA device" in r.stdout and doc["timing"].startswith("skipped")
    rows = {x["config"]: x for x in doc["rows"]}
    # the two asked for, the example's own default at this shape (64-token steps: bs 2 x 8 kv heads <= 16),
    # and the control (the default config reading each request's first token in place of its last)
    assert set(rows) == {"bn16-w2-s1-sp1", "bn32-w4-s2-hint", "bn64-w4-s3-hint", grid.CONTROL}
    assert rows["bn64-w4-s3-hint"]["default"] and not rows[grid.CONTROL]["default"]
    assert all(x["shape"] == "bs2-ctx40" and x["us"] is None and x["speedup"] is None for x in doc["rows"])
    for name in ("bn16-w2-s1-sp1", "bn32-w4-s2-hint", "bn64-w4-s3-hint"):
        x = rows[name]
        assert x["status"] == "ok", (name, x["detail"])
        assert x["rel_l2_vs_ref"] < 8e-3 and x["max_abs_vs_stock"] < 2e-2
    bad = rows[grid.CONTROL]
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
    assert inputs.sglang_split_hint(lens, 16, 8, 8, 132).tolist() == [1] * 256
    lens = torch.tensor([1088] * 3 + [100])  # lengths 10x apart: split by the ratio too
    assert inputs.sglang_split_hint(lens, 16, 8, 8, 132).tolist() == [8, 8, 8, 1]


def test_default_shapes_come_from_the_arena_and_the_example_keeps_its_defaults():
    from arena.config import load_config
    from cacheon_subnet.verify.shapes import from_arena_config

    cfg = load_config(h.DENSE)
    shapes = grid.default_shapes(cfg, from_arena_config(cfg))
    assert [s.label for s in shapes] == [
        "bs256-ctx1088",
        "bs192-ctx1088",
        "bs128-ctx1088",
        "bs64-ctx1088",
        "bs256-ctx1024",
        "bs256-ctx1152",
    ]
    mod = sides.load_example()
    # the shipped choices: the H200 sweep's winner where bs x kv heads >= 512 (5b9e051), else the older constants
    assert sides.default_config(mod, 256, 8) == grid.Config(64, 2, 3, 1)
    assert sides.default_config(mod, 32, 8) == grid.Config(32, 4, 3, 0)
    assert sides.default_config(mod, 2, 8) == grid.Config(64, 4, 3, 0)
    assert (
        grid.Config.parse("bn128-w8-s4-sp2") == grid.Config(128, 8, 4, 2)
        and grid.Config(32, 4, 3, 0).name == "bn32-w4-s3-hint"
    )


def test_render_json_reproduces_the_saved_h200_text():
    """--render-json re-renders a saved --out document: the H200 run's JSON gives back its .txt
    from the summary on (the lines before it are the run's progress, printed as it went)."""
    r = subprocess.run(
        [sys.executable, str(h.REPO / "scripts" / "sweep_attention_decode.py"), "--render-json", f"{SAVED}.json"],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(h.REPO)),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    saved = SAVED.with_suffix(".txt").read_text().splitlines()
    start = next(i for i, line in enumerate(saved) if line.startswith("attention.decode sweep:"))
    assert r.stdout.splitlines() == saved[start:]
    assert any(line.startswith("bn64-w2-s3-sp1       ok        278.0") for line in saved[start:])  # a table line


@pytest.mark.slow
def test_the_precompile_worker_runs_in_a_spawned_process():
    """The workers are spawned: `_warm_one` and Config must unpickle there by module path. Without
    `_warm_init` (it needs CUDA) the worker reports its missing state as the config's error."""
    with cf.ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as ex:
        cfg, err = ex.submit(precompile._warm_one, grid.Config(16, 2, 1, 1)).result(timeout=120)
    assert cfg == grid.Config(16, 2, 1, 1) and err == "KeyError: 'mod'"
