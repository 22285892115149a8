"""A kill -9 skips every cleanup: the scratch dirs a killed process made are swept at the next start
(validator startup), and never the dirs of a process that still runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cacheon_subnet.bundle import Scratch, sweep_scratch

CHILD = """
import sys, time
from cacheon_subnet.bundle import Scratch
s = Scratch("cacheon-scan-")
(s.path / "work").mkdir()
(s.path / "work" / "f").write_text("x")
(s.path / "work").chmod(0o555)  # a read-only tree, as a sealed bundle leaves it
print(s.path, flush=True)
time.sleep(600)
"""


@pytest.fixture
def scratch_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CACHEON_SCRATCH", str(tmp_path))
    return tmp_path


def _killed_childs_scratch() -> Path:
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    path = Path(proc.stdout.readline().strip())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert path.is_dir()  # nothing cleaned it up
    return path


def test_a_killed_processes_scratch_is_swept_and_a_live_ones_is_kept(scratch_base: Path) -> None:
    dead = _killed_childs_scratch()
    live = Scratch("cacheon-verify-")
    untagged = scratch_base / "cacheon-scan-abc123"  # not made by Scratch: no owner, never swept
    untagged.mkdir()
    try:
        assert sweep_scratch() == [dead]
        assert not dead.exists() and live.path.is_dir() and untagged.is_dir()
    finally:
        live.cleanup()
    assert not live.path.exists()


def test_a_reused_pid_does_not_keep_a_dead_makers_scratch(scratch_base: Path) -> None:
    """The name holds the maker's start time: this process's pid with another start time is a dead maker."""
    fake = scratch_base / f"cacheon-scan-p{os.getpid()}.1-zzzz"
    fake.mkdir()
    assert sweep_scratch() == [fake] and not fake.exists()
