"""Host-owned engine lifecycle: records survive, a hung engine is killed with its whole group."""

from __future__ import annotations

import secrets
import subprocess
import threading
import time
from pathlib import Path

import pytest

from arena.engine.host import EngineSpec, run_engine


def job(factory: str, steps: list) -> dict:
    return {"engine_kwargs": {}, "engine_factory": f"tests.arena.fake_engine:{factory}", "checkpoint": None, "steps": steps}


@pytest.mark.slow
def _marked(marker: str) -> list[str]:
    """`sleep 300` processes that carry this run's marker in their environment: another test's
    hanging engine (another xdist worker, at the same moment) is not this engine's grandchild."""
    found = []
    for pid in subprocess.run(["pgrep", "-f", "sleep 300"], capture_output=True, text=True).stdout.split():
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        if f"CACHEON_TEST_MARK={marker}".encode() in env:
            found.append(pid)
    return found


def test_hung_engine_is_killed_with_its_group(tmp_path):
    marker = secrets.token_hex(8)
    t = time.monotonic()
    spec = EngineSpec("hang", job("HangingEngine", []), timeout_s=4, env={"CACHEON_TEST_MARK": marker})
    runs = []
    worker = threading.Thread(target=lambda: runs.append(run_engine(spec, tmp_path)))
    worker.start()
    seen = False
    while worker.is_alive() and not seen:  # the marker reaches the grandchild: the check below can see it
        seen = bool(_marked(marker))
        time.sleep(0.1)
    worker.join()
    (run,) = runs
    assert seen, "the engine's grandchild was never seen with the run's marker"
    assert run.timed_out and time.monotonic() - t < 60
    assert "wall-clock limit" in run.error
    assert _marked(marker) == [], "a grandchild of the engine survived"


def test_the_marker_finds_a_surviving_grandchild(tmp_path):
    """The check above can fail: a marked `sleep 300` left running is found."""
    marker = secrets.token_hex(8)
    p = subprocess.Popen(["sleep", "300"], env={"PATH": "/usr/bin:/bin", "CACHEON_TEST_MARK": marker})
    try:
        assert _marked(marker) == [str(p.pid)]
    finally:
        p.kill()
        p.wait()


@pytest.mark.slow
def test_step_records_and_errors_are_kept(tmp_path):
    steps = [
        {
            "op": "generate",
            "tag": "g",
            "prompts": {"seed": 1, "n": 2, "len": 4, "low": 10, "high": 500},
            "max_new_tokens": 3,
            "top_k": 0,
            "keep_outputs": True,
        },
        {"op": "route", "route": "stock", "epoch": 1},
    ]  # no candidate active: the RPC must fail
    run = run_engine(EngineSpec("e", job("FakeEngine", steps), timeout_s=120), tmp_path)
    g = run.step("g")
    assert g["out_tokens"] == 6 and len(g["sequences"]) == 2 and g["output_tokens_per_s"] > 0
    assert run.error and "cacheon_route" in run.error  # recorded, not swallowed
    assert run.rc == 3


@pytest.mark.slow
def test_stuck_start_is_killed_at_the_start_limit(tmp_path):
    t = time.monotonic()
    run = run_engine(EngineSpec("stuck", job("HangingEngine", []), timeout_s=120, start_timeout_s=3), tmp_path)
    assert run.timed_out and time.monotonic() - t < 40
    assert "start limit" in run.error


def test_gpu_free_means_memory_back_to_the_baseline(monkeypatch):
    import arena.engine.host as host

    readings = iter([[70000], [30000], [1500]])
    monkeypatch.setattr(host, "gpu_memory_used_mib", lambda visible=None: next(readings))
    monkeypatch.setattr(host.time, "sleep", lambda s: None)
    assert host._wait_gpu_free([1000], timeout_s=60) is True  # 1500 <= 1000 + 1024 slack
    monkeypatch.setattr(host, "gpu_memory_used_mib", lambda visible=None: [70000])
    assert host._wait_gpu_free([1000], timeout_s=0) is False  # an engine still holds the GPU
    assert host._wait_gpu_free(None, timeout_s=1) is None  # no nvidia-smi: cannot be seen


@pytest.mark.slow
def test_engine_scratch_is_removed_records_and_log_stay(tmp_path):
    steps = [
        {
            "op": "generate",
            "tag": "g",
            "prompts": {"seed": 1, "n": 1, "len": 4, "low": 10, "high": 500},
            "max_new_tokens": 2,
            "top_k": 0,
        }
    ]
    run = run_engine(EngineSpec("s", job("FakeEngine", steps), timeout_s=120), tmp_path)
    assert run.error is None and run.step("g")["out_tokens"] == 2
    assert not (tmp_path / "s-scratch").exists()
    assert (tmp_path / "s.jsonl").exists() and (tmp_path / "s.log").exists()


def test_every_engine_gets_private_jit_caches_seeded_never_shared(tmp_path, monkeypatch):
    """An operator's Triton cache is copied into the engine's scratch; the engine never sees the
    operator's path (a candidate writing cache entries could poison other engines' stock kernels,
    the pristine teacher's above all)."""
    import arena.engine.host as host

    op_cache = tmp_path / "operator-triton"
    (op_cache / "k").mkdir(parents=True)
    (op_cache / "k" / "stock.cubin").write_bytes(b"warm")
    # FlashInfer's variable names a base (an operator may point it at their HOME): only its
    # .cache/flashinfer is FlashInfer's cache, and only that is copied in
    op_home = tmp_path / "operator-home"
    (op_home / ".cache" / "flashinfer" / "ops").mkdir(parents=True)
    (op_home / ".cache" / "flashinfer" / "ops" / "k.so").write_bytes(b"warm fi")
    (op_home / ".bittensor" / "wallets").mkdir(parents=True)
    (op_home / ".bittensor" / "wallets" / "hotkey").write_bytes(b"secret")
    seen = {}

    def fake_launch(argv, *, scratch, policy, pass_fds, stdout, stderr, cwd):
        seen.update(policy.extra_env)
        seen["binds"] = dict(policy.fixed_binds)
        raise RuntimeError("stop here")

    monkeypatch.setattr(host.sandbox, "launch", fake_launch)
    spec = EngineSpec(
        "e",
        job("FakeEngine", []),
        env={"TRITON_CACHE_DIR": str(op_cache), "FLASHINFER_WORKSPACE_BASE": str(op_home)},
        timeout_s=5,
    )
    try:
        run_engine(spec, tmp_path / "w")
    except RuntimeError:
        pass
    scratch = tmp_path / "w" / "e-scratch"
    # inside, every engine sees its private copy at one fixed path (tvm-ffi keys builds by it)
    assert seen["TRITON_CACHE_DIR"] == host.JIT_INSIDE + "/triton"
    assert seen["binds"][str(scratch / "cache" / "triton")] == host.JIT_INSIDE + "/triton"
    assert all(str(op_cache) not in v for v in seen.values())
    assert (scratch / "cache" / "triton" / "k" / "stock.cubin").read_bytes() == b"warm"
    assert {"TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME", "TVM_FFI_CACHE_DIR"} <= set(seen)
    # FlashInfer's JIT workspace: a private copy at its one fixed path (its build.ninja holds it)
    assert seen["FLASHINFER_WORKSPACE_BASE"] == host.JIT_INSIDE + "/flashinfer"
    assert seen["binds"][str(scratch / "cache" / "flashinfer")] == host.JIT_INSIDE + "/flashinfer"
    fi = scratch / "cache" / "flashinfer"
    assert (fi / ".cache" / "flashinfer" / "ops" / "k.so").read_bytes() == b"warm fi"
    assert not (fi / ".bittensor").exists()  # the rest of the operator's base never reaches an engine
    assert all(str(op_home) not in v for v in seen.values() if isinstance(v, str))


def test_only_engines_without_contribution_code_warm_the_operators_cache(tmp_path):
    """A candidate's engine must never write into a cache a later engine (T, B) reads."""
    from arena.engine.host import EngineSpec, may_warm_caches
    from arena.engine.jit_copies import warm_seed_caches

    assert may_warm_caches(EngineSpec("teacher", {}, {"CACHEON_SEAM_NORM": "0"}))
    assert not may_warm_caches(EngineSpec("resident", {}, {"CACHEON_ENGINE_TREE": "/x/tree"}))
    private, seed = tmp_path / "private", tmp_path / "seed"
    (private / "k").mkdir(parents=True)
    (seed / "k").mkdir(parents=True)
    (private / "k" / "new.bin").write_bytes(b"compiled")
    (private / "k" / "old.bin").write_bytes(b"poisoned")
    (seed / "k" / "old.bin").write_bytes(b"original")
    (private / "k" / "link").symlink_to("/etc/shadow")
    warm_seed_caches({"TRITON_CACHE_DIR": str(private)}, {"TRITON_CACHE_DIR": str(seed)})
    assert (seed / "k" / "new.bin").read_bytes() == b"compiled"
    assert (seed / "k" / "old.bin").read_bytes() == b"original"  # never overwritten
    assert not (seed / "k" / "link").exists()  # links are not copied


@pytest.mark.slow
def test_timed_steps_tick_a_progress_bar(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("CACHEON_PROGRESS", "1")  # forced: pytest's stderr is no terminal
    steps = [
        {
            "op": "generate",
            "tag": f"g{i}",
            "prompts": {"seed": i, "n": 1, "len": 4, "low": 10, "high": 500},
            "max_new_tokens": 2,
            "top_k": 0,
        }
        for i in range(2)
    ]
    run = run_engine(EngineSpec("p", job("FakeEngine", steps), timeout_s=120), tmp_path)
    assert run.error is None
    err = capfd.readouterr().err
    assert "arena steps" in err and "0/2" in err and "1/2" in err  # ticks per step record (bar clears on close)


def _read_through_pipe(tmp_path, payload_for):  # noqa: ANN001, ANN202
    """The host's record reader fed `payload_for(sealed_job)` through a real pipe, as the driver
    writes it; returns the stream once the reader has ended."""
    import os
    import threading

    from arena.engine.channel import RecordStream, seal
    from arena.engine.record_reader import RecordReader

    sealed = seal({"steps": [{"op": "generate", "tag": "g"}]}, answers=False)
    stream = RecordStream(sealed)
    r, w = os.pipe()
    reader = RecordReader(r, stream, tmp_path / "copy.jsonl", None, None)
    reader.start()

    def write() -> None:
        try:
            os.write(w, payload_for(sealed))
        except OSError:  # the reader stopped reading: EPIPE
            pass
        os.close(w)

    t = threading.Thread(target=write, daemon=True)
    t.start()
    reader.join(60)
    t.join(10)
    assert not reader.is_alive()
    return stream


def test_a_long_record_line_split_across_reads_is_kept_whole(tmp_path):
    import json

    def payload(sealed: dict) -> bytes:
        pad = {"pad": ["x" * 1000] * 300}  # a field the record has (arena/engine/protocol.py: Started.diag)
        return json.dumps({"op": "started", "nonce": sealed["lifecycle_nonces"][0], "diag": pad}).encode() + b"\n"

    stream = _read_through_pipe(tmp_path, payload)
    assert stream.forgery is None and [r["op"] for r in stream.records] == ["started"]
    assert len((tmp_path / "copy.jsonl").read_bytes()) > 300_000


def test_a_record_line_without_end_is_cut_at_the_cap_and_is_forging(tmp_path, monkeypatch):
    """A line longer than any record the driver writes must not take the host's memory: the
    reader stops at MAX_RECORD_BYTES and names it."""
    import arena.engine.record_reader

    monkeypatch.setattr(arena.engine.record_reader, "MAX_RECORD_BYTES", 1 << 20)
    stream = _read_through_pipe(tmp_path, lambda sealed: b"{" + b"x" * (4 << 20))
    assert stream.forgery and "record line over" in stream.forgery, stream.forgery


def test_a_gate_that_raises_says_go_and_only_a_false_answer_stops():
    """The SPRT's gate decides whether a run stops early; a bug in it must never end a run (the
    windows are still good), so an exception reads as go, like no gate at all."""
    from arena.engine.record_reader import gate_says_go

    def broken(records):  # noqa: ANN001, ANN202
        raise ZeroDivisionError("a bug in the test")

    assert gate_says_go(None, ()) is True and gate_says_go(broken, ({"step": 1},)) is True
    assert gate_says_go(lambda r: False, ()) is False and gate_says_go(lambda r: len(r), ({"x": 1},)) is True
