"""Several hosts through Ray (validator/ray_pool.py) on a local Ray cluster: results return to
the validator that owns the state DB; a worker killed mid-job has its job retried elsewhere and
counted once; a twice-delivered result is dropped; a worker on other code (another arena id) is
refused. Skipped when Ray is not installed (optional extra `ray`)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'cacheon-subnet[ray]'")

from ray_fakes import DiesOnceQualifier  # noqa: E402
from validator_fakes import EXAMPLES, NETUID, VALIDATOR, FileServer, commit, fake_screener, make_archive, make_chain  # noqa: E402

from cacheon_subnet.records import GpuDetail, QualifyJob, job_key  # noqa: E402
from cacheon_subnet.validator.loop import Validator, ValidatorConfig  # noqa: E402
from cacheon_subnet.validator.ray_pool import RayPool  # noqa: E402

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def cluster():
    path = os.pathsep.join([str(HERE.parents[1]), str(HERE), os.environ.get("PYTHONPATH", "")])
    ray.init(
        num_cpus=2,
        resources={"arena_gpu": 2},
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    yield
    ray.shutdown()


def _pool(q, **kw):
    return RayPool(q, "local", num_gpus=0, resources={"arena_gpu": 1}, init=False, **kw)


def test_a_worker_killed_mid_job_is_retried_and_counted_once(cluster, tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    (markers / "kill-first").write_text("")
    chain = make_chain(tmp_path / "chain.db", miners=2)
    with FileServer() as srv:
        for i in range(2):
            a, d = make_archive(EXAMPLES / "norm.rmsnorm", tmp_path, f"r{i}", {"speed.txt": f"1.{i + 2}", "s.txt": str(i)})
            commit(chain, f"m{i}", d, srv.add(f"{tmp_path.name}-r{i}.tar.gz", a))
        chain.advance(2)
        pool = _pool(DiesOnceQualifier(marker_dir=str(markers)))
        assert pool.free_slots() == 2  # read from the cluster's resources
        cfg = ValidatorConfig(
            netuid=NETUID,
            hotkey=VALIDATOR,
            state_dir=tmp_path / "state",
            interval_s=0,
            targets=("norm.rmsnorm",),
            retry_base_s=0.0,
            retry_max_s=0.0,
        )
        v = Validator(cfg, chain, pool, screener=fake_screener())
        killed: set[str] = set()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            s = v.run_once()
            for m in markers.glob("*-0"):  # a first attempt is running: kill its worker process
                if m.name not in killed:
                    killed.add(m.name)
                    os.kill(int(m.read_text()), signal.SIGKILL)
            if s.active == 0:
                break
            time.sleep(0.2)
        rows = v.db.con.execute("SELECT contribution_id, verdict FROM evidence").fetchall()
        states = v.db.counts()
        keys = v.db.con.execute("SELECT key FROM kv WHERE key LIKE 'job:%'").fetchall()
        # the same result delivered again (a late duplicate from a worker thought lost): dropped
        c = v.db.contributions(("qualified",))[0]
        job = QualifyJob(job_key(c.id, "norm.rmsnorm", 0, 0, 0), c.id, "norm.rmsnorm", {}, None)  # type: ignore[arg-type]
        from cacheon_subnet.records import JobResult

        first = v.db.con.execute("SELECT * FROM evidence WHERE contribution_id=?", (c.id,)).fetchone()
        from validator_fakes import FakeQualifier  # noqa: F401

        from cacheon_subnet.records import QualifyResult

        dup = JobResult(
            job.key,
            c.id,
            "norm.rmsnorm",
            0,
            QualifyResult("norm.rmsnorm", "PASS", True, 9.0, 9.0, 0.0, "fake-arena", "fake", "dup"),
        )
        from cacheon_subnet.validator.stages.passstate import PassState

        v.stages.judge.collect(PassState(), dup)
        after = v.db.con.execute("SELECT COUNT(*) FROM evidence").fetchone()[0]
        v.close()
        pool.close()
    assert len(killed) == 2  # both first attempts died mid-job
    assert states["qualified"] == 2 and len(rows) == 2 and {r["verdict"] for r in rows} == {"PASS"}
    assert len(keys) == 2 and after == 2 and first["speedup"] != 9.0
    attempts = sorted(p.name.split("-")[1] for p in markers.glob("*-*") if p.name != "kill-first")
    assert attempts == ["0", "0", "1", "1"]  # each job ran twice (killed, retried), recorded once


def test_a_worker_on_another_arena_is_refused(cluster, tmp_path):
    from cacheon_subnet.bundle import load_bundle

    markers = tmp_path / "m"
    markers.mkdir()
    pool = _pool(DiesOnceQualifier(marker_dir=str(markers)))
    pool.arena_id = "arena-the-validators-own"  # the worker's code computes "fake-arena"
    b = load_bundle(EXAMPLES / "norm.rmsnorm")
    pool.submit(QualifyJob("k|norm.rmsnorm|a0|r0", "k", "norm.rmsnorm", dict(b.files), b.manifest.ops[0]))
    got, deadline = [], time.monotonic() + 60
    while not got and time.monotonic() < deadline:
        got = pool.poll()
        time.sleep(0.1)
    assert got and got[0].result is None and "not comparable" in got[0].error
    # the job a worker receives carries no secret: only these fields exist
    assert set(QualifyJob.__dataclass_fields__) == {
        "key",
        "contribution_id",
        "target",
        "files",
        "op",
        "incumbent",
        "incumbent_files",
        "start_block",
    }
    assert json.dumps(sorted(QualifyJob.__dataclass_fields__))


def test_the_real_arena_on_ray_survives_a_worker_killed_mid_verdict(cluster, tmp_path):
    """The fake engine behind the real arena host on a Ray worker; the worker is SIGKILLed once
    its resident engine has started; Ray re-runs the job, the verdict comes back once."""
    import sys

    sys.path.insert(0, str(HERE.parent / "arena"))
    import arena_harness as h
    import seam_harness
    from ray_fakes import FakeEngineArena

    runtime = seam_harness.write_runtime(tmp_path / "fake-sglang")
    markers = tmp_path / "markers"
    markers.mkdir()
    pool = _pool(FakeEngineArena(str(tmp_path / "arena"), str(runtime), marker_dir=str(markers)))
    b = h.torch_bundle("ray")
    pool.submit(QualifyJob(job_key("c", "norm.rmsnorm", 0, 0), "c", "norm.rmsnorm", dict(b.files), b.manifest.ops[0]))
    got, killed, deadline = [], False, time.monotonic() + 400
    while not got and time.monotonic() < deadline:
        got = pool.poll()
        first = next(iter(markers.glob("*-0")), None)
        if first and not killed:
            pid, work = first.read_text().split()
            if (Path(work) / "resident.jsonl").exists():  # mid-verdict: the engine is running
                os.kill(int(pid), signal.SIGKILL)
                killed = True
        time.sleep(0.2)
    pool.close()
    assert killed and len(got) == 1 and got[0].error is None, got
    detail = got[0].result.detail
    assert got[0].result.verdict in ("PASS", "FAIL", "NO_DECISION") and isinstance(detail, GpuDetail)
    assert len(list(markers.glob("*-*"))) == 2  # killed once, retried once
    assert detail.result_json is not None
    doc = json.loads(Path(detail.result_json).read_text())
    assert doc["evidence"]["ok"] and doc["verdict"] == got[0].result.verdict
