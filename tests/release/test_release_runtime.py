"""Serving time: the release plugin routes through seams/ in scheduler ranks, or stays off with one
warning (another SGLang, another seam table, a tampered tree), and imports no validator, chain or
sandbox."""

from __future__ import annotations

import logging
import subprocess
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

import pytest

from cacheon_subnet.bundle.engine_tree import open_tree
from cacheon_subnet.env import ENGINE_TREE, ENGINE_TREE_DIGEST, SEAM_GATE, SEAM_STRICT
from cacheon_subnet.errors import BundleError
from cacheon_subnet.release import runtime
from tests.release.fixtures import REPO, built, owner, signed, versions  # noqa: F401 - fixtures


def _installed(wheel: Path, site: Path) -> Path:
    """What pip would put in site-packages (a wheel is unpacked as is); returns the package dir."""
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    (pkg,) = [p for p in site.iterdir() if p.is_dir() and not p.name.endswith(".dist-info")]
    return pkg


@pytest.fixture
def fake_registry(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any, Any]]:
    """sglang.srt.plugins.hook_registry as far as the plugin uses it."""
    calls: list[tuple[str, Any, Any]] = []
    mod = types.ModuleType("sglang.srt.plugins.hook_registry")
    mod.HookType = types.SimpleNamespace(AROUND="around")  # type: ignore[attr-defined]
    mod.HookRegistry = types.SimpleNamespace(register=lambda t, h, k: calls.append((t, h, k)))  # type: ignore[attr-defined]
    for name in ("sglang", "sglang.srt", "sglang.srt.plugins"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "sglang.srt.plugins.hook_registry", mod)
    return calls


def test_plugin_activates_on_the_pinned_sglang(signed: Path, tmp_path: Path, versions, fake_registry) -> None:
    versions()
    pkg = _installed(signed, tmp_path / "site")
    assert runtime.load_release(pkg) is True
    ((target, hook, kind),) = fake_registry
    assert target == "sglang.srt.managers.scheduler.Scheduler.__init__" and kind == "around"
    seen: dict[str, Any] = {}

    def activate(rank: int, environ: dict[str, str]) -> bool:
        seen.update(rank=rank, env=environ)
        return True

    p = runtime.plan(pkg)
    assert isinstance(p, runtime.Plan)
    out = runtime.scheduler_hook(p, activate)(lambda *a, **k: "scheduler", "self", "sa", "pa", 0, 3)
    env = seen["env"]
    assert out == "scheduler" and seen["rank"] == 3
    assert env[SEAM_GATE.of("attention")] == "1" and env[SEAM_GATE.of("norm")] == "0"
    assert env[SEAM_STRICT.name] == "0" and env[ENGINE_TREE.name] == str(pkg / "tree")
    tree = open_tree(Path(env[ENGINE_TREE.name]), env[ENGINE_TREE_DIGEST.name])  # what a rank reopens
    assert [op.slot for op in tree.ops] == ["attention.decode"]


def test_plugin_refuses_another_sglang_with_one_warning(
    signed: Path, tmp_path: Path, versions, fake_registry, caplog
) -> None:
    versions(sglang="0.5.22")
    pkg = _installed(signed, tmp_path / "site")
    with caplog.at_level(logging.INFO, logger="cacheon.release"):
        assert runtime.load_release(pkg) is False
    assert fake_registry == []
    (line,) = [r.getMessage() for r in caplog.records]
    assert "sglang 0.5.22 installed, the release pins 0.5.13.post1" in line and "stock kernels serve" in line


def test_plugin_refuses_another_seam_table(
    signed: Path, tmp_path: Path, versions, fake_registry, monkeypatch, caplog
) -> None:
    versions()
    monkeypatch.setattr(runtime, "seam_table_digest", lambda: "0" * 64)
    with caplog.at_level(logging.WARNING, logger="cacheon.release"):
        assert runtime.load_release(_installed(signed, tmp_path / "site")) is False
    assert fake_registry == [] and "seam table differs" in caplog.text


def test_plugin_never_crashes_on_an_unreadable_descriptor(signed: Path, tmp_path: Path, versions, caplog) -> None:
    versions()
    pkg = _installed(signed, tmp_path / "site")
    (pkg / "release.json").write_bytes(b"{not json")
    with caplog.at_level(logging.WARNING, logger="cacheon.release"):
        assert runtime.load_release(pkg) is False
    assert "not activated" in caplog.text


def test_rank_activation_failure_serves_stock(signed: Path, tmp_path: Path, versions, caplog) -> None:
    """A tampered kernel file after install: the rank's tree check refuses, the scheduler still builds."""
    versions()
    pkg = _installed(signed, tmp_path / "site")
    p = runtime.plan(pkg)
    assert isinstance(p, runtime.Plan)
    (kernel,) = list((pkg / "tree").rglob("decode.py"))
    kernel.write_text(kernel.read_text() + "\n# tampered\n")

    def activate(rank: int, environ: dict[str, str]) -> bool:
        open_tree(Path(environ[ENGINE_TREE.name]), environ[ENGINE_TREE_DIGEST.name])
        return True

    with pytest.raises(BundleError):
        activate(0, dict(p.environ))
    with caplog.at_level(logging.WARNING, logger="cacheon.release"):
        out = runtime.scheduler_hook(p, activate)(lambda *a, **k: "scheduler", "self", tp_rank=0)
    assert out == "scheduler" and "rank 0 not activated (BundleError" in caplog.text


BLOCKED = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        for p in ("cacheon_subnet.validator", "cacheon_subnet.chain", "cacheon_subnet.sandbox", "bittensor", "arena"):
            if name == p or name.startswith(p + "."):
                raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
import cacheon_subnet.release.runtime
import seams.activate  # what a scheduler rank imports when it activates
print("ok")
"""


def test_runtime_imports_no_validator_chain_or_sandbox() -> None:
    out = subprocess.run([sys.executable, "-c", BLOCKED], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_blocked_import_control_is_live() -> None:
    """The blocker itself works: a module that does import the validator is refused under it."""
    code = BLOCKED.replace(
        "import seams.activate", "import cacheon_subnet.release.build, cacheon_subnet.release.build as b; b.from_state"
    )
    code = code.replace('print("ok")', "b.from_state(__import__('pathlib').Path('/nonexistent'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "blocked: cacheon_subnet.validator" in out.stderr


def test_pip_installs_the_wheel_and_sglang_finds_its_plugin(
    signed: Path, tmp_path: Path, versions, fake_registry, monkeypatch
) -> None:
    """pip (no index, no deps) installs it; the entry point SGLang would load registers the hook, and
    the tree a rank reopens still checks with pip's __pycache__ beside the sources."""
    from importlib.metadata import entry_points

    site = tmp_path / "site"
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site), str(signed)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    monkeypatch.syspath_prepend(str(site))
    (ep,) = [e for e in entry_points(group="sglang.srt.plugins") if e.name.startswith("cacheon_release_")]
    versions()
    ep.load()()
    assert len(fake_registry) == 1
    p = runtime.plan(site / ep.name)
    assert isinstance(p, runtime.Plan)
    assert open_tree(Path(p.environ[ENGINE_TREE.name]), p.environ[ENGINE_TREE_DIGEST.name]).ops
