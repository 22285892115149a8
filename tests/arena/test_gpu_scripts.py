"""The next device session's commands, dry-run on CPU with the fake engine: a broken script would
waste scarce H200 minutes (scripts/seam_proof.py, scripts/arena_benchmarks.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import arena_harness as h
import pytest


def _run(tmp_path, *argv: str) -> subprocess.CompletedProcess:
    root = h.seam_harness.write_runtime(tmp_path / "fake-sglang")
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{h.REPO}", TRITON_INTERPRET="1")
    return subprocess.run(
        [sys.executable, *argv, "--engine-factory", "tests.arena.fake_engine:FakeEngine"],
        capture_output=True,
        text=True,
        env=env,
        cwd=h.REPO,
        timeout=600,
    )


@pytest.mark.slow
def test_seam_proof_dry_run(tmp_path):
    out = tmp_path / "sp.json"
    # the fake engine computes on CPU (the faithful one through interpreted Triton): small shapes
    r = _run(
        tmp_path,
        "scripts/seam_proof.py",
        "--out",
        str(out),
        "--reps",
        "1",
        "--work",
        str(tmp_path / "w"),
        "--config",
        str(_small_config(tmp_path)),
        "--greedy-prompts",
        "16",
        "--greedy-tokens",
        "16",
        "--engines",
        "stock-1,faithful,wrong,raising,nocand-1",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    e = json.loads(out.read_text())["engines"]
    assert e["faithful"]["coverage"]["ok"] and e["faithful"]["vs_stock1"]["seq_match"] == 1.0
    assert e["wrong"]["vs_stock1"]["token_match"] < 1.0 and e["raising"]["error"]
    assert not e["nocand-1"]["coverage"]["ok"] and e["nocand-1"]["tput"]


def _small_config(tmp_path):
    text = (h.REPO / "configs/arena/dense.toml").read_text()
    for old, new in [
        ("prompts_per_window = 256", "prompts_per_window = 4"),
        ("input_len = 1024", "input_len = 8"),
        ("output_len = 128", "output_len = 4"),
        ("cycles = 8 ", "cycles = 2 "),
        ("prompts = 64", "prompts = 16"),
        ("windows_per_role = 1 ", "windows_per_role = 2 "),
    ]:
        assert old in text, old  # the dry run must stay small when dense.toml changes
        text = text.replace(old, new)
    cfg = tmp_path / "small.toml"
    cfg.write_text(text)
    return cfg


@pytest.mark.slow
def test_seam_overhead_dry_run(tmp_path):
    out = tmp_path / "ov.json"
    r = _run(
        tmp_path,
        "scripts/seam_overhead.py",
        "--config",
        str(_small_config(tmp_path)),
        "--out",
        str(out),
        "--work",
        str(tmp_path / "w"),
    )
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    o = json.loads(out.read_text())
    assert not o["problems"] and isinstance(o["seam_over_pristine"], float)
    assert any(n > 0 for n in o["hooks_restored"]) and any(n < 0 for n in o["hooks_restored"])
    assert {w["route"] for w in o["windows"]} == {"pristine", "stock"}


@pytest.mark.slow
def test_arena_benchmarks_dry_run(tmp_path):
    cfg = _small_config(tmp_path)
    out = tmp_path / "ab.json"
    r = _run(
        tmp_path,
        "scripts/arena_benchmarks.py",
        "--config",
        str(cfg),
        "--out",
        str(out),
        "--work",
        str(tmp_path / "w"),
        "--checkpoints",
        str(tmp_path / "c"),
        "--runs",
        "faithful,wrong,role-bias,never-fires,handicap",
        "--handicap-us",
        "5000",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    runs = {x["run"]: x for x in json.loads(out.read_text())["runs"]}
    assert runs["handicap"]["quality"] == "PASS" and runs["handicap"]["ratio"] > 1.2, runs["handicap"]["reason"]
    assert {"output_tokens_per_s", "gpu_tokens_per_s"} <= set(runs["handicap"]["by_metric"])
    assert runs["wrong"]["verdict"] == "FAIL" and runs["wrong"]["quality"] == "FAIL", runs["wrong"].get("reason")
    assert runs["never-fires"]["verdict"] == "FAIL" and "evidence" in runs["never-fires"]["reason"]
    assert runs["faithful"]["quality"] == "PASS" and isinstance(runs["role-bias"]["role_bias"], float)
    assert isinstance(runs["faithful"]["drift"], float) and runs["role-bias"]["quality"] is None


def test_noise_report_joins_windows_with_monitor_samples(tmp_path):
    """Slow windows get the samples taken inside them: here the GPU idles (host-bound) in the slow one."""
    sys.path.insert(0, str(h.REPO / "scripts"))
    import noise_report

    windows = [
        {"index": i, "role": r, "at": 100.0 + 10 * i, "output_tokens_per_s": tps}
        for i, (r, tps) in enumerate([("B", 1000.0), ("C", 1001.0), ("C", 850.0), ("B'", 999.0)])
    ]
    samples = [
        {
            "t": 100.0 + 10 * i + dt,
            "src": "gpu",
            "clocks.sm": 1980.0,
            "utilization.gpu": 80.0 if i == 2 else 95.0,
            "power.draw": 500.0 if i == 2 else 560.0,
            "reasons": "0x0000000000000000" if i == 2 else "0x0000000000000004",
        }
        for i in range(4)
        for dt in (0.5, 1.5)
    ]
    rows = noise_report.per_window(windows, samples, tokens=2000, window_s=0)
    assert [r["n"] for r in rows] == [2, 2, 2, 2]  # each window spans tokens / tps ≈ 2 s
    split = noise_report.split(rows)
    assert split["slow"]["windows"] == 1 and split["normal"]["windows"] == 3
    assert split["slow"]["utilization.gpu"] == 80.0 and split["normal"]["utilization.gpu"] == 95.0
    assert split["normal"]["reasons"] == ["0x0000000000000004"] and split["slow"]["reasons"] == []


def test_rejudge_reads_recorded_windows_with_every_statistic(tmp_path):
    """Old runs re-read with the current judge: pooled, paired, per-cycle, drift, per clock."""
    from arena.verdict.speed import plan

    windows = [
        {
            "index": w.index,
            "cycle": w.cycle,
            "role": w.role,
            "route": w.route,
            "output_tokens_per_s": 1000.0 * (1.05 if w.role == "C" else 1.0) + w.index % 3,
            "gpu_tokens_per_s": 1100.0 * (1.05 if w.role == "C" else 1.0),
        }
        for w in plan(4, 2)
    ]
    f = tmp_path / "ab.json"
    f.write_text(json.dumps({"runs": [{"run": "role-bias", "windows": windows}]}))

    def run(*a: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "scripts/rejudge.py", *a], capture_output=True, text=True, cwd=h.REPO, timeout=120
        )

    r = run(str(f), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    (row,) = json.loads(r.stdout)
    assert set(row["by_metric"]) == {"output_tokens_per_s", "gpu_tokens_per_s"}
    g = row["by_metric"]["gpu_tokens_per_s"]
    assert abs(g["pooled"] - 0.05) < 1e-9 and abs(g["paired"] - 0.05) < 1e-9 and g["verdict"] == "PASS"
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = run(str(bad))
    assert r.returncode == 2 and "bad.json: cannot read a result JSON" in r.stderr


@pytest.mark.slow
def test_arena_benchmarks_runs_bundle_paths_with_a_resident_teacher(tmp_path):
    """The quality calibration's device batch (`device_trust.sh sm-controls`): runs named by bundle
    path, one resident T for all of them, each run's full result kept for calibrate_quality.py."""
    cfg = _small_config(tmp_path)
    cfg.write_text(cfg.read_text() + "\n[teacher]\nresident = true\n")
    out, results = tmp_path / "ab.json", tmp_path / "results"
    r = _run(
        tmp_path,
        "scripts/arena_benchmarks.py",
        "--config",
        str(cfg),
        "--out",
        str(out),
        "--work",
        str(tmp_path / "w"),
        "--checkpoints",
        str(tmp_path / "c"),
        "--results",
        str(results),
        "--runs",
        "examples/norm.rmsnorm,examples/controls/wrong_math",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    runs = json.loads(out.read_text())["runs"]
    assert [x["run"] for x in runs] == ["norm.rmsnorm", "wrong_math"]
    assert runs[0]["quality"] == "PASS" and runs[1]["quality"] == "FAIL", [x["reason"] for x in runs]
    assert runs[1]["quality_reasons"] and set(runs[1]["quality_metrics"]) == {"b", "c"}
    qb, qc = runs[1]["quality_metrics"]["b"], runs[1]["quality_metrics"]["c"]
    # Wrong math always moves the distributions (on a tiny CPU model greedy tokens may still agree):
    # the kept rows must carry that, or the calibration has nothing to fit.
    assert qc["kl_mean"] > qb["kl_mean"] and qc["logprob_delta_p99"] > qb["logprob_delta_p99"], (qb, qc)
    kept = sorted(p.name for p in results.iterdir())
    assert kept == ["0-norm.rmsnorm.json", "1-wrong_math.json"]
    second = json.loads((results / "1-wrong_math.json").read_text())
    assert second["stages"]["teacher"]["host_timing"].get("reused") == 1  # T started once, for both runs
    assert "stock_spread" in second["quality"]["metrics"]
