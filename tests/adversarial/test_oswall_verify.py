"""`cacheon verify` behind the OS wall end to end, and class 7 (what a child leaves in its
scratch never breaks cleanup nor leaks a temp dir), and the wall's start-up cost per child."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cacheon_subnet import sandbox
from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.sandbox import launcher
from cacheon_subnet.verify import VerifyOptions, verify_bundle
from cacheon_subnet.verify.static import bound as policy_bound

EXAMPLE = Path(__file__).resolve().parent.parent.parent / "examples" / "norm.rmsnorm"
OPTS = VerifyOptions(device="cpu", max_cases=1, call_timeout_s=60)

LITTER = """
import os as _os
_s = _os.environ["CACHEON_SANDBOX_SCRATCH"]
for _n, _t in (("to-root", "/"), ("to-etc", "/etc"), ("loop-a", "loop-b"), ("loop-b", "loop-a"), ("dangling", "/nope")):
    _os.symlink(_t, _os.path.join(_s, _n))
_os.mkfifo(_os.path.join(_s, "fifo"))
_os.makedirs(_os.path.join(_s, "locked", "deep"))
open(_os.path.join(_s, "locked", "deep", "f"), "w").write("x")
_os.chmod(_os.path.join(_s, "locked", "deep"), 0)
_os.chmod(_os.path.join(_s, "locked"), 0)
"""


@pytest.fixture
def scratch_base(tmp_path, monkeypatch):
    base = tmp_path / "scratch-base"
    base.mkdir()
    monkeypatch.setenv("CACHEON_SCRATCH", str(base))
    return base


@pytest.mark.slow
def test_verify_runs_behind_the_wall(scratch_base, monkeypatch):
    seen: list[tuple[str, ...]] = []
    real = launcher.popen

    def record(cmd, *a, **k):
        seen.append(cmd.argv)
        return real(cmd, *a, **k)

    monkeypatch.setattr(launcher, "popen", record)
    report = verify_bundle(load_bundle(EXAMPLE), OPTS)
    assert report.status == "PASS", report.render()
    assert seen, "the worker was not started through the wall"
    cfg = sandbox.wall_config()
    leased = {f"--reuid={cfg.uid + n}" for n in range(cfg.count)}  # any uid of the range: others may hold a lease
    for argv in seen:
        assert leased & set(argv) and "--no-new-privs" in argv and "--clear-groups" in argv
        assert "--unshare-all" in argv and "--disable-userns" in argv and "--seccomp" in argv
        assert "--die-with-parent" in argv and len(argv) - argv[::-1].index("--") > argv.index("--seccomp")
    assert list(scratch_base.iterdir()) == [], "verify leaked a temp dir"


@pytest.mark.slow
def test_litter_in_scratch_never_breaks_cleanup(tmp_path, scratch_base, monkeypatch):
    bundle_dir = tmp_path / "litter"
    shutil.copytree(EXAMPLE, bundle_dir)
    mod = bundle_dir / "rmsnorm.py"
    mod.write_text(mod.read_text() + LITTER)
    monkeypatch.setattr(policy_bound, "static_check", lambda bundle, **kw: policy_bound.StaticResult(()))  # as if
    # the static scan had been bypassed
    report = verify_bundle(load_bundle(bundle_dir), OPTS)
    assert report.status == "PASS", report.render()  # the litter is harmless: a verdict, not a traceback
    assert list(scratch_base.iterdir()) == [], "verify leaked a temp dir"
    assert os.path.isdir("/etc") and os.listdir("/etc")  # no link was followed while removing


def test_remove_tree_is_what_verify_cleanup_uses(tmp_path, monkeypatch):
    """Control: the stock rmtree-with-chmod cleanup raises on a scratch with a symlink (Python
    3.11 has no lchmod); remove_tree does not."""
    from cacheon_subnet.bundle import Scratch

    monkeypatch.setenv("CACHEON_SCRATCH", str(tmp_path))
    s = Scratch("litter-")
    os.symlink("/etc", s.path / "link")
    with pytest.raises(NotImplementedError):
        os.chmod(s.path / "link", 0o644, follow_symlinks=False)
    assert sandbox.remove_tree(s.path) == [] and not s.path.exists()
    s.cleanup()  # nothing left: a no-op


def _start_cost(n: int) -> float:
    t = []
    for _ in range(n):
        t0 = time.perf_counter()
        proc = sandbox.launch(
            [sys.executable, "-I", "-S", "-c", "pass"],
            scratch=Path("/tmp/cacheon-cost"),
            policy=sandbox.SandboxPolicy(),
            stdout=subprocess.DEVNULL,
        )
        proc.wait(timeout=60)
        sandbox.stop(proc)
        t.append(time.perf_counter() - t0)
    return sorted(t)[len(t) // 2]


def test_start_up_cost_of_the_wall(monkeypatch, capsys):
    wall = _start_cost(7)
    monkeypatch.setenv("CACHEON_SANDBOX", "weak")
    weak = _start_cost(7)
    with capsys.disabled():
        print(
            f"\n[oswall] median start-to-exit of `python -I -S -c pass`: wall {wall * 1000:.0f} ms, "
            f"weak {weak * 1000:.0f} ms, overhead {(wall - weak) * 1000:.0f} ms per child"
        )
    assert wall - weak < 2.0


DEEP = """
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
for _ in range(1500):  # past Python's recursion limit (os.walk and shutil.rmtree recurse per level)
    os.mkdir("d", dir_fd=fd)
    n = os.open("d", os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = n
os.close(os.open("suid", os.O_CREAT | os.O_WRONLY, 0o755, dir_fd=fd))
os.chmod("suid", 0o4777, dir_fd=fd)
print("MADE", flush=True)
"""


def test_a_tree_deeper_than_the_recursion_limit_never_breaks_stop(tmp_path):
    """Class 7, second attack: a child leaves a 1500-level directory chain (a setuid, world-
    writable file at the bottom) in a dir it was handed read-write (the arena's answers dir, a
    collective rank's logs). stop() used to raise RecursionError from reclaim_tree (os.walk) and
    remove_tree raised it too: the host's cleanup ended in a traceback, the mount left attached."""
    import tempfile

    handed = Path(tempfile.mkdtemp(prefix="cacheon-deep-", dir="/tmp"))
    handed.chmod(0o755)  # the sandbox uid must reach it (pytest's tmp_path is under a 0700 dir)
    try:
        proc = sandbox.launch(
            [sys.executable, "-c", DEEP, str(handed)],
            scratch=tmp_path / "w",
            policy=sandbox.SandboxPolicy(wall_timeout_s=60, rw_paths=(str(handed),)),
        )
        try:
            out, _ = proc.communicate(timeout=60)
        finally:
            sandbox.stop(proc)  # must not raise
        assert b"MADE" in out, out[-500:]
        bottom = handed / "/".join(["d"] * 1500) / "suid"
        st = bottom.lstat()
        assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid()), st  # reclaimed to the host at any depth
        assert st.st_mode & 0o7777 == 0o755, oct(st.st_mode)  # no set-id bit, no write for others
        assert sandbox.remove_tree(handed) == [] and not handed.exists()
    finally:
        sandbox.remove_tree(handed)


LONG = """
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
for _ in range(17):  # 17 x 251 characters: the path is longer than PATH_MAX (4096)
    os.mkdir("x" * 250, dir_fd=fd)
    n = os.open("x" * 250, os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = n
os.close(os.open("suid", os.O_CREAT | os.O_WRONLY, 0o755, dir_fd=fd))
os.chmod("suid", 0o4777, dir_fd=fd)
print("MADE", flush=True)
"""


def test_a_file_below_path_max_in_a_handed_dir_is_reclaimed_too(tmp_path):
    """Red team 2026-12-03: reclaim_tree walked with os.walk, which joins path strings, got
    ENAMETOOLONG below 4096 characters and skipped the rest without a word: a setuid,
    world-writable file the child left there stayed its uid's (the arena's receipts dir outlives
    the run). Now the walk goes by directory fds (fsview.walk_fds)."""
    import tempfile

    from cacheon_subnet.sandbox.fsview import walk_fds

    handed = Path(tempfile.mkdtemp(prefix="cacheon-long-", dir="/tmp"))
    handed.chmod(0o755)
    try:
        proc = sandbox.launch(
            [sys.executable, "-c", LONG, str(handed)],
            scratch=tmp_path / "w",
            policy=sandbox.SandboxPolicy(wall_timeout_s=60, rw_paths=(str(handed),)),
        )
        try:
            out, _ = proc.communicate(timeout=60)
        finally:
            sandbox.stop(proc)
        assert b"MADE" in out, out[-500:]
        found = [(name, st) for _, name, st in walk_fds(handed, 64) if name == "suid"]
        assert found, "the child's file is missing"
        st = found[0][1]
        assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid()), st
        assert st.st_mode & 0o7777 == 0o755, oct(st.st_mode)
        assert sandbox.remove_tree(handed) == [] and not handed.exists()
    finally:
        sandbox.remove_tree(handed)
