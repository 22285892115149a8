"""Shared pieces of the arena CPU tests (a plain module, not a conftest): a small arena config,
the stand-in SGLang runtime on PYTHONPATH, and a qualification with the fake engine."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "seams"))

import seam_harness  # noqa: E402

from arena.config import load_config  # noqa: E402
from arena.config_sections import QualitySection, SpeedSection, WorkloadSection  # noqa: E402
from arena.records import ArenaIdentity  # noqa: E402
from arena.run import RunOptions, qualify  # noqa: E402
from cacheon_subnet.bundle import Bundle, bundle_from_files  # noqa: E402

DENSE = REPO / "configs" / "arena" / "dense.toml"


def small_config(prompts: int = 4, output: int = 4, cycles: int = 2, max_noise: float = 0.02):
    cfg = load_config(DENSE)
    return replace(
        cfg,
        workload=WorkloadSection(
            prompts_per_window=prompts, input_len=8, output_len=output, cycles=cycles, warmup_windows=1
        ),
        quality=QualitySection(prompts=8, top_k=4),
        speed=replace(SpeedSection(), max_noise=max_noise),
    )


def runtime_env(tmp: Path, monkeypatch: Any) -> None:
    """The stand-in SGLang (tests/seams/seam_harness.py) first on the engine's PYTHONPATH."""
    root = seam_harness.write_runtime(tmp / "fake-sglang")
    monkeypatch.setenv("PYTHONPATH", str(root))
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def run(bundle: Bundle, tmp: Path, engine: str = "FakeEngine", cfg: Any = None, grade_always: bool = True) -> dict[str, Any]:
    """grade_always: the controls' quality verdicts are what these tests check, whatever the
    speed verdict (the validator's own path grades only a speed PASS)."""
    opts = RunOptions(
        workdir=tmp / "work",
        checkpoint_root=tmp / "ckpt",
        engine_factory=f"tests.arena.fake_engine:{engine}",
        grade_always=grade_always,
    )
    return qualify(cfg or small_config(), bundle, bundle.manifest.ops[0], opts)


def torch_bundle(salt: str = "a") -> Bundle:
    """A faithful torch-only norm.rmsnorm candidate (fast on CPU, unlike interpreted Triton) that
    passes the static policy (the arena seals only policy-clean code): the demo's torch RMSNorm."""
    demo = Path(__file__).resolve().parents[2] / "examples" / "demo" / "cpu_rmsnorm"
    files = {p.name: p.read_bytes() for p in demo.iterdir() if p.is_file()}
    files["kernel.py"] += f"\n# salt: {salt}\n".encode()
    return bundle_from_files(files, source=f"<arena-test {salt}>")


def identity(result_path: str = "/x/result.json") -> ArenaIdentity:
    """A hand-built result's identity (the arena writes the real one in arena/run.py)."""
    return ArenaIdentity(
        "arena-x", "test", None, "configs/arena/dense.toml", "d" * 64, "op", "norm.rmsnorm", "t0", result_path
    )
