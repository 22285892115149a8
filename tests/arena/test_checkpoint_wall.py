"""The checkpoint step behind the real wall, then a later engine reading it: on the H200 (2026-12-02)
every engine after the checkpoint step failed to open model.safetensors (written 0600 by one leased
uid, re-owned by the host once that child was gone). The CPU fake-engine arenas skip the checkpoint
step, so nothing on CPU ran this path until this test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from arena.engine.host import EngineSpec, run_engine
from cacheon_subnet import sandbox

pytest.importorskip("safetensors")
sys.path.insert(0, str(Path(__file__).parent))
from test_checkpoint import DENSE  # noqa: E402

READ = """
import pathlib, sys
d = pathlib.Path(sys.argv[1])
names = sorted(p.name for p in d.iterdir())
for p in d.iterdir():
    p.read_bytes()  # what SGLang's loader does: every file opened by another uid
print("READ", len(names))
"""


@pytest.mark.slow
def test_a_checkpoint_made_behind_the_wall_is_readable_by_the_next_sandboxed_engine(tmp_path):
    if not sandbox.can_drop_privileges():
        pytest.skip("the sandbox wall cannot be established here")
    root = tmp_path / "checkpoints"
    root.mkdir()
    root.chmod(0o755)
    tmp_path.chmod(0o755)
    ck = root / "tiny"
    job = {
        "engine_kwargs": {},
        "engine_factory": "tests.arena.fake_engine:FakeEngine",
        "steps": [],
        "checkpoint_only": True,
        "checkpoint": {"hf_config": DENSE, "seed": 3, "dir": str(ck), "device": "cpu"},
    }
    made = run_engine(EngineSpec("checkpoint", job, timeout_s=300), tmp_path / "work")
    assert made.error is None and (ck / "model.safetensors").is_file(), (made.error, made.records)
    proc = sandbox.launch(
        [sys.executable, "-c", READ, str(ck)],
        scratch=tmp_path / "reader",
        policy=sandbox.SandboxPolicy(wall_timeout_s=60, ro_paths=(str(ck),)),
    )
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        sandbox.stop(proc)
    assert proc.returncode == 0 and b"READ" in out, out.decode()[-1500:]
