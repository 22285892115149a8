"""The sequential stop wired through the whole arena on CPU (fake engine, real host, driver,
seams): after each cycle the host's SPRT says go or stop over the job pipe; a clear loser stops
after min_cycles with no teacher started, a clear winner stops early and is still confirmed in a
fresh engine; a driver that runs on after a stop is forging."""

from __future__ import annotations

from dataclasses import replace

import arena_harness as h
import pytest

from arena.config_sections import SequentialSection


@pytest.fixture
def env(tmp_path, monkeypatch):
    h.runtime_env(tmp_path, monkeypatch)
    return tmp_path


def _seq(cfg, enabled=True, stop_on_pass=False):
    # CPU windows are tiny and noisy (per-cycle SD of log C/B ~10-30 % on a shared box), so the
    # test is set for a 30 % gain: the wiring is under test here, the rates in test_sequential.py
    return replace(
        cfg, sequential=SequentialSection(enabled=enabled, alt_gain=0.3, sigma=0.05, min_cycles=2, stop_on_pass=stop_on_pass)
    )


@pytest.mark.slow
def test_a_clear_loser_stops_after_min_cycles_without_a_teacher(env):
    # stops at cycle 2 (min_cycles) on a quiet box; under CI load (3 workers on 2 cores, 2026-12-05) one
    # stalled window raised the run's SD to 69 % and the SPRT needed cycle 3: so 6 configured cycles,
    # and the test reads "stopped early, never before min_cycles", not the exact cycle
    cfg = _seq(h.small_config(cycles=6, max_noise=0.5))
    r = h.run(h.torch_bundle("loser"), env, engine="SlowCandidateEngine", cfg=cfg)
    gated = [s["gated"] for s in r["sequential"]]
    ran = len(gated)
    assert r["verdict"] == "FAIL" and f"sequential stop after {ran} of 6 cycles" in r["reason"], r["reason"]
    assert 2 <= ran < 6 and gated[0] == "CONTINUE" and gated[-1] == "FAIL", gated  # cycle 1 < min_cycles
    assert len(r["windows"]) == 1 + 4 * ran  # warm-up + the cycles run: the rest never ran
    assert "teacher" not in r["stages"] and r["evidence"]["ok"]


@pytest.mark.slow
def test_a_clear_winner_stops_early_and_is_still_confirmed(env):
    cfg = _seq(h.small_config(prompts=6, output=6, cycles=6, max_noise=0.5), stop_on_pass=True)
    r = h.run(h.torch_bundle("seq"), env, engine="SlowStockEngine", cfg=cfg)
    assert r["verdict"] == "PASS" and "confirmed in a fresh engine" in r["reason"], r["reason"]
    # stops at the first cycle the SPRT decides (cycle 2 on a quiet box; a loaded one may need 3-4:
    # one window stalled by a co-tenant raises the run's own SD, which the SPRT uses when it is the
    # larger), before the configured 6: the cycles after it never ran
    ran = len(r["sequential"])
    assert r["sequential"][-1]["gated"] == "PASS" and 2 <= ran < 6 and len(r["windows"]) == 1 + 4 * ran, r["sequential"]
    assert r["quality"]["verdict"] == "PASS" and len(r["confirm"]["windows"]) == 1 + 4 * 3


@pytest.mark.slow
def test_by_default_a_winner_runs_every_cycle_and_only_a_loser_stops_early(env):
    """`stop_on_pass` off (every shipped config): the SPRT's PASS is recorded but the cycles go on,
    so a kernel fast only in its first cycles meets the fixed rule over all of them."""
    # 6 cycles: on a loaded box (3 test workers on 2 cores, 2026-12-05) a stalled window raised the
    # run's SD to 0.70 and the SPRT had not yet decided at cycle 3 (log-LR 4.5 against 5.25)
    cfg = _seq(h.small_config(prompts=6, output=6, cycles=6, max_noise=0.5))
    r = h.run(h.torch_bundle("seq"), env, engine="SlowStockEngine", cfg=cfg)
    assert r["verdict"] == "PASS" and "confirmed in a fresh engine" in r["reason"], r["reason"]
    assert len(r["windows"]) == 1 + 6 * 4 and all(s["gated"] == "CONTINUE" for s in r["sequential"]), r["sequential"]
    assert any(s["decision"] == "PASS" for s in r["sequential"]), r["sequential"]  # decided, held back


def test_a_record_after_the_hosts_stop_is_forging():
    from arena.engine.channel import RecordStream, seal

    job = seal({"steps": [{"op": "generate", "tag": "a", "gate": True}, {"op": "generate", "tag": "b"}]}, answers=False)
    s = RecordStream(job)
    assert job["steps"][0]["gate_nonce"] and s.feed(
        b'{"op":"generate","step":"a","nonce":"%s"}' % job["steps"][0]["nonce"].encode()
    )
    s.stop()
    s.feed(b'{"op":"generate","step":"b","nonce":"%s"}' % job["steps"][1]["nonce"].encode())
    assert s.forgery and "after the host stopped the run" in s.forgery
    # the gate nonce is the host's reply, never a record's
    s2 = RecordStream(job)
    s2.feed(b'{"op":"generate","step":"a","nonce":"%s"}' % job["steps"][0]["gate_nonce"].encode())
    assert s2.forgery and "RPC nonce" in s2.forgery


def test_the_driver_takes_a_go_stop_only_with_the_hosts_gate_nonce():
    import io

    from arena.engine.child import Driver
    from seams.answers import ForgeryError

    step = {"tag": "w004-B'", "gate": True, "gate_nonce": "n-123"}
    for line, want in (('{"nonce": "n-123", "go": false}\n', False), ('{"nonce": "n-123", "go": true}\n', True)):
        assert Driver({"steps": []}, -1, io.StringIO(line)).go(step) is want
    for bad in ('{"nonce": "other", "go": false}\n', '{"go": false}\n', "stop\n", '{"nonce": "n-123", "go": 0}\n'):
        with pytest.raises(ForgeryError):
            Driver({"steps": []}, -1, io.StringIO(bad)).go(step)
    with pytest.raises(RuntimeError, match="closed the job pipe"):
        Driver({"steps": []}, -1, io.StringIO("")).go(step)


def test_gates_sit_after_every_cycle_but_the_last_and_only_when_asked():
    from arena.jobs import resident_steps

    cfg = h.small_config(cycles=3)
    steps, windows = resident_steps(cfg, gates=True)
    gated = [s["tag"] for s in steps if s.get("gate")]
    assert gated == [f"w{i:03d}-B'" for i in (4, 8)]  # warm-up w000; cycles end at w004, w008, w012
    assert not any(s.get("gate") for s in resident_steps(cfg)[0])
