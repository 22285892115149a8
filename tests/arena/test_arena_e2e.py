"""A whole qualification on CPU: host, engine driver process, real seam activation, route swaps,
receipts, teacher grading and verdicts — only sglang.Engine is a fake (tests/arena/fake_engine.py).

Each arena control from the issue: faithful passes quality; numerically wrong fails quality;
a stock-equivalent never gets a crown; a kernel that never fires fails on evidence; a kernel that
raises fails (strict engine abort); a candidate that is really faster passes speed."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace

import arena_harness as h
import pytest

from cacheon_subnet.bundle import load_bundle

EXAMPLES = h.REPO / "examples"


@pytest.fixture
def env(tmp_path, monkeypatch):
    h.runtime_env(tmp_path, monkeypatch)
    return tmp_path


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """One qualification of the faithful Triton example on the small default config (a whole CPU
    arena each is ~25 s): read by the tests of its verdict, the result's shape and its summary."""
    from conftest import searchable

    tmp = searchable(tmp_path_factory.mktemp("default-run"))
    with pytest.MonkeyPatch.context() as mp:
        h.runtime_env(tmp, mp)
        b = load_bundle(EXAMPLES / "norm.rmsnorm")
        return b, h.run(b, tmp), tmp


@pytest.mark.slow
def test_faithful_triton_example_passes_quality_and_is_never_crowned_on_cpu_timing(default_run):
    _, r, tmp = default_run
    assert r["evidence"]["ok"], r["evidence"]
    assert r["quality"]["verdict"] == "PASS", r["quality"]
    assert r["verdict"] in ("FAIL", "NO_DECISION")  # the interpreted kernel is slower than stock
    assert (tmp / "work" / "result.json").exists()
    routes = r["evidence"]["routes"]["0"]
    assert [a["route"] for a in routes][:2] == ["stock", "candidate"]
    assert all(a["fired_during_capture"]["norm.rmsnorm"] > 0 for a in routes if a["route"] == "candidate")
    assert all(a["fired_during_capture"]["norm.rmsnorm"] == 0 for a in routes if a["route"] == "stock")


@pytest.mark.slow
def test_wrong_math_fails_quality(env):
    r = h.run(load_bundle(EXAMPLES / "controls" / "wrong_math"), env)
    assert r["verdict"] == "FAIL"
    assert r["reason"].startswith("quality:"), r["reason"]
    assert r["quality"]["verdict"] == "FAIL"


@pytest.mark.slow
def test_raising_kernel_aborts_the_engine_and_fails(env):
    r = h.run(load_bundle(EXAMPLES / "controls" / "raises_in_call"), env)
    assert r["verdict"] == "FAIL"
    assert "strict mode" in r["reason"] and "always fails" in r["reason"]


@pytest.mark.slow
def test_kernel_that_never_fires_fails_on_evidence(env):
    """Fails right after start-up (graphs captured without calling it), before any window."""
    src = env / "fp32_only"
    shutil.copytree(EXAMPLES / "norm.rmsnorm", src)
    m = src / "manifest.toml"
    m.write_text(m.read_text().replace('dtypes = ["bfloat16", "float16", "float32"]', 'dtypes = ["float32"]'))
    r = h.run(load_bundle(src), env)
    assert r["verdict"] == "FAIL"
    assert "execution evidence" in r["reason"] and "never runs in this engine" in r["reason"]
    assert "speed" not in r and r["windows"] == []  # stopped at start-up, never timed


@pytest.mark.slow
def test_never_firing_without_graphs_is_caught_by_final_evidence(env):
    from dataclasses import replace

    src = env / "fp32_only2"
    shutil.copytree(EXAMPLES / "norm.rmsnorm", src)
    m = src / "manifest.toml"
    m.write_text(m.read_text().replace('dtypes = ["bfloat16", "float16", "float32"]', 'dtypes = ["float32"]'))
    cfg = h.small_config()
    cfg = replace(cfg, engine=replace(cfg.engine, cuda_graph=False))
    r = h.run(load_bundle(src), env, cfg=cfg)
    assert r["verdict"] == "FAIL" and "no 'fired' receipt" in r["reason"] and "speed" not in r


@pytest.mark.slow
def test_the_validators_path_sends_only_a_speed_pass_to_the_teacher(env):
    """A stock-speed kernel gets no crown, with a noise limit (0.5) that lets the speed bar decide:
    on the validator's path (no grade_always) no teacher engine starts for it, and the reason says
    quality was not graded. (A faithful kernel's quality PASS beside a no-crown verdict, graded:
    the Triton example above and test_head_to_head_against_an_incumbent.)"""
    r = h.run(
        h.torch_bundle("plain"), env, cfg=h.small_config(prompts=6, output=6, cycles=3, max_noise=0.5), grade_always=False
    )
    assert r["verdict"] in ("FAIL", "NO_DECISION"), r["reason"]
    assert "teacher" not in r["stages"] and "quality" not in r, sorted(r["stages"])
    assert "quality not graded" in r["reason"], r["reason"]


@pytest.mark.slow
def test_really_faster_candidate_passes(env):
    r = h.run(
        h.torch_bundle(), env, engine="SlowStockEngine", cfg=h.small_config(prompts=6, output=6, cycles=3, max_noise=0.5)
    )
    assert r["evidence"]["ok"] and r["quality"]["verdict"] == "PASS"
    assert r["speed"]["ratio"] > 1.5, r["speed"]
    assert r["verdict"] == "PASS", r["reason"]
    assert r["confirm"]["speed"]["verdict"] == "PASS" and "confirmed in a fresh engine" in r["reason"]
    assert r["confirm"]["evidence"]["ok"] and len(r["confirm"]["windows"]) == 1 + 4 * 3


def _decode_clock(cfg):
    return replace(cfg, speed=replace(cfg.speed, metric="decode_gpu_tokens_per_s"))


@pytest.mark.slow
def test_really_faster_candidate_passes_on_the_decode_step_clock(env):
    """The dense arena's verdict clock: decode steps' spans; wall and prefill clocks guard it."""
    r = h.run(
        h.torch_bundle("decode"),
        env,
        engine="SlowStockEngine",
        cfg=_decode_clock(h.small_config(prompts=6, output=6, cycles=3, max_noise=0.5)),
    )
    assert r["metric"] == "decode_gpu_tokens_per_s" and r["verdict"] == "PASS", r["reason"]
    timed = [w for w in r["windows"] if w["role"] != "warmup"]
    assert all(0 < w["decode_gpu_s"] < w["gpu_s"] and w["extend_gpu_s"] > 0 for w in timed)
    assert {"decode_gpu_tokens_per_s", "extend_gpu_tokens_per_s"} <= set(r["speed_by_metric"])


@pytest.mark.slow
def test_a_kernel_the_captured_graphs_never_ran_is_no_decision(env):
    """Fired at capture is not enough: the capture's call is outside the slot's ABI (a strided
    x for norm.rmsnorm, contiguous by its ABI), so the candidate runs only in eager steps while
    the decode clock times the graphs. The stock path is 5 ms slower (SlowStockCore) and the
    candidate wins every eager call, yet the verdict must not stand: NO_DECISION, naming it."""
    r = h.run(
        h.torch_bundle("strided"),
        env,
        engine="StridedCaptureEngine",
        cfg=_decode_clock(h.small_config(prompts=6, output=6, cycles=3, max_noise=0.5)),
    )
    assert r["verdict"] == "NO_DECISION", r["reason"]
    assert "outside its ABI" in r["reason"] and "abi: x not contiguous" in r["reason"], r["reason"]
    assert not r["evidence"]["ok"] and r["evidence"]["arena_problems"] and not r["evidence"]["problems"]
    assert "confirm" not in r["stages"] and "teacher" not in r["stages"], sorted(r["stages"])
    assert re.search(r"took [1-9]\d* call\(s\) and declined [1-9]", r["reason"]), r["reason"]  # it did fire ("bs 1")


@pytest.mark.slow
def test_a_kernel_no_captured_call_could_take_is_no_decision_before_any_window(env):
    """Every captured call outside the ABI: the early check stops the engine before timing, and
    names the ABI (the arena's defect), not "the kernel never runs" (the candidate's FAIL)."""
    r = h.run(
        h.torch_bundle("strided-all"),
        env,
        engine="AllStridedCaptureEngine",
        cfg=_decode_clock(h.small_config(prompts=6, output=6, cycles=3, max_noise=0.5)),
    )
    assert r["verdict"] == "NO_DECISION", r["reason"]
    assert "never ran in the captured graphs" in r["reason"] and "abi: x not contiguous" in r["reason"], r["reason"]
    assert not [w for w in r.get("windows", []) if w["role"] != "warmup"]


@pytest.mark.slow
def test_a_decode_gain_bought_with_prefill_time_is_no_crown(env):
    r = h.run(
        h.torch_bundle("prefill-tax"),
        env,
        engine="PrefillTaxEngine",
        cfg=_decode_clock(h.small_config(prompts=6, output=6, cycles=3, max_noise=0.5)),
    )
    by = r["speed_by_metric"]
    assert by["decode_gpu_tokens_per_s"]["verdict"] == "PASS" and by["output_tokens_per_s"]["ratio"] > 1
    assert r["verdict"] == "FAIL" and "the prefill clock reads" in r["reason"], r["reason"]


@pytest.mark.slow
def test_result_json_names_arena_bundle_and_windows(default_run):
    b, r, _ = default_run
    assert r["arena_id"] == h.small_config().arena_id and r["bundle_digest"] == b.digest
    roles = [w["role"] for w in r["windows"]]
    assert roles[0] == "warmup" and roles[1:5] == ["B", "C", "C", "B'"]
    assert r["stages"]["resident"]["routes"] and r["stages"]["teacher"]["gpu_free"] is None
    # the forward clock: every timed window carries its forward spans beside the wall clock, and
    # the run is judged on both (the verdict on [speed] metric, the other reported)
    timed = [w for w in r["windows"] if w["role"] != "warmup"]
    assert all(w["forwards"] > 0 and 0 < w["gpu_s"] <= w["s"] * 1.05 and w["gpu_tokens_per_s"] > 0 for w in timed)
    assert {"output_tokens_per_s", "gpu_tokens_per_s"} <= set(r["speed_by_metric"])


@pytest.mark.slow
def test_infrastructure_failure_is_no_decision_not_the_miners_fail(env):
    r = h.run(h.torch_bundle("infra"), env, engine="BrokenEngine")
    assert r["verdict"] == "NO_DECISION" and "infrastructure" in r["reason"] and "out of memory" in r["reason"]


def test_blame_needs_evidence():
    from arena.run import candidate_blame

    ok = {"rank": 0, "slots": {"s": {"fired": 3, "completed": 3}}, "errors": []}
    assert candidate_blame([ok], "s") == ""
    assert "recorded" in candidate_blame([dict(ok, errors=["s: RuntimeError('x')"])], "s")
    assert "never completed" in candidate_blame([{"rank": 0, "slots": {"s": {"fired": 9, "completed": 3}}}], "s")
    assert "failed to load" in candidate_blame([{"rank": 1, "slots": {"s": {"load_failed": 1}}}], "s")


@pytest.mark.slow
def test_stock_as_candidate_control_measures_role_bias(env):
    """Role bias: SGLang's own kernel in the candidate route (no contribution code). The same
    kernels run in every role, so there is no teacher stage and no crown is possible."""
    from arena.run import RunOptions, qualify, stock_control_op

    opts = RunOptions(
        workdir=env / "w",
        checkpoint_root=env / "c",
        engine_factory="tests.arena.fake_engine:FakeEngine",
        control="stock-as-candidate",
    )
    r = qualify(h.small_config(prompts=6, output=6, cycles=3, max_noise=0.5), None, stock_control_op("norm.rmsnorm"), opts)
    assert r["control"] == "stock-as-candidate" and r["bundle_digest"] == "stock-as-candidate"
    assert r["evidence"]["ok"] and "quality" not in r and "teacher" not in r["stages"]
    assert isinstance(r["role_bias"], float) and r["verdict"] in ("FAIL", "NO_DECISION")
    assert r["reason"].startswith("control stock-as-candidate (role bias")


@pytest.mark.slow
def test_handicap_control_is_crowned_through_the_whole_pass_path(env):
    """A known speedup: B/B′ run stock + 5 ms per call, C plain stock. The arena must find it
    (quality PASS against T, speed PASS, confirmed in a fresh engine), with both routes' receipts."""
    from arena.run import RunOptions, qualify, stock_control_op

    opts = RunOptions(
        workdir=env / "w",
        checkpoint_root=env / "c",
        engine_factory="tests.arena.fake_engine:FakeEngine",
        control="handicap",
        handicap_us=5000.0,
    )
    r = qualify(h.small_config(prompts=6, output=6, cycles=3, max_noise=0.5), None, stock_control_op("norm.rmsnorm"), opts)
    assert r["control"] == "handicap" and r["handicap_us"] == 5000.0 and "spin" in r["baseline"]
    assert r["evidence"]["ok"] and "norm.rmsnorm@incumbent" in r["evidence"]["per_rank"]["0"]
    assert r["quality"]["verdict"] == "PASS" and r["speed"]["ratio"] > 1.5, r["speed"]
    assert r["verdict"] == "PASS" and "confirmed in a fresh engine" in r["reason"], r["reason"]
    assert r["reason"].startswith("control handicap (baseline +5000 µs per call)")


@pytest.mark.slow
def test_slowdown_control_is_a_clear_loser(env):
    """A known loss: C runs stock + 5 ms per call, B/B′ plain stock. FAIL on speed, never a crown,
    no teacher (only a speed PASS is graded); labelled as the control in the reason."""
    from arena.run import RunOptions, qualify, stock_control_op

    opts = RunOptions(
        workdir=env / "w",
        checkpoint_root=env / "c",
        engine_factory="tests.arena.fake_engine:FakeEngine",
        control="slowdown",
        handicap_us=5000.0,
    )
    r = qualify(h.small_config(prompts=6, output=6, cycles=2, max_noise=0.5), None, stock_control_op("norm.rmsnorm"), opts)
    assert r["control"] == "slowdown" and "slowdown" in r["candidate_control"] and r["baseline"] == "stock"
    assert r["evidence"]["ok"] and r["speed"]["ratio"] < 0.8, r["speed"]
    assert r["verdict"] == "FAIL" and "teacher" not in r["stages"], r["reason"]
    assert r["reason"].startswith("control slowdown (candidate +5000 µs per call)")


def test_control_options_are_checked(env):
    from arena.run import RunOptions, qualify, stock_control_op

    cfg, op = h.small_config(), stock_control_op("norm.rmsnorm")
    for bad in (
        dict(control="handicap"),
        dict(control="slowdown"),
        dict(control="stock-as-candidate", handicap_us=5.0),
        dict(control="bogus"),
    ):
        with pytest.raises(ValueError):
            qualify(
                cfg,
                None,
                op,
                RunOptions(
                    workdir=env / "w", checkpoint_root=env / "c", engine_factory="tests.arena.fake_engine:FakeEngine", **bad
                ),
            )


@pytest.mark.slow
def test_head_to_head_against_an_incumbent(env):
    """B and B′ run the crowned kernel, C the challenger; both must show their own receipts."""
    from arena.run import RunOptions, qualify

    ch, inc = h.torch_bundle("challenger"), h.torch_bundle("incumbent")
    opts = RunOptions(
        workdir=env / "w", checkpoint_root=env / "c", engine_factory="tests.arena.fake_engine:FakeEngine", grade_always=True
    )
    r = qualify(
        h.small_config(prompts=6, output=6, cycles=3, max_noise=0.5),
        ch,
        ch.manifest.ops[0],
        opts,
        incumbent=(inc, inc.manifest.ops[0]),
    )
    assert r["baseline"].startswith(f"incumbent {inc.digest}")
    assert r["evidence"]["ok"], r["evidence"]
    routes = [a["route"] for a in r["evidence"]["routes"]["0"]]
    assert routes[:3] == ["incumbent", "candidate", "incumbent"]
    per_rank = r["evidence"]["per_rank"]["0"]
    assert per_rank["norm.rmsnorm"]["fired"] > 0 and per_rank["norm.rmsnorm@incumbent"]["fired"] > 0
    assert r["quality"]["verdict"] == "PASS" and r["verdict"] in ("FAIL", "NO_DECISION")  # equal kernels


@pytest.mark.slow
def test_raising_incumbent_is_not_the_challengers_fail(env):
    from arena.run import RunOptions, qualify

    ch = h.torch_bundle("ch2")
    inc = load_bundle(EXAMPLES / "controls" / "raises_in_call")
    opts = RunOptions(workdir=env / "w", checkpoint_root=env / "c", engine_factory="tests.arena.fake_engine:FakeEngine")
    r = qualify(h.small_config(), ch, ch.manifest.ops[0], opts, incumbent=(inc, inc.manifest.ops[0]))
    assert r["verdict"] == "NO_DECISION", r["reason"]


@pytest.mark.slow
def test_human_summary_names_verdict_speed_quality_and_evidence(default_run):
    from arena.commands import summary

    _, r, _ = default_run
    text = summary(r)
    assert r["verdict"] in text.splitlines()[1] and "speed: C/B" in text and "quality: PASS" in text
    assert "evidence: ok" in text and "engine resident" in text and "route swaps" in text
    assert "by output_tokens_per_s: C/B" in text and "the verdict)" in text and "by gpu_tokens_per_s" in text


@pytest.mark.slow
def test_a_gain_the_fresh_engine_does_not_confirm_is_no_decision(env):
    r = h.run(
        h.torch_bundle("unconfirmed"),
        env,
        engine="UnconfirmedEngine",
        cfg=h.small_config(prompts=6, output=6, cycles=3, max_noise=0.5),
    )
    assert r["speed"]["verdict"] == "PASS" and r["confirm"]["speed"]["verdict"] != "PASS"
    assert r["verdict"] == "NO_DECISION" and "not confirmed" in r["reason"]
