"""The advisory start breakdown in the "started" record (arena/engine/startdiag.py): phases, cache files
compiled despite the seeds (new and rewritten), HOME files no seed covers, compiler processes."""

from __future__ import annotations

import os

import pytest

from arena.engine.host import EngineSpec, run_engine
from arena.engine.startdiag import ProcSampler, diff, one_line, snapshot


@pytest.mark.slow
def test_a_start_that_compiles_shows_up_in_the_started_records_diag(tmp_path):
    seeds = {k: tmp_path / "seed" / k for k in ("TRITON_CACHE_DIR", "TVM_FFI_CACHE_DIR")}
    (seeds["TVM_FFI_CACHE_DIR"] / "mod_1234").mkdir(parents=True)
    (seeds["TVM_FFI_CACHE_DIR"] / "mod_1234" / "mod.so").write_bytes(b"seed")
    seeds["TRITON_CACHE_DIR"].mkdir(parents=True)
    job = {
        "engine_kwargs": {},
        "engine_factory": "tests.arena.fake_engine:StartCompilingEngine",
        "checkpoint": None,
        "steps": [],
    }
    run = run_engine(EngineSpec("e", job, seed_caches={k: str(v) for k, v in seeds.items()}, timeout_s=120), tmp_path / "w")
    assert run.error is None, run.error
    started = run.lifecycle("started")
    d = started["diag"]
    assert d["advisory"] is True and set(d["phases"]) == {"import_s", "engine_s"}
    assert d["phases"]["engine_s"] >= 1.5 and d["wall_s"] >= d["phases"]["engine_s"]
    tri, tvm, home = d["caches"]["TRITON_CACHE_DIR"], d["caches"]["TVM_FFI_CACHE_DIR"], d["caches"]["HOME"]
    assert tri["new"] == 1 and tri["top_new"] == {"hashdir": 1}
    # the rebuild the new-files-only copy-back never sees: same name, other content
    assert tvm["before"] == 1 and tvm["new"] == 0 and tvm["changed"] == 1 and tvm["top_changed"] == {"mod_1234": 1}
    assert home["new"] == 1 and home["top_new"] == {".nv/ComputeCache": 1}  # FlashInfer's build is not HOME's
    fi = d["caches"]["FLASHINFER_WORKSPACE_BASE"]
    assert fi["new"] == 1 and fi["top_new"] == {".cache/flashinfer": 1} and fi["path"].endswith("/flashinfer")
    assert d["tools"]["ninja"]["procs"] == 1 and d["tools"]["ninja"]["seen_s"] >= 0.5
    assert d["procs"] and not d["env_seen"]  # the scheduler saw the driver's cache dirs
    assert "cacheon start diag (advisory)" in (tmp_path / "w" / "e.log").read_text()
    # the start's own figure is unchanged: import + Engine(), as before
    assert started["s"] >= 1.5


@pytest.mark.slow
def test_the_diag_can_be_turned_off_and_a_broken_walk_is_no_failure(tmp_path):
    job = {
        "engine_kwargs": {},
        "engine_factory": "tests.arena.fake_engine:FakeEngine",
        "checkpoint": None,
        "steps": [],
        "start_diag": False,
    }
    run = run_engine(EngineSpec("e", job, timeout_s=120), tmp_path)
    assert run.error is None and "diag" not in run.lifecycle("started")
    assert snapshot(str(tmp_path / "absent")) is None
    assert diff(None, None)["missing"] is True
    assert "caches" in one_line({"caches": {}, "phases": {}})


def test_the_sampler_reports_a_descendants_cache_env_that_differs(tmp_path, monkeypatch):
    import subprocess
    import sys

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "elsewhere")}
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"], env=env)
    try:
        s = ProcSampler()
        s.scan()
    finally:
        p.kill()
        p.wait()
    (seen,) = s.env_seen.values()
    assert seen == {"TRITON_CACHE_DIR": str(tmp_path / "elsewhere")}


@pytest.mark.slow
def test_the_host_times_its_own_steps_and_the_cli_line_names_what_compiled(tmp_path):
    from arena.engine.startdiag import brief
    from arena.records import StageRecord

    job = {
        "engine_kwargs": {},
        "engine_factory": "tests.arena.fake_engine:StartCompilingEngine",
        "checkpoint": None,
        "steps": [],
    }
    seed = tmp_path / "seed"
    (seed / "mod_1234").mkdir(parents=True)
    (seed / "mod_1234" / "mod.so").write_bytes(b"seed")
    run = run_engine(EngineSpec("e", job, seed_caches={"TVM_FFI_CACHE_DIR": str(seed)}, timeout_s=120), tmp_path / "w")
    assert run.error is None, run.error
    t = run.timing
    assert {"copy_in_s", "launch_s", "to_started_s", "stop_s", "gpu_free_s", "copy_back_s"} <= set(t)
    assert t["to_started_s"] >= run.lifecycle("started")["diag"]["wall_s"]  # the host's clock holds the driver's
    rec = StageRecord(
        "e",
        run.wall_s,
        run.rc,
        run.timed_out,
        run.gpu_free,
        run.error,
        run.forgery,
        (run.lifecycle("started"),),
        (),
        run.timing,
    )
    line = brief(rec.to_json()["startup"], rec.to_json()["host_timing"])
    assert "to started" in line and "TVM_FFI_CACHE_DIR +0/~1 (mod_1234)" in line and "ninja x1" in line
    assert brief([], {}) == ""
