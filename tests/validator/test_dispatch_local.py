"""Several GPUs on one host (validator/dispatch.py LocalPool): one arena per GPU, one queue that
keeps every GPU busy, and the validator thread the only writer of results. With a stub arena
(fast, exact concurrency) through the validator loop, and with the real arena host + fake
engine on two fake GPUs (each engine sees only its own CUDA_VISIBLE_DEVICES)."""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from ray_fakes import FakeEngineArena
from validator_fakes import (
    EXAMPLES,
    NETUID,
    VALIDATOR,
    FakeQualifier,
    FileServer,
    commit,
    fake_screener,
    make_archive,
    make_chain,
)

from cacheon_subnet.records import GpuDetail, QualifyJob, job_key
from cacheon_subnet.validator.dispatch import LocalPool
from cacheon_subnet.validator.loop import Validator, ValidatorConfig
from cacheon_subnet.validator.state import StateDB

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class DeviceQualifier(FakeQualifier):
    """A stub arena bound to one device: records where and when each job ran."""

    devices: str | None = None
    delay_s: float = 0.4
    log: list | None = None

    def on_devices(self, d: str) -> DeviceQualifier:
        return replace(self, devices=d)

    def qualify(self, bundle, op, incumbent):
        t0 = time.monotonic()
        r = super().qualify(bundle, op, incumbent)
        self.log.append((self.devices, t0, time.monotonic(), threading.current_thread().name))
        return replace(r, reason=f"device {self.devices}")


@pytest.mark.slow
def test_pool_keeps_every_gpu_busy_and_only_the_validator_thread_writes(tmp_path, monkeypatch):
    chain = make_chain(tmp_path / "chain.db", miners=6)
    writers: set[str] = set()
    real_tx = StateDB.tx

    def tx(self):
        writers.add(threading.current_thread().name)
        return real_tx(self)

    monkeypatch.setattr(StateDB, "tx", tx)
    with FileServer() as srv:
        for i in range(6):
            a, d = make_archive(
                EXAMPLES / "norm.rmsnorm", tmp_path, f"b{i}", {"speed.txt": f"1.{i + 1}", "salt.txt": str(i)}
            )
            commit(chain, f"m{i}", d, srv.add(f"{tmp_path.name}-b{i}.tar.gz", a))
        chain.advance(2)
        log: list = []
        pool = LocalPool(DeviceQualifier(log=log), ("0", "1", "2"))
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
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            s = v.run_once()
            if s.active == 0:
                break
            time.sleep(0.05)
        rows = v.db.con.execute("SELECT contribution_id, reason FROM evidence").fetchall()
        states = v.db.counts()
        v.close()
        pool.close()
    assert states["qualified"] == 6 and len(rows) == 6  # each exactly once
    assert {r["reason"] for r in rows} == {"device 0", "device 1", "device 2"}
    # every GPU busy at once: some instant had three jobs running
    peak = max(sum(1 for _, a, b, _ in log if a <= t < b) for _, t, _, _ in log)
    assert peak == 3, log
    assert writers == {threading.main_thread().name}  # workers never touched the DB


def test_a_job_submitted_twice_runs_once_and_a_bad_pool_is_refused():
    log: list = []
    pool = LocalPool(DeviceQualifier(log=log, delay_s=0.2), ("0", "1"))
    from cacheon_subnet.bundle import load_bundle

    b = load_bundle(EXAMPLES / "norm.rmsnorm")
    job = QualifyJob(job_key("c", "norm.rmsnorm", 0, 0), "c", "norm.rmsnorm", dict(b.files), b.manifest.ops[0])
    pool.submit(job)
    pool.submit(job)
    deadline = time.monotonic() + 10
    got = []
    while time.monotonic() < deadline and not got:
        got = pool.poll()
        time.sleep(0.02)
    pool.close()
    assert len(got) == 1 and got[0].result.verdict == "PASS" and len(log) == 1
    with pytest.raises(ValueError, match="distinct"):
        LocalPool(DeviceQualifier(log=[]), ("0", "0"))
    with pytest.raises(ValueError, match="on_devices"):
        LocalPool(FakeQualifier(), ("0",))


@pytest.mark.slow
def test_two_fake_gpus_run_two_real_arenas_each_on_its_own_device(tmp_path, monkeypatch):
    sys.path.insert(0, str(REPO / "tests" / "arena"))
    import arena_harness as h

    h.runtime_env(tmp_path, monkeypatch)
    pool = LocalPool(FakeEngineArena(str(tmp_path)), ("0", "1"))
    jobs = []
    for salt in ("x", "y"):
        b = h.torch_bundle(salt)
        jobs.append(QualifyJob(job_key(salt, "norm.rmsnorm", 0, 0), salt, "norm.rmsnorm", dict(b.files), b.manifest.ops[0]))
        pool.submit(jobs[-1])
    got, deadline = [], time.monotonic() + 300
    while len(got) < 2 and time.monotonic() < deadline:
        got += pool.poll()
        time.sleep(0.2)
    pool.close()
    assert len(got) == 2 and all(r.error is None for r in got), [r.error for r in got]
    seen = {}
    for r in got:
        assert isinstance(r.result.detail, GpuDetail) and r.result.detail.result_json
        doc = json.loads(Path(r.result.detail.result_json).read_text())
        starts = [s for st in doc["stages"].values() for s in st["startup"] if s.get("op") == "started"]
        seen[r.worker] = {s["visible_devices"] for s in starts}
        assert r.result.verdict in ("PASS", "FAIL", "NO_DECISION") and doc["evidence"]["ok"]
    assert seen == {"gpu 0": {"0"}, "gpu 1": {"1"}}  # every engine of an arena on its own GPU


def test_validator_flags_build_the_pool_or_say_why_not():
    from arena import qualifier_from_config
    from arena.cpu.qualifier import CpuQualifier
    from cacheon_subnet.errors import UsageError
    from cacheon_subnet.validator.commands import fan_out

    gpu = qualifier_from_config(REPO / "configs" / "arena" / "dense.toml", preflight=False)
    pool = fan_out(gpu, "0,1,2+3", None)
    assert isinstance(pool, LocalPool) and sorted(q.devices for q in pool._bound.values()) == ["0", "1", "2,3"]
    assert pool.arena_id == gpu.arena_id and pool.head_to_head
    pool.close()
    assert fan_out(gpu, None, None) is gpu
    for args, why in (
        ((gpu, "0", "auto"), "exclude each other"),
        ((CpuQualifier(), "0", None), "GPU arena"),
        ((gpu, "a,b", None), "GPU indices"),
        ((gpu, None, "http://x"), "ray://"),
    ):
        with pytest.raises(UsageError, match=why):
            fan_out(*args)
