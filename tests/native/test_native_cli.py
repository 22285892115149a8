"""`cacheon native build`, `cacheon verify` on a CUDA bundle, `cacheon miner init --lang cuda`."""

from __future__ import annotations

import json
import shutil

import pytest
from native_bundles import SCALE, cuda_bundle, needs_nvcc

from cacheon_subnet.cli import main


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("CACHEON_HOME", str(tmp_path / "home"))  # the default artifact cache lives here
    return tmp_path


def _write(bundle, dest):
    bundle.write_to(dest, read_only=False)
    return str(dest)


@needs_nvcc
def test_init_then_build_then_verify_a_cuda_scaffold(home, capsys):
    dest = home / "mine"
    assert main(["miner", "init", "--slot", "norm.rmsnorm", "--lang", "cuda", str(dest)]) == 0
    assert "next: cacheon native build" in capsys.readouterr().out
    assert (dest / "kernels" / "rmsnorm.cu").is_file() and "native.launch(kernel" in (dest / "rmsnorm.py").read_text()
    assert main(["native", "build", str(dest), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    op = doc["ops"][0]
    assert doc["status"] == "built" and op["status"] == "built" and op["arch"] == "sm_90a"
    assert [k["symbol"] for k in op["kernels"]] == ["rmsnorm_bf16", "rmsnorm_f16", "rmsnorm_f32"]
    assert op["artifact"].startswith(str(home / "home" / "native" / "artifacts"))
    assert main(["verify", str(dest)]) == 3  # compiled and checked; the trials need a GPU validator: not a PASS
    out = capsys.readouterr().out
    assert "NOT RUN" in out and "policy: ok" in out and "cached for sm_90a" in out and "not a PASS" in out


@needs_nvcc
def test_a_broken_cuda_bundle_fails_build_and_verify_with_file_and_line(home, capsys):
    src = _write(cuda_bundle(SCALE.replace("o[threadIdx.x]", "oops[threadIdx.x]")), home / "b")
    assert main(["native", "build", src]) == 1
    out = capsys.readouterr().out
    assert "FAIL (compile)" in out and 'k.cu:1: error: identifier "oops" is undefined' in out, out
    assert main(["verify", src, "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "FAIL" and any('native: k.cu:1: error: identifier "oops"' in r for r in doc["reasons"])


def test_scan_refusals_and_policy_findings_fail_verify_before_any_compile(home, capsys, monkeypatch):
    import native.build

    monkeypatch.setattr(native.build, "locate", lambda: pytest.fail("the toolchain is not needed for a refused scan"))
    bundle = cuda_bundle(
        '#include "/etc/passwd"\n' + SCALE, extra={"w.py": b"import os\ndef rmsnorm(x, weight, out, eps):\n    pass\n"}
    )
    src = _write(bundle, home / "b")
    assert main(["verify", src]) == 1
    out = capsys.readouterr().out
    assert "policy: w.py:1: P001" in out and "import of 'os'" in out, out
    assert "FAIL (scan)" in out and 'k.cu:1: #include "/etc/passwd": absolute paths' in out, out


def test_usage_errors_exit_2(home, capsys):
    from conftest import EXAMPLES

    assert main(["native", "build", str(home / "nope")]) == 2
    assert main(["native", "build", str(EXAMPLES / "norm.rmsnorm")]) == 2  # no [ops.cuda] op
    assert "no op has an [ops.cuda] table" in capsys.readouterr().err
    assert main(["miner", "init", "--slot", "rope.neox", "--lang", "cuda", str(home / "r")]) == 2
    assert "no CUDA scaffold for slot rope.neox" in capsys.readouterr().err


def test_a_host_without_the_toolchain_or_the_wall_is_told_what_to_fix(home, capsys, monkeypatch):
    import importlib.metadata as md

    import native.toolchain as tc
    from cacheon_subnet.errors import SandboxError

    src = _write(cuda_bundle(), home / "b")
    real = md.version
    monkeypatch.setattr(tc.md, "version", lambda d: "13.0.1" if d == "nvidia-cuda-nvcc" else real(d))
    tc.locate.cache_clear()
    try:
        assert main(["native", "build", src]) == 2
        err = capsys.readouterr().err
        assert "nvidia-cuda-nvcc 13.0.1 (pin 13.0.88)" in err and "pip install -e '.[native]'" in err
    finally:
        tc.locate.cache_clear()
    if shutil.which("g++") is None:
        return
    monkeypatch.setattr(tc.md, "version", real)
    import native.lane

    def no_wall(*a, **k):
        raise SandboxError("sandbox: the validator runs as uid 1000, not root")

    monkeypatch.setattr(native.lane.sandbox, "launch", no_wall)
    try:
        tc.locate()
    except tc.ToolchainMissing:
        return  # no toolchain here: the first half said so
    assert main(["native", "build", src]) == 2
    assert "cannot start nvcc behind the sandbox wall" in capsys.readouterr().err
