"""The host's record channel (arena/engine/channel.py, arena/engine/host.py) and the driver's answer reader
(seams/answers.py): every record and answer a verdict reads must carry the host's nonce, in
order, once; forging (FAIL) is told apart from faults (NO_DECISION)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from arena.engine.channel import RecordStream, seal
from seams.answers import AnswerLog, AnswerReader, ForgeryError

REPO = Path(__file__).resolve().parents[2]


def job(answers: bool = True):
    steps = [
        {"op": "route", "route": "stock", "epoch": 1, "tag": "route-1-stock"},
        {"op": "generate", "tag": "w000-B"},
        {"op": "generate", "tag": "w001-C"},
    ]
    return seal({"steps": steps}, answers=answers)


def answers_for(j, step, ranks=(0,)):
    names = ("before", "after") if step["op"] == "generate" else ("route",)
    return {n: {str(r): {"nonce": x} for r in ranks} for n, x in zip(names, step["rpc"])}


def good_stream(j):
    life = iter(j["lifecycle_nonces"])
    recs = [
        {"op": "started", "nonce": next(life)},
        {"op": "snapshot", "nonce": next(life), "answers": {"start": {"0": {"nonce": j["start_rpc"]}}}},
    ]
    for s in j["steps"]:
        recs.append({"op": s["op"], "step": s["tag"], "nonce": s["nonce"], "answers": answers_for(j, s)})
    recs.append({"op": "done", "nonce": next(life)})
    return recs


def feed(j, recs):
    st = RecordStream(j, (0,))
    for r in recs:
        st.feed(json.dumps(r).encode())
    return st


def test_the_drivers_own_stream_is_accepted():
    j = job()
    st = feed(j, good_stream(j))
    assert st.forgery is None and len(st.records) == 6


def test_every_nonce_is_fresh_random_and_unique():
    a, b = job(), job()
    nonces = [s["nonce"] for s in a["steps"]] + [n for s in a["steps"] for n in s["rpc"]] + a["lifecycle_nonces"]
    assert len(set(nonces)) == len(nonces) and all(len(n) == 32 for n in nonces)
    assert not set(nonces) & set(s["nonce"] for s in b["steps"])


@pytest.mark.parametrize(
    "mutate,needle",
    [
        (lambda j, r: r.insert(3, {"op": "generate", "step": "w000-B", "nonce": "0" * 32}), "unknown nonce"),
        (lambda j, r: r.insert(4, dict(r[3])), "used twice"),
        (lambda j, r: r.__setitem__(slice(3, 5), [r[4], r[3]]), "out of order"),
        (lambda j, r: r[3].__setitem__("step", "w001-C"), "nonce of step"),
        (lambda j, r: r.append({"op": "generate", "step": "w009-C", "nonce": j["lifecycle_nonces"][5]}), "after the final"),
        (lambda j, r: r.insert(3, {"op": "generate", "step": "w000-B", "nonce": j["steps"][1]["rpc"][0]}), "RPC nonce"),
        (lambda j, r: r[3]["answers"]["after"]["0"].__setitem__("nonce", "f" * 32), "does not echo"),
        (lambda j, r: r[3]["answers"]["after"].__setitem__("1", {"nonce": j["steps"][1]["rpc"][1]}), "expected [0]"),
        (lambda j, r: r[0].pop("nonce"), "without a nonce"),
        (lambda j, r: r[0].__setitem__("op", "generate"), "carrying a lifecycle nonce"),
        (
            lambda j, r: r.insert(
                5, {"op": "error", "kind": "forgery", "error": "rank 0: 2 lines", "nonce": j["lifecycle_nonces"][2]}
            ),
            "the driver caught forging",
        ),
    ],
)
def test_a_forged_record_is_named(mutate, needle):
    j = job()
    recs = good_stream(j)
    mutate(j, recs)
    st = feed(j, recs)
    assert st.forgery and needle in st.forgery, st.forgery


def test_a_complete_line_that_is_not_json_is_forging_a_cut_short_last_line_is_a_fault():
    j = job()
    st = RecordStream(j, (0,))
    st.feed(b"{not json")
    assert "not JSON" in st.forgery
    st2 = RecordStream(j, (0,))
    st2.finish(b'{"op": "gener')
    assert st2.truncated and st2.forgery is None


def test_answer_reader_accepts_exactly_one_echo_per_rank(tmp_path):
    logs = [AnswerLog(str(tmp_path), r) for r in (0, 1)]
    rd = AnswerReader(tmp_path, [0, 1])
    for lg in logs:
        lg.answer("a" * 32, "clock", {})
    assert sorted(rd.collect("a" * 32, "clock")) == [0, 1]
    logs[0].answer("b" * 32, "clock", {})
    with pytest.raises(ForgeryError, match="rank 1: 0 complete new answer line"):
        rd.collect("b" * 32, "clock")  # rank 1 never answered: its log was not the rank's


def test_a_replayed_or_rewritten_answer_is_forging(tmp_path):
    lg, rd = AnswerLog(str(tmp_path), 0), AnswerReader(tmp_path, [0])
    lg.answer("a" * 32, "clock", {"clock": {"gpu_s": 1.0}})
    rd.collect("a" * 32, "clock")
    path = tmp_path / "answers-0.jsonl"
    old = path.read_text()
    path.write_text(old + old)  # the first answer again, for the next RPC
    with pytest.raises(ForgeryError, match="issued earlier"):
        rd.collect("b" * 32, "clock")
    rd2 = AnswerReader(tmp_path, [0])
    path.write_text(old)
    rd2.collect("a" * 32, "clock")
    path.write_text(old.replace('"gpu_s": 1.0', '"gpu_s": 0.5'))  # history edited after it was read
    lg.answer("b" * 32, "clock", {})
    with pytest.raises(ForgeryError, match="rewritten"):
        rd2.collect("b" * 32, "clock")


def test_a_symlinked_answer_log_is_refused_on_both_sides(tmp_path):
    os.symlink("/dev/zero", tmp_path / "answers-0.jsonl")
    with pytest.raises(OSError):
        AnswerLog(str(tmp_path), 0).answer("a" * 32, "clock", {})
    with pytest.raises(ForgeryError, match="not a plain file"):
        AnswerReader(tmp_path, [0]).audit()


HARDENED = r"""
import os, subprocess, sys
from arena.engine.child import harden
r, w = os.pipe()
if sys.argv[1] == "1":
    harden((w,))
child = ("import os\ntry:\n os.open('/proc/%d/fd/%d' % (os.getppid(), FD), os.O_WRONLY); print('OPENED')\n"
         "except OSError as e: print('DENIED', e.errno)").replace("FD", str(w))
print(subprocess.run([sys.executable, "-c", child], capture_output=True, text=True).stdout.strip())
"""


@pytest.mark.skipif(not Path("/usr/bin/setpriv").exists(), reason="needs util-linux setpriv")
def test_a_hardened_driver_hides_its_pipes_from_a_same_uid_child():
    """A child of the same uid and capabilities (no CAP_SYS_PTRACE, as the engine user) opens
    a dumpable parent's pipe through /proc/<ppid>/fd, but not the hardened driver's."""

    def attempt(hardened: bool) -> str:
        out = subprocess.run(
            ["setpriv", "--bounding-set=-sys_ptrace", sys.executable, "-c", HARDENED, "1" if hardened else "0"],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            timeout=60,
        )
        return out.stdout.strip() + out.stderr[-300:]

    assert attempt(False) == "OPENED"  # the control: without harden() the pipe is reachable
    assert attempt(True).startswith("DENIED 13")


@pytest.mark.slow
def test_host_run_accepts_the_drivers_records_and_persists_them(tmp_path):
    from arena.engine.host import EngineSpec, run_engine

    steps = [
        {
            "op": "generate",
            "tag": "g",
            "prompts": {"seed": 1, "n": 1, "len": 4, "low": 10, "high": 500},
            "max_new_tokens": 2,
            "top_k": 0,
        }
    ]
    run = run_engine(
        EngineSpec(
            "s",
            {
                "engine_kwargs": {},
                "engine_factory": "tests.arena.fake_engine:FakeEngine",
                "checkpoint": None,
                "steps": steps,
            },
            timeout_s=120,
        ),
        tmp_path,
    )
    assert run.error is None and run.forgery is None
    lines = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert [x["op"] for x in lines] == ["started", "generate", "done"] and lines[1]["step"] == "g"
    assert not list(tmp_path.glob("*.job.json"))  # the job never touches a file


def test_a_sample_request_without_the_hosts_nonce_is_forging(tmp_path):
    """The job pipe is the host's too: a line written into it by anyone else (as root can, through
    /proc/<driver>/fd) cannot choose which outputs are graded."""
    from arena.engine.child import Driver

    r, w = os.pipe()
    os.write(w, (json.dumps({"sample": {"w001-C": [0]}}) + "\n").encode())
    os.close(w)
    _rec_r, rec_w = os.pipe()
    d = Driver(seal({"steps": []}, answers=False), rec_w, os.fdopen(r))
    d.kept = {"w001-C": {"prompts": {"seed": 1, "n": 1, "len": 2, "low": 1, "high": 9}, "outs": [{"cont": [1]}]}}
    with pytest.raises(ForgeryError, match="without the host's nonce"):
        d.sample()
