"""Shutdown and crash recovery (issue 16, item 4), with real processes: a SIGTERM stops the
engine in flight (its whole group, grandchildren included) within pm2's kill timeout, and the
verdict in flight is NO_DECISION and due again; after a kill -9 the next start reaps what the
crashed run left before it uses the GPU."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
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

from cacheon_subnet import lifecycle, sandbox
from cacheon_subnet.chain import LocalChain
from cacheon_subnet.validator import ledger
from cacheon_subnet.validator.loop import Validator, ValidatorConfig

HERE = Path(__file__).resolve().parent
PM2_KILL_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def srv():
    with FileServer() as s:
        yield s


@pytest.fixture(autouse=True)
def _clear_shutdown():
    lifecycle.SHUTDOWN.clear()
    yield
    lifecycle.SHUTDOWN.clear()
    lifecycle.set_lease_dir(None)


def _world(tmp: Path, srv) -> Path:
    chain = make_chain(tmp / "chain.db", miners=1)
    a, da = make_archive(EXAMPLES / "norm.rmsnorm", tmp, "a", {"speed.txt": "1.2"})
    commit(chain, "m0", da, srv.add(f"{tmp.name}-a.tar.gz", a))
    chain.advance(2)
    chain.close()
    return tmp / "chain.db"


def _start(tmp: Path, chain: Path, mode: str, env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "shutdown_worker.py"), str(chain), str(tmp / "state"), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **env},
        cwd=HERE.parents[1],
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("engine "):
            return proc, int(line.split()[1])
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("the worker never started its engine")


def _wait_engine(tmp: Path) -> list[int]:
    """Until the stand-in engine runs its grandchild (`sleep`), as SGLang runs its scheduler."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        procs = _engine_procs(tmp)
        if any(Path(f"/proc/{p}/comm").read_text().strip() == "sleep" for p in procs if Path(f"/proc/{p}").exists()):
            return procs
        time.sleep(0.05)
    raise AssertionError(f"the engine's grandchild never ran ({_engine_procs(tmp)})")


def _engine_procs(tmp: Path) -> list[int]:
    return lifecycle._holders(str(tmp / "engine-scratch"))


def _wait_gone(tmp: Path, s: float) -> list[int]:
    deadline = time.monotonic() + s
    while _engine_procs(tmp) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _engine_procs(tmp)


def _row(tmp: Path):
    v = Validator(
        ValidatorConfig(
            netuid=NETUID,
            hotkey=VALIDATOR,
            state_dir=tmp / "state",
            interval_s=0,
            targets=("norm.rmsnorm",),
            retry_base_s=0.0,
            retry_max_s=0.0,
        ),
        LocalChain.open(tmp / "chain.db"),
        FakeQualifier(),
        screener=fake_screener(),
    )
    return v, v.db.contributions()[0]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_the_engine_in_flight_and_its_verdict_is_retried(tmp_path, srv, sig):
    chain = _world(tmp_path, srv)
    proc, _pid = _start(tmp_path, chain, "signals", {})
    assert len(_wait_engine(tmp_path)) >= 2  # the engine and its grandchild (SGLang's scheduler)
    t0 = time.monotonic()
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=PM2_KILL_TIMEOUT_S)
    took = time.monotonic() - t0
    assert proc.returncode == 0 and "stopped" in out, out[-2000:]
    assert took < PM2_KILL_TIMEOUT_S / 2, f"shutdown took {took:.1f} s"
    assert _wait_gone(tmp_path, 2) == [], "an engine process outlived the validator"
    v, c = _row(tmp_path)
    try:
        # the engine died under the arena (which then said FAIL): not the bundle's verdict
        assert c.state == "verified" and c.attempts == 0, (c.state, c.reason)
        assert "NO_DECISION, interrupted by shutdown" in c.reason
        assert ledger.evidence_rows(v.db, c.id) == []
        assert list((tmp_path / "state" / "children").iterdir()) == []  # its lease record is gone
        v.run_once()  # the restart qualifies it again
        assert v.db.contribution(c.id).state == "qualified"
    finally:
        v.close()


@pytest.mark.parametrize("weak", [False, True])
@pytest.mark.slow
def test_kill_9_leftovers_are_reaped_before_the_next_start(tmp_path, srv, weak):
    """Behind the wall, bwrap --die-with-parent takes the engine down with the validator. In weak
    mode the direct child has PR_SET_PDEATHSIG, but its grandchild survives: the next start must
    find it through the lease record and kill it."""
    if not weak and not sandbox.can_drop_privileges():
        pytest.skip("the sandbox wall cannot be established here")
    chain = _world(tmp_path, srv)
    proc, pid = _start(tmp_path, chain, "crash", {"CACHEON_SANDBOX": "weak"} if weak else {})
    _wait_engine(tmp_path)
    proc.kill()
    proc.wait(timeout=10)
    time.sleep(0.5)
    assert (tmp_path / "state" / "children" / f"{pid}.json").exists()
    left = _engine_procs(tmp_path)
    if weak:
        assert left, "expected the weak-mode grandchild to survive the crash (else this test tests nothing)"
    else:
        assert _wait_gone(tmp_path, 10) == [], "bwrap --die-with-parent did not take the engine down"
    v, c = _row(tmp_path)  # the restart: reaps in Validator.__init__, before any stage
    try:
        assert _engine_procs(tmp_path) == []
        assert not (tmp_path / "state" / "children" / f"{pid}.json").exists()
        assert c.state == "verified"  # never recorded: qualified again by this run
    finally:
        v.close()


def test_reaping_spares_a_process_that_reused_the_pid(tmp_path):
    """A lease record whose pid now belongs to something else (no matching scratch): left alone."""
    other = subprocess.Popen(["sleep", "30"])
    try:
        d = tmp_path / "children"
        d.mkdir()
        (d / f"{other.pid}.json").write_text(f'{{"pid": {other.pid}, "scratch": "{tmp_path}/gone-scratch"}}')
        (d / "junk.json").write_text("{not json")
        found = lifecycle.reap_leftovers(d)
        assert other.poll() is None and found == [{"pid": other.pid, "scratch": f"{tmp_path}/gone-scratch", "killed": []}]
        assert list(d.iterdir()) == []
    finally:
        other.kill()
        other.wait()


HANGING_JOB = {
    "engine_kwargs": {},
    "engine_factory": "tests.arena.fake_engine:HangingEngine",
    "checkpoint": None,
    "steps": [],
}


def _interrupt_hanging_engine(tmp_path, env: dict | None = None) -> tuple[dict, float]:
    """Start the hanging fake engine through arena.engine.host.run_engine in a thread, request a shutdown
    once it is live; returns what the thread saw (run / interrupted) and when the request went out."""
    import threading

    from arena.engine.host import EngineSpec, run_engine

    out: dict = {}

    def go():
        try:
            out["run"] = run_engine(EngineSpec("hang", HANGING_JOB, env=env or {}, timeout_s=120), tmp_path)
        except lifecycle.Interrupted as e:
            out["interrupted"] = str(e)

    t = threading.Thread(target=go)
    t.start()
    deadline = time.monotonic() + 60
    while not lifecycle.live() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    t0 = time.monotonic()
    lifecycle.request_shutdown()
    t.join(timeout=PM2_KILL_TIMEOUT_S)
    assert not t.is_alive(), out
    return out, t0


def test_an_interrupted_arena_engine_raises_and_frees_its_group(tmp_path):
    """arena.engine.host.run_engine notices the shutdown, kills its group, waits for the GPU, raises
    Interrupted (never an EngineRun a verdict could be made from)."""
    out, t0 = _interrupt_hanging_engine(tmp_path)
    assert "interrupted" in out, out
    assert time.monotonic() - t0 < PM2_KILL_TIMEOUT_S / 2
    assert lifecycle._holders(str(tmp_path / "hang-scratch")) == [] and lifecycle.live() == {}


@pytest.mark.slow
def test_an_interrupted_engine_waits_for_its_own_gpu_to_be_free(tmp_path, monkeypatch):
    """On shutdown the arena host waits until the memory of the GPU the engine ran on is back to its
    pre-engine level before it raises (a restart must find the GPU free). A stand-in nvidia-smi:
    GPU 3 (this arena's) holds the engine's memory for two readings after the kill."""
    import arena.engine.host as host

    asked: list[str | None] = []
    held = {"n": 0}

    def used(visible=None):
        asked.append(visible)
        if visible != "3":
            return [0, 0, 0, 0]  # every GPU of the host, as nvidia-smi without --id reads them
        if not lifecycle.SHUTDOWN.is_set():
            return [1000]  # before the engine: the baseline
        held["n"] += 1
        return [70000] if held["n"] <= 2 else [1200]

    monkeypatch.setattr(host, "gpu_memory_used_mib", used)
    out, _ = _interrupt_hanging_engine(tmp_path, {"CUDA_VISIBLE_DEVICES": "3"})
    assert "gpu free: True" in out.get("interrupted", ""), out
    assert held["n"] == 3 and set(asked) == {"3"}, asked  # waited, on the arena's own GPU only
