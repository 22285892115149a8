"""Red-team corpus for the static gate (issue 14, classes 1 and 4, clock patching, record forging).

Every bundle under tests/adversarial/static/ is a faithful RMSNorm plus one way of reaching
what a contribution must never reach. Each refused line carries `# expect: Pxxx [Pyyy]`; the
scan must report exactly that rule at exactly that file:line. The manifest's description names
the sub-class; each sub-class has at least two attacks. Real `cacheon verify` runs show the
outcome is reason `policy` and that the bundle is never imported.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.policy.scan import scan_files
from cacheon_subnet.verify import VerifyOptions, runner, verify_bundle

CORPUS = Path(__file__).resolve().parent / "static"
REPO = CORPUS.parents[2]
ATTACKS = sorted(p.name for p in CORPUS.iterdir() if (p / "manifest.toml").is_file())
_MARK = re.compile(r"#\s*expect:\s*((?:P\d{3}\s*)+)$")


def expected(root: Path) -> set[tuple[str, int, str]]:
    out = set()
    for f in sorted(root.rglob("*.py")):
        for no, line in enumerate(f.read_bytes().decode("utf-8").split("\n"), 1):  # Python's numbering
            m = _MARK.search(line)
            if m:
                out.update((f.relative_to(root).as_posix(), no, rule) for rule in m.group(1).split())
    return out


def findings(root: Path) -> set[tuple[str, int, str]]:
    files = {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*.py")}
    return {(f.path, f.line, f.rule) for f in scan_files(files)}


def test_corpus_covers_every_sub_class_twice() -> None:
    by_class: dict[str, list[str]] = {}
    for name in ATTACKS:
        sub = re.search(r'description = "([a-z_]+)"', (CORPUS / name / "manifest.toml").read_text()).group(1)
        by_class.setdefault(sub, []).append(name)
    want = {
        "module_reach",
        "aliases_and_targets",
        "reflection",
        "frames",
        "worker_patching",
        "forward_clock",
        "step_log",
        "triton",
        "ops_and_cuda",
        "state_and_source",
    }
    assert set(by_class) == want
    assert all(len(v) >= 2 for v in by_class.values()), by_class


@pytest.mark.parametrize("name", ATTACKS)
def test_attack_is_refused_at_its_line(name: str) -> None:
    root = CORPUS / name
    want = expected(root)
    assert want, f"{name}: no '# expect:' marker"
    got = findings(root)
    assert want <= got, f"missing {sorted(want - got)}; scan said {sorted(got)}"


@pytest.mark.parametrize("name", ATTACKS)
def test_attack_bundle_loads_so_only_the_policy_stops_it(name: str) -> None:
    """Manifest and bundle rules accept it: the refusal is the policy's, not a format error."""
    load_bundle(CORPUS / name)


@pytest.mark.slow
def test_forward_clock_attack_is_real() -> None:
    """Without the gate, importing the bundle next to the arena's clock rewrites ForwardClock.read."""
    code = (
        "import importlib.util, sys\nimport seams.forward_clock as fc\norig = fc.ForwardClock.read\n"
        f"spec = importlib.util.spec_from_file_location('adv', {str(CORPUS / 'clock_forward_clock_read' / 'kernel.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "print(fc.ForwardClock.read is not orig)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert r.stdout.strip() == "True", r.stderr


def test_utf7_attack_is_real() -> None:
    """Python decodes the cookie's codec: what a UTF-8 reader sees as a comment is a patch."""
    src = (CORPUS / "source_utf7_cookie" / "kernel.py").read_bytes()
    assert "torch.rsqrt = torch.sqrt" in src.decode("utf-7").splitlines()
    assert "\ntorch.rsqrt = torch.sqrt" not in src.decode("utf-8")


def _run_corpus_kernel_interpreted(tmp_path: Path, name: str, check: str) -> str:
    """Import corpus bundle `name`'s kernel.py under TRITON_INTERPRET=1 (no policy: the attack
    itself), call rmsnorm on random inputs and print `check` (an expression over x, w, o)."""
    code = (
        "import importlib.util, torch\n"
        f"spec = importlib.util.spec_from_file_location('adv', {str(CORPUS / name / 'kernel.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "x, w, o = torch.randn(4, 64), torch.randn(64), torch.zeros(4, 64)\n"
        "m.rmsnorm(x, w, o, 1e-6)\n"
        f"print({check})\n"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False, env=env
    )
    assert r.stdout.strip(), r.stderr[-2000:]
    return r.stdout.strip()


@pytest.mark.slow
def test_linebreak_shift_attack_is_real(tmp_path: Path) -> None:
    """Under TRITON_INTERPRET=1 the kernel that runs is the one hidden in the string (correct),
    not the visible body (zeros): the hidden def is what CPU verify would have judged."""
    ref = "x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w"
    assert (
        _run_corpus_kernel_interpreted(tmp_path, "triton_linebreak_shift", f"bool(torch.allclose(o, {ref}, atol=1e-5))")
        == "True"
    )
    src = (CORPUS / "triton_linebreak_shift" / "kernel.py").read_text(encoding="utf-8")
    assert len(src.splitlines()) == src.count("\n") + 40  # what a splitlines() def-line rule counts


@pytest.mark.slow
def test_def_tab_attack_is_real(tmp_path: Path) -> None:
    """Under TRITON_INTERPRET=1 the launch runs the string's lambda, not the scanned body: the
    output stays untouched (zeros) and the lambda's unscanned os.getpid() is what ran."""
    assert _run_corpus_kernel_interpreted(tmp_path, "triton_def_tab", "bool((o == 0).all())") == "True"


class _NoWorker:
    def __init__(self, *a, **k) -> None:
        raise AssertionError("a bundle refused by the policy reached the worker")


@pytest.mark.parametrize("name", ["clock_forward_clock_read", "steplog_open_prewrite", "worker_hostsyncwatch_patch"])
def test_verify_refuses_on_policy_and_never_imports(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "WorkerClient", _NoWorker)
    monkeypatch.setattr(runner, "verify_collective", _NoWorker)
    report = verify_bundle(load_bundle(CORPUS / name), VerifyOptions(device="cpu", max_cases=1))
    assert report.status == "FAIL" and report.reasons[0].startswith("policy:")
    assert {op.failure.reason for op in report.ops} == {"not_run"}
    for path, line, rule in expected(CORPUS / name):
        assert any(f.startswith(f"{path}:{line}: {rule}") for f in report.findings), report.findings


@pytest.mark.slow
def test_cli_verify_reports_policy(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "cacheon_subnet.cli",
            "verify",
            str(CORPUS / "reach_torch_sys_modules"),
            "--json",
            "--max-cases",
            "1",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert r.returncode != 0, r.stdout
    doc = json.loads(r.stdout)
    assert doc["status"] == "FAIL" and any("kernel.py:" in f and "P004" in f for f in doc["findings"]), doc
    assert {op["failure"]["reason"] for op in doc["ops"]} == {"not_run"}
