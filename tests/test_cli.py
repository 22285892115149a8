"""The `cacheon` command line: verbs, flags, exit codes and JSON shapes other tools rely on."""

import json
import subprocess
import sys
import tarfile

import pytest
from conftest import CONTROLS, EXAMPLES, REPO

from cacheon_subnet.slots import all_slots


def cacheon(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cacheon_subnet.cli", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


def test_slots_json_lists_catalog_with_signatures():
    r = cacheon("slots", "--json")
    assert r.returncode == 0
    data = json.loads(r.stdout)
    assert {d["id"] for d in data} == {s.id for s in all_slots()}
    for d in data:
        assert d["version"] >= 1 and d["signature"].startswith(f"{d['id']}@{d['version']}(")
        assert all({"name", "role", "dtype", "shape", "layout"} <= set(a) for a in d["args"])
    text = cacheon("slots").stdout
    assert "norm.rmsnorm@1" in text


@pytest.mark.slow
def test_verify_exit_codes_and_json():
    ok = cacheon("verify", str(EXAMPLES / "norm.rmsnorm"), "--json", "--max-cases", "1")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    data = json.loads(ok.stdout)
    assert data["status"] == "PASS" and data["digest"] and data["ops"][0]["status"] == "PASS"
    op = data["ops"][0]  # --max-cases caps the tier shapes; the odd size verify adds is counted apart
    assert op["tier_cases"] == 1 and op["cases"] >= 1, op
    bad = cacheon("verify", str(CONTROLS / "wrong_math"), "--json", "--max-cases", "1")
    assert bad.returncode == 1
    data = json.loads(bad.stdout)
    assert data["status"] == "FAIL" and data["ops"][0]["failure"]["reason"] == "mismatch"
    assert cacheon("verify", "/definitely/not/here").returncode == 2
    assert cacheon("verify").returncode == 2
    assert cacheon("verify", str(EXAMPLES / "norm.rmsnorm"), "--device", "tpu").returncode == 2


def test_verify_report_says_which_cases_max_cases_capped():
    """`--max-cases 1` read "1 calls / 2 cases" with no word why: the line splits tier (capped)
    from the odd/arena sizes verify adds, and says nothing extra when there are none."""
    from cacheon_subnet.verify.report import OpResult, VerifyReport

    def line(cases: int, tier: int) -> str:
        op = OpResult("norm.rmsnorm/default", "norm.rmsnorm", "m:f", ("float32",), "PASS", 26, cases, tier_cases=tier)
        return VerifyReport("PASS", "b", "d" * 64, "cpu", "verify", (), (), (op,)).render().splitlines()[1]

    assert line(2, 1).endswith("26 calls / 2 cases (1 tier + 1 odd/arena)")
    assert line(1, 1).endswith("26 calls / 1 cases") and line(0, 0).endswith("/ 0 cases")


@pytest.mark.slow
def test_verify_bundle_rule_violation_is_fail(make_bundle):
    root = make_bundle({"manifest.toml": 'schema = "cacheon.bundle/2"\n', "evil.so": "x"})
    r = cacheon("verify", str(root), "--json")
    assert r.returncode == 1
    assert "file-type" in json.loads(r.stdout)["reasons"][0]


def test_pack_and_digest_agree(tmp_path):
    out = tmp_path / "b.tar.gz"
    p = cacheon("pack", str(EXAMPLES / "norm.rmsnorm"), "-o", str(out), "--json", "--hotkey", "hk1")
    assert p.returncode == 0, p.stderr
    packed = json.loads(p.stdout)
    d = json.loads(cacheon("digest", str(out), "--json", "--hotkey", "hk1").stdout)
    assert packed["digest"] == d["digest"] and packed["hotkey_digest"] == d["hotkey_digest"]
    with tarfile.open(out) as t:
        assert "manifest.toml" in t.getnames()
    again = tmp_path / "c.tar.gz"
    cacheon("pack", str(EXAMPLES / "norm.rmsnorm"), "-o", str(again))
    assert out.read_bytes() == again.read_bytes()


def miner_init_in_process(*args: str) -> int:
    """`cacheon miner init ARGS` through the CLI's own parser and handler, in this process: a
    subprocess per slot paid a torch import (~4 CPU-s) twice for each of nine slots. The real
    subprocess path (exit codes included) is test_miner_init_scaffold_passes_verify's."""
    from cacheon_subnet import cli

    return cli.cmd_miner_init(cli.build_parser().parse_args(["miner", "init", *args]))


@pytest.mark.parametrize("slot", [s.id for s in all_slots()])
def test_miner_init_scaffold_runs_what_the_verified_example_runs(tmp_path, slot, capsys):
    """Every slot's scaffold is its example bundle with a new name and README: the same sources
    and manifest ops, so the example's own verify test (tests/slots, test_verify_multirank,
    test_verify_controls) covers what it runs; one slot goes through verify below."""
    from cacheon_subnet.bundle import load_bundle
    from cacheon_subnet.errors import UsageError

    dest = tmp_path / "mine"
    assert miner_init_in_process("--slot", slot, str(dest)) == 0
    assert f"created {dest} for slot {slot}" in capsys.readouterr().out
    assert (dest / "manifest.toml").is_file() and (dest / "README.md").is_file()
    mine, example = load_bundle(dest), load_bundle(EXAMPLES / slot)
    assert mine.manifest.name != example.manifest.name
    code = {p: d for p, d in example.files.items() if p.endswith(".py")}
    assert code and {p: d for p, d in mine.files.items() if p.endswith(".py")} == code
    assert mine.manifest.to_json()["ops"] == example.manifest.to_json()["ops"]
    with pytest.raises(UsageError, match="not empty"):  # the CLI maps it to exit 2 (checked below)
        miner_init_in_process("--slot", slot, str(dest))


@pytest.mark.slow
def test_miner_init_scaffold_passes_verify(tmp_path):
    dest = tmp_path / "mine"
    assert cacheon("miner", "init", "--slot", "norm.rmsnorm", str(dest)).returncode == 0
    v = cacheon("verify", str(dest), "--device", "cpu", "--max-cases", "1")
    assert v.returncode == 0, v.stdout + v.stderr
    again = cacheon("miner", "init", "--slot", "norm.rmsnorm", str(dest))
    assert again.returncode == 2 and "not empty" in again.stderr


def test_miner_init_unknown_slot():
    r = cacheon("miner", "init", "--slot", "norm.nope", "/tmp/never")
    assert r.returncode == 2 and "unknown slot" in r.stderr


@pytest.mark.slow
def test_bench_against_an_arena_times_the_window_sizes_first():
    r = cacheon(
        "bench",
        str(EXAMPLES / "demo" / "cpu_rmsnorm"),
        "--device",
        "cpu",
        "--arena",
        str(REPO / "configs/arena/dense.toml"),
        "--budget",
        "0.05",
        "--max-cases",
        "2",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "its timed window runs decode bs 256, prefill 8192 tokens" in r.stdout
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("norm.rmsnorm/default")]
    assert len(rows) == 2 and "decode-bs256" in rows[0] and "window decode" in rows[0]
    assert "prefill-8192" in rows[1] and "window prefill" in rows[1]
    # stderr is no terminal here: still one plain line per step says what bench is doing
    notes = r.stderr.splitlines()
    assert any(n.startswith("bench: starting the sandboxed worker on cpu") for n in notes), r.stderr[-1500:]
    assert any("worker ready" in n for n in notes)
    assert any("[1/2]" in n and "decode-bs256" in n for n in notes) and any(
        "[2/2]" in n and "prefill-8192" in n for n in notes
    ), notes
    q = cacheon(
        "--quiet", "bench", str(EXAMPLES / "demo" / "cpu_rmsnorm"), "--device", "cpu", "--budget", "0.05", "--max-cases", "1"
    )
    assert q.returncode == 0 and "bench: starting" not in q.stderr and "[1/1]" not in q.stderr, q.stderr[-800:]


@pytest.mark.slow
def test_bench_on_cpu_reports_rows(tmp_path):
    r = cacheon(
        "bench",
        str(EXAMPLES / "norm.rmsnorm"),
        "--device",
        "cpu",
        "--tier",
        "verify",
        "--budget",
        "0.2",
        "--max-cases",
        "1",
        "--json",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(r.stdout)
    (row,) = data["rows"]
    assert row["recheck"] == "ok" and row["candidate_us"] > 0 and row["baseline_us"] > 0 and row["n"] >= 20
    assert "reference" in row["baseline"] or "stock" in row["baseline"]


@pytest.mark.slow
def test_bench_recheck_catches_wrong_kernel():
    r = cacheon(
        "bench",
        str(CONTROLS / "wrong_math"),
        "--device",
        "cpu",
        "--tier",
        "verify",
        "--budget",
        "0.2",
        "--max-cases",
        "1",
        "--json",
    )
    assert r.returncode == 1
    assert json.loads(r.stdout)["rows"][0]["recheck"] == "FAIL mismatch"
