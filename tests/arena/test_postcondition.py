"""The resident timed engine's post-condition, piece by piece (arena/engine/postcondition.py, the rank's
side in seams/resident.py, the record stream's post steps in arena/engine/channel.py): no engine here,
each check fed what would make it fail."""

from __future__ import annotations

import copy
import os
import types
from pathlib import Path

import pytest
import torch

from arena.engine import postcondition as pc
from arena.engine.channel import RecordStream, seal
from arena.engine.host import EngineRun
from seams import resident

LEFT = {
    "modules": [],
    "alive": [],
    "frames": [],
    "sys_path": [],
    "fds": [],
    "watched": 0,
    "installed": False,
    "registry": {"enabled": True, "route": "stock", "candidates": 0},
}
CANARY = [{"cont": [5, 6], "logprobs": [[5, -0.25], [6, -1.5]], "top": [[[5, -0.25]], [[6, -1.5]]]}]


def _run(canary=CANARY, digest="d0", left=LEFT) -> EngineRun:
    recs = (
        {"op": "remove", "step": "post-remove", "answers": {"remove": {"0": {"left": left}}}},
        {"op": "canary", "step": "post-canary", "outputs": canary},
        {"op": "state", "step": "post-state", "answers": {"state": {"0": {"digest": digest, "left": left}}}},
    )
    return EngineRun(recs, 0, False, 1.0, "", None)


REF = {"canary": CANARY, "digest": {"0": "d0"}}


def test_a_clean_engine_passes():
    assert pc.check(_run(), REF, (0,)) == []
    assert pc.reading(_run()) == REF


def test_a_canary_that_moved_by_one_ulp_fails():
    moved = copy.deepcopy(CANARY)
    moved[0]["logprobs"][1][1] = float(
        torch.nextafter(torch.tensor(-1.5, dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64))
    )
    assert any("canary" in w for w in pc.check(_run(canary=moved), REF, (0,)))
    other = copy.deepcopy(CANARY)
    other[0]["top"][0][0][0] = 7
    assert any("canary" in w for w in pc.check(_run(canary=other), REF, (0,)))


def test_a_digest_that_differs_or_is_missing_fails():
    assert any("digest" in w for w in pc.check(_run(digest="d1"), REF, (0,)))
    assert any("digest" in w for w in pc.check(_run(digest=None), REF, (0,)))
    assert any("digest" in w for w in pc.check(_run(), REF, (0, 1)))  # a rank that did not answer


@pytest.mark.parametrize(
    "key,value",
    [
        ("modules", ["cacheon_c_x.kernel"]),
        ("alive", ["cacheon_c_x.kernel.f"]),
        ("frames", ["thread 1: cacheon_c_x.kernel.loop"]),
        ("sys_path", ["/t/x"]),
        ("fds", ["/t/x/kernel.py"]),
        ("watched", 2),
        ("installed", True),
        ("registry", {"enabled": True, "route": "candidate", "candidates": 0}),
        ("registry", {"enabled": True, "route": "stock", "candidates": 1}),
        ("registry", {"enabled": False, "route": "stock", "candidates": 0}),
    ],
)
def test_anything_of_a_contribution_left_in_the_rank_fails(key, value):
    left = {**LEFT, key: value}
    assert pc.check(_run(left=left), REF, (0,)), (key, value)


def test_missing_post_steps_fail():
    run = EngineRun(_run().records[:1], 0, False, 1.0, "", None)
    assert pc.check(run, REF, (0,)) == ["the post-condition steps did not all report (remove, canary, state)"]
    assert any("no leftovers report" in w for w in pc.check(_run(left=None), REF, (0,)))  # type: ignore[arg-type]


def test_the_host_sees_a_file_an_engine_process_holds_open(tmp_path):
    f = tmp_path / "d" / "held"
    f.parent.mkdir()
    with open(f, "w"):
        assert pc.open_under([os.getpid()], [tmp_path / "d"]) != []
    assert pc.open_under([os.getpid()], [tmp_path / "d"]) == []


def test_the_sweep_deletes_only_what_the_job_added(tmp_path):
    d = tmp_path / "triton"
    (d / "old").mkdir(parents=True)
    (d / "old" / "k.cubin").write_bytes(b"stock")
    before = pc.files_of({"T": str(d)})
    (d / "new").mkdir()
    (d / "new" / "a.cubin").write_bytes(b"contribution")
    deleted, now = pc.sweep({"T": str(d)}, before)
    assert deleted == 1 and not (d / "new" / "a.cubin").exists() and (d / "old" / "k.cubin").exists()
    assert now == before


def test_post_steps_run_after_the_host_stopped_the_windows_and_nothing_else_does():
    steps = [
        {"op": "generate", "tag": "w0", "gate": True},
        {"op": "generate", "tag": "w1"},
        {"op": "remove", "tag": "post-remove", "post": True},
        {"op": "state", "tag": "post-state", "post": True},
    ]
    job = seal({"steps": steps}, answers=False)
    rec = [{"op": s["op"], "step": s["tag"], "nonce": s["nonce"]} for s in job["steps"]]
    stream = RecordStream(job)
    assert stream.feed(_line(rec[0])) is not None
    stream.stop()
    assert stream.feed(_line(rec[2])) is not None and stream.feed(_line(rec[3])) is not None
    assert stream.forgery is None
    late = RecordStream(job)
    late.feed(_line(rec[0]))
    late.stop()
    late.feed(_line(rec[1]))  # a window after the stop
    assert late.forgery and "after the host stopped" in late.forgery


def _line(rec: dict) -> bytes:
    import json

    return json.dumps(rec).encode()


# ---- the rank's side (seams/resident.py), in this process --------------------------------------


def test_the_digest_sees_one_bit_of_any_parameter_or_buffer():
    m = torch.nn.Module()
    m.w = torch.nn.Parameter(torch.zeros(4, dtype=torch.bfloat16), requires_grad=False)
    m.register_buffer("cos", torch.ones(3))
    d0, n = resident.weights_digest(m)
    assert n == 2 and d0 == resident.weights_digest(m)[0]
    m.w.data[1] = -0.0  # equal to 0.0 by value, not by bits
    assert resident.weights_digest(m)[0] != d0
    m.w.data[1] = 0.0
    m.cos[2] = 1.0000001
    assert resident.weights_digest(m)[0] != d0
    assert resident.weights_digest(None) == (None, 0)


def _rank(tmp: Path) -> resident.ResidentRank:
    for d in ("answers/start", "answers/job", "trees"):
        (tmp / d).mkdir(parents=True)
    env = {
        "CACHEON_RESIDENT_TREES": str(tmp / "trees"),
        "CACHEON_RESIDENT_ANSWERS": str(tmp / "answers"),
        "CACHEON_RECEIPT_DIR": str(tmp / "answers" / "start"),
    }
    sched = types.SimpleNamespace(tp_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace()))
    from seams.dispatch import Registry

    return resident.ResidentRank(sched, 0, Registry(enabled=True, route="stock"), env)


def test_the_rank_answers_only_into_a_job_dir_of_its_answers_root_and_opens_only_its_trees(tmp_path):
    r = _rank(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(ValueError, match="answers dir"):
        r.install({"CACHEON_STOCK_AS_CANDIDATE": "norm.rmsnorm"}, str(tmp_path / "elsewhere"), "a" * 32)
    with pytest.raises(ValueError, match="not a tree of this engine"):
        r.install(
            {"CACHEON_ENGINE_TREE": str(tmp_path / "elsewhere"), "CACHEON_ENGINE_TREE_DIGEST": "x"},
            str(tmp_path / "answers" / "job"),
            "b" * 32,
        )
    with pytest.raises(ValueError, match="nonce"):
        r.install({}, str(tmp_path / "answers" / "job"), "not-a-nonce")
    with pytest.raises(RuntimeError, match="nothing is installed"):
        r.remove("c" * 32)


def test_a_removed_kernel_behind_its_trampoline_is_never_called_again():
    calls = []
    t = resident.Trampoline(lambda **kw: calls.append(kw))
    t(x=1)
    t.fn = None
    with pytest.raises(Exception, match="removed contribution"):
        t(x=2)
    assert calls == [{"x": 1}]


def test_threads_running_contribution_code_are_named():
    import sys
    import threading

    src = "import time\ndef loop(ev):\n    while not ev.is_set():\n        time.sleep(0.01)\n"
    mod = types.ModuleType("cacheon_c_test.kernel")
    exec(compile(src, "kernel.py", "exec"), mod.__dict__)
    ev = threading.Event()
    th = threading.Thread(target=mod.loop, args=(ev,), daemon=True)
    th.start()
    try:
        assert any("cacheon_c_test.kernel.loop" in f for f in resident.contribution_frames())
    finally:
        ev.set()
        th.join()
    assert not any("cacheon_c_test" in f for f in resident.contribution_frames())
    assert "cacheon_c_test.kernel" not in sys.modules


def test_a_resident_engines_verdicts_run_the_pristine_checkpoint_step_once_per_process(tmp_path, monkeypatch):
    """The checkpoint step (a sandboxed child: 3-14 s a verdict on the H200) runs once per process and
    checkpoint dir when the timed engine is resident; for every verdict otherwise, as before."""
    from dataclasses import replace

    import arena_harness as h

    from arena import prepare

    monkeypatch.setattr(prepare, "MADE", set())
    calls = []

    def engine(name, job, env, rw=()):
        calls.append(name)
        os.makedirs(job["checkpoint"]["dir"], exist_ok=True)
        return EngineRun(({"op": "done"},), 0, False, 0.1, "", None)

    opts = prepare.RunOptions(workdir=tmp_path / "w", checkpoint_root=tmp_path / "ckpt")
    cfg = h.small_config()
    for _ in range(2):
        assert prepare.engine_base(cfg, opts, engine)[0] is not None
    assert calls == ["checkpoint", "checkpoint"]
    on = replace(cfg, engine=replace(cfg.engine, resident=True))
    prepare.MADE.clear()
    for _ in range(3):
        assert prepare.engine_base(on, opts, engine)[0] is not None
    assert calls == ["checkpoint"] * 3  # once for the three resident verdicts
