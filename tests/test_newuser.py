"""Issue 18's first-hour friction points, one test each (each fails without its fix)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES, MANIFEST, REPO

from cacheon_subnet import progress
from cacheon_subnet.demo import MINERS, VALIDATORS, check_expectations
from cacheon_subnet.owned_dir import MARKER, NotOwnedError, is_owned, mark_owned, wipe_owned
from cacheon_subnet.validator import status as vstatus
from cacheon_subnet.words import evidence_words, speed_words, wrap

CLI = [sys.executable, "-m", "cacheon_subnet.cli"]


def cacheon(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, env={**os.environ, **(env or {})}
    )


# -- help, exit codes ----------------------------------------------------------------------------
def test_help_opens_with_a_plain_description():
    r = cacheon("--help")
    assert r.returncode == 0
    description = r.stdout.split("\n\n")[1]
    assert description.startswith("Cacheon: contribute faster, faithful GPU kernels") and "thin faces" not in r.stdout
    assert "2 usage error" in r.stdout and ".venv/bin/cacheon" in r.stdout


MISSING = "/definitely/not/here"
USAGE_ARGVS = [
    ["pack", MISSING],
    ["digest", MISSING],
    ["verify", MISSING],
    ["bench", MISSING, "--device", "cpu"],
    ["miner", "submit", MISSING, "--serve-dir", "{srv}", "--local-chain", "{chain}", "--hotkey", "alice"],
    ["status", "--state-dir", MISSING],
    ["miner", "status", "--local-chain", MISSING, "--hotkey", "a"],
    ["chain", "local", "show", "--local-chain", MISSING],
    ["pack"],
    ["verify", "x", "--device", "tpu"],
]

# One interpreter runs cli.main() once per argv, as `python -m cacheon_subnet.cli` would (an
# escaping exception is exit 1 with its traceback on stderr): twelve CLI processes paid a torch
# import (~4 CPU-s) each. test_cli.py's subprocess runs keep the process's own exit-2 path.
CLI_BATCH = """
import contextlib, io, json, sys, traceback
from cacheon_subnet.cli import main
rows = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            code = 1
            err.write(traceback.format_exc())
    rows.append({"argv": argv, "rc": code, "stderr": err.getvalue()})
print(json.dumps(rows))
"""


def cli_batch(argvs: list[list[str]]) -> list[dict]:
    """Each argv's exit code and stderr, from one CLI interpreter (CLI_BATCH)."""
    r = subprocess.run(
        [sys.executable, "-c", CLI_BATCH, json.dumps(argvs)], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def usage_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Every USAGE_ARGVS run, after the local chain the `miner submit` case needs is set up."""
    tmp = tmp_path_factory.mktemp("usage")
    chain = str(tmp / "c.sqlite")
    fill = {"{chain}": chain, "{srv}": str(tmp / "srv")}
    setup = [
        ["chain", "local", "create", "--local-chain", chain],
        ["chain", "local", "register", "alice", "--local-chain", chain],
    ]
    rows = cli_batch(setup + [[fill.get(a, a) for a in argv] for argv in USAGE_ARGVS])
    assert [r["rc"] for r in rows[:2]] == [0, 0], rows[:2]
    return {" ".join(argv): row for argv, row in zip(USAGE_ARGVS, rows[2:])}


@pytest.mark.slow
@pytest.mark.parametrize("argv", USAGE_ARGVS, ids=lambda a: " ".join(a[:2]))
def test_usage_errors_and_missing_paths_exit_2_in_every_verb(argv, usage_runs):
    r = usage_runs[" ".join(argv)]
    assert r["rc"] == 2, r
    assert "Traceback" not in r["stderr"]


def test_pack_refuses_a_kernel_with_a_syntax_error(make_bundle, tmp_path):
    bad = make_bundle({"manifest.toml": MANIFEST, "kernel.py": "def rmsnorm(x, weight, out, eps):\n    return (\n"})
    r = cacheon("pack", str(bad), "-o", str(tmp_path / "bad.tar.gz"))
    assert r.returncode == 1 and "P010 syntax error" in r.stdout and "kernel.py:" in r.stdout
    assert not (tmp_path / "bad.tar.gz").exists()
    good = cacheon("pack", str(EXAMPLES / "norm.rmsnorm"), "-o", str(tmp_path / "good.tar.gz"), "--hotkey", "hk")
    assert good.returncode == 0 and (tmp_path / "good.tar.gz").is_file()
    assert "contribution id" in good.stdout  # the two hashes, explained where both are printed


def test_bench_without_cuda_defaults_to_cpu_or_exits_2_cleanly(monkeypatch, capsys):
    import torch

    from cacheon_subnet.cli import _bench_device
    from cacheon_subnet.errors import UsageError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _bench_device(None) == "cpu" and "no CUDA device" in capsys.readouterr().err
    with pytest.raises(UsageError, match="no CUDA device is visible"):
        _bench_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert _bench_device(None) == "cuda" and _bench_device("cpu") == "cpu"


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_bench_cuda_on_a_cpu_box_is_a_usage_error_not_a_traceback():
    r = cacheon("bench", str(EXAMPLES / "norm.rmsnorm"), "--device", "cuda")
    assert r.returncode == 2 and "no CUDA device is visible" in r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""  # no table header before the error


# -- words, wrapping, fractions ------------------------------------------------------------------
def test_speeds_and_verdicts_in_plain_words():
    assert speed_words(0.001, "stock") == "1000x slower than stock"
    assert speed_words(1.234, "stock") == "1.23x faster than stock"
    assert speed_words(1.001, "stock").startswith("as fast as stock")
    slow = evidence_words({"verdict": "PASS", "outcome": "below_bar", "speedup_vs_stock": 0.001, "label": "cpu-timing"})
    assert slow.startswith("verified, below the bar") and "1000x slower than the fp32 reference" in slow
    assert "PASS" not in slow
    assert evidence_words({"verdict": "FAIL", "outcome": "failed", "speedup_vs_stock": 1.0}) == "failed"


def _report(reason: str) -> dict:
    return {
        "state_dir": "/x",
        "schema_version": 1,
        "last_sync_block": 9,
        "last_sync_at": None,
        "counts": {s: 0 for s in vstatus.STATES},
        "contributions": [
            {
                "id": "ab" * 32,
                "hotkey": "alice",
                "commit_block": 3,
                "state": "failed",
                "reason": reason,
                "evidence": [
                    {
                        "target": "norm.rmsnorm",
                        "verdict": "PASS",
                        "speedup": 0.001,
                        "speedup_vs_stock": 0.001,
                        "noise": 0.01,
                        "label": "cpu-timing",
                        "evaluated_block": 5,
                        "settled": 1,
                        "outcome": "below_bar",
                    }
                ],
            }
        ],
        "crowns": [],
        "weights": {
            "id": 1,
            "state": "verified",
            "block": 7,
            "version_key": 0,
            "attempts": 1,
            "reason": "read-back matches",
            "uids": [0, 3],
            "vals": [65535, 21845],
        },
        "chain_errors": 1,
        "last_chain_error": {
            "op": "fetch",
            "error_type": "FetchError",
            "at": None,
            "message": "GET https://miner.example/" + "x" * 180 + " failed: THE-CAUSE",
        },
    }


def test_status_shows_full_reasons_plain_words_and_weight_fractions():
    reason = "fetch: " + " ".join(f"word{i}" for i in range(80)) + " END-OF-REASON"
    text = vstatus.render(_report(reason))
    flat = " ".join(text.split())
    assert reason in flat and "THE-CAUSE" in flat  # wrapped, never cut
    assert max(len(line) for line in text.splitlines()) <= 125
    assert "1000x slower than the fp32 reference" in flat and "verified, below the bar" in flat
    assert "fractions uid 0: 0.750, uid 3: 0.250" in text and "u16" not in text
    assert flat.count("contribution id = sha256(bundle digest + hotkey)") == 1


def test_wrap_keeps_every_word():
    text = "a" * 300 + " tail"
    lines = wrap(text, 10, width=80)
    assert "".join(lines).replace(" ", "") == text.replace(" ", "") and len(lines) > 3
    assert all(len(line) <= 80 for line in lines) and all(line.startswith(" " * 10) for line in lines[1:])


# -- the demo: checked expectations, owned state dir ---------------------------------------------
def _demo_reports(crowned: str = "miner-fast", b_crowns: str | None = None) -> dict:
    def contribution(m):
        e = m.expect
        ev = [{"outcome": e.outcome}] if e.outcome else []
        reason = f"verify: {e.reason}" if e.reason else "ok"
        return {"hotkey": m.hotkey, "state": e.state, "reason": reason, "evidence": ev}

    rows = [contribution(m) for m in MINERS]
    for r in rows:
        if r["hotkey"] == "miner-fast" and crowned != "miner-fast":
            r["evidence"] = [{"outcome": "below_bar"}]
    crowns = [{"target": "norm.rmsnorm", "hotkey": crowned}]
    return {
        VALIDATORS[0][0]: {"contributions": rows, "crowns": crowns},
        VALIDATORS[1][0]: {"contributions": rows, "crowns": [{"target": "norm.rmsnorm", "hotkey": b_crowns or crowned}]},
    }


def test_demo_expectations_are_checked():
    lines, misses = check_expectations(_demo_reports())
    assert misses == 0 and "all expectations held" in lines[-1]
    assert any("ok    validator-b settled the same crowns independently" in ln for ln in lines)
    lines, misses = check_expectations(_demo_reports(crowned="miner-plain"))
    text = "\n".join(lines)
    assert misses == 1 and "MISS  miner-fast" in text and "outcome below_bar (expected crowned)" in text
    lines, misses = check_expectations(_demo_reports(b_crowns="miner-plain"))
    text = "\n".join(lines)
    assert misses == 1 and "DIFFERENT crowns" in text and "norm.rmsnorm: miner-fast vs miner-plain" in text


def test_owned_dir_wipes_only_what_it_marked(tmp_path):
    mine = mark_owned(tmp_path / "state")
    (mine / "chain.sqlite").write_text("x")
    assert is_owned(mine)
    wipe_owned(mine)
    assert not mine.exists()
    theirs = tmp_path / "home"
    theirs.mkdir()
    (theirs / "thesis.tex").write_text("precious")
    with pytest.raises(NotOwnedError, match="refusing to delete"):
        wipe_owned(theirs)
    assert (theirs / "thesis.tex").read_text() == "precious"
    (tmp_path / "empty").mkdir()
    wipe_owned(tmp_path / "empty")
    wipe_owned(tmp_path / "never-existed")


@pytest.mark.slow
def test_demo_refuses_to_wipe_a_dir_it_did_not_create(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    r = cacheon("demo", "--state-dir", str(victim))
    assert r.returncode == 2 and "refusing to delete" in r.stderr and "Traceback" not in r.stderr
    assert (victim / "keep.txt").read_text() == "mine" and not (victim / MARKER).exists()


# -- progress bars -------------------------------------------------------------------------------
def test_progress_bars_only_on_a_tty_and_never_when_quiet(monkeypatch):
    monkeypatch.delenv(progress.ENV, raising=False)
    monkeypatch.setattr(progress, "_quiet", False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert progress.enabled()
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert not progress.enabled()
    monkeypatch.setenv(progress.ENV, "1")
    assert progress.enabled()
    progress.set_quiet(True)
    assert not progress.enabled() and os.environ[progress.ENV] == "0"


@pytest.mark.slow
def test_quiet_flag_silences_the_bars():
    env = {progress.ENV: "1"}
    # --no-compile: the bars are the subject here, not torch.compile (~4 s a verify on 2 cores;
    # the compile check runs in test_verify_controls and test_cli's verify tests)
    fast = ("--max-cases", "1", "--no-compile")
    loud = cacheon("verify", str(EXAMPLES / "demo" / "cpu_rmsnorm"), *fast, env=env)
    assert loud.returncode == 0 and "verify norm.rmsnorm" in loud.stderr and "trial" in loud.stderr
    assert "verify norm.rmsnorm" not in loud.stdout  # bars never mix into results
    quiet = cacheon("--quiet", "verify", str(EXAMPLES / "demo" / "cpu_rmsnorm"), *fast, env=env)
    assert quiet.returncode == 0 and "trial/s" not in quiet.stderr and "verify norm.rmsnorm" not in quiet.stderr


# -- a working cacheon after the quick start -----------------------------------------------------
def _bare_python() -> str | None:
    """An interpreter without the project's dependencies (the system python3 of a fresh box)."""
    for py in ("/usr/bin/python3", shutil.which("python3") or ""):
        if py and Path(py).is_file() and subprocess.run([py, "-c", "import structlog"], capture_output=True).returncode != 0:
            return py
    return None


BARE = _bare_python()


@pytest.mark.skipif(BARE is None, reason="no interpreter without structlog here")
@pytest.mark.parametrize("neuron", ["miner.py", "validator.py"])
def test_neuron_under_a_bare_python_reexecs_or_says_what_to_run(neuron):
    r = subprocess.run(
        [BARE, f"neurons/{neuron}", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CACHEON_NEURON_REEXEC")},
    )
    assert "Traceback" not in r.stderr and "No module named" not in r.stderr
    if (REPO / ".venv" / "bin" / "python").is_file():  # CI (`make test`): re-executed under .venv
        assert r.returncode == 0 and "usage:" in r.stdout
    else:
        assert r.returncode == 2 and "make install" in r.stderr and "structlog" in r.stderr


@pytest.mark.skipif(BARE is None, reason="no interpreter without structlog here")
def test_bootstrap_reexecs_under_the_checkouts_venv(tmp_path):
    fake = tmp_path / ".venv" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text('#!/bin/sh\necho "REEXEC $@ guard=$CACHEON_NEURON_REEXEC"\n')
    fake.chmod(0o755)
    code = (
        "import sys; sys.path.insert(0, 'neurons'); from pathlib import Path; import _bootstrap; "
        f"_bootstrap.reexec_or_explain(ImportError('x', name='structlog'), 'neurons/miner.py', ['--help'], "
        f"repo=Path({str(tmp_path)!r}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "CACHEON_NEURON_REEXEC"}
    r = subprocess.run([BARE, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
    assert r.stdout.strip() == "REEXEC neurons/miner.py --help guard=1", r.stderr
    looped = subprocess.run(
        [BARE, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO, env={**env, "CACHEON_NEURON_REEXEC": "1"}
    )  # a broken .venv: explain, never loop
    assert looped.returncode == 2 and "rerun `make install`" in looped.stderr


def test_make_shows_install_progress_and_how_to_run_cacheon(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make not installed")
    r = subprocess.run(["make", "-n", "install", f"VENV={tmp_path}/v"], capture_output=True, text=True, cwd=REPO, timeout=60)
    pips = [ln for ln in r.stdout.splitlines() if "pip install" in ln]
    assert len(pips) == 4 and not any(" -q" in ln for ln in pips), pips  # pip, torch+triton, the package, CUTLASS headers
    assert f"source {tmp_path}/v/bin/activate" in r.stdout and f"{tmp_path}/v/bin/cacheon" in r.stdout


def test_demo_hint_names_a_cacheon_that_runs(monkeypatch, tmp_path):
    from cacheon_subnet import demo

    monkeypatch.setattr(demo.shutil, "which", lambda name: None)  # not on PATH: the venv's own script
    (tmp_path / "cacheon").write_text("#!/bin/sh\n")
    monkeypatch.setattr(demo.sys, "executable", str(tmp_path / "python"))
    assert demo._cacheon() == str(tmp_path / "cacheon")
    (tmp_path / "cacheon").unlink()
    assert demo._cacheon().endswith("python -m cacheon_subnet.cli")
    monkeypatch.setattr(demo.shutil, "which", lambda name: "/usr/local/bin/cacheon")
    assert demo._cacheon() == "cacheon"


def test_demo_log_file_takes_every_logger_even_ones_used_before(tmp_path):
    """The demo's summary is apart from its logs: a logger structlog already cached on stderr
    must follow configure(file=..., force=True) into the file too."""
    code = (
        "import sys; from cacheon_subnet import log; log.configure(json=True); "
        "early = log.get_logger('early'); early.info('before'); "
        f"log.configure(file=open({str(tmp_path / 'demo.log')!r}, 'w', buffering=1), json=True, force=True); "
        "early.info('cached-after'); log.get_logger('late').info('late-after')"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 0, r.stderr
    logged = (tmp_path / "demo.log").read_text()
    assert "cached-after" in logged and "late-after" in logged and "before" not in logged
    assert "before" in r.stderr and "after" not in r.stderr


@pytest.mark.slow
def test_chain_local_verbs_and_their_errors(tmp_path):
    import json

    chain = str(tmp_path / "c.sqlite")
    env = {"CACHEON_LOCAL_CHAIN": chain}
    assert cacheon("chain", "local", "create", env=env).returncode == 0
    again = cacheon("chain", "local", "create", env=env)
    assert again.returncode == 2 and "already exists" in again.stderr  # never overwrites a chain
    assert cacheon("chain", "local", "register", "v", "--stake", "10", "--validator", env=env).returncode == 0
    clash = cacheon("chain", "local", "register", "v", "--coldkey", "other", env=env)
    assert clash.returncode == 2 and "already registered" in clash.stderr
    back = cacheon("chain", "local", "advance", "--", "-1", env=env)
    assert back.returncode == 2 and "never go back" in back.stderr
    assert cacheon("chain", "local", "advance", "5", env=env).stdout.strip() == "block 5"
    shown = json.loads(cacheon("chain", "local", "show", "--json", env=env).stdout)
    assert shown["block"] == 5 and [(n["uid"], n["hotkey"], n["validator_permit"]) for n in shown["neurons"]] == [
        (0, "owner", False),
        (1, "v", True),
    ]
