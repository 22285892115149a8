"""SGLang's ZMQ IPC sockets live under the engine's TMPDIR (`$TMPDIR/tmpXXXXXXXX[.N]`). Issue 16:
the validator's own GPU path died at engine start because that dir was derived from the arena
home and the work dir (121 bytes > 107). The engine's TMPDIR must be short by construction,
inside the wall and in weak mode, for the longest slot id and however long the homes are."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from arena.config import load_config
from arena.qualifier import GpuQualifier, default_home
from cacheon_subnet import sandbox, sockpath
from cacheon_subnet.bundle import bundle_from_files
from cacheon_subnet.slots import all_slots

REPO = Path(__file__).resolve().parents[2]
ENGINES = ("checkpoint", "resident", "confirm", "teacher")  # every engine name arena/run.py starts
LONG = "/var/tmp/" + "h" * 180  # a long CACHEON_ARENA_HOME (and, below, a long work dir)


def _longest_op():
    slot = max(all_slots(), key=lambda s: len(s.id))
    files = {
        "manifest.toml": (
            f'schema = "cacheon.bundle/2"\n[[ops]]\nslot = "{slot.id}"\nentry = "kernel:k"\n'
            f'variant = "{"v" * 32}"\ndtypes = ["bfloat16"]\n'
        ).encode(),  # the longest variant
        "kernel.py": b"def k(**kw):\n    pass\n",
    }
    b = bundle_from_files(files, source="<sock test>")
    return b, b.manifest.ops[0]


def test_sglang_tail_is_what_tempfile_makes():
    import tempfile

    name = Path(tempfile.NamedTemporaryFile(dir="/tmp", delete=True).name).name
    assert len("/" + name + ".9999") == sockpath.SGLANG_IPC_TAIL


@pytest.mark.parametrize("home", [None, LONG])
@pytest.mark.parametrize("weak", [False, True])
def test_engine_tmpdir_fits_for_the_longest_slot_and_any_home(tmp_path, monkeypatch, home, weak):
    if home is None:
        monkeypatch.delenv("CACHEON_ARENA_HOME", raising=False)
        monkeypatch.setattr("arena.qualifier.default_home", lambda: Path("/var/tmp/cacheon"))
    else:
        monkeypatch.setenv("CACHEON_ARENA_HOME", str(tmp_path / ("h" * 180)))
    bundle, op = _longest_op()
    work = GpuQualifier(load_config(REPO / "configs/arena/dense.toml")).options(bundle, op).workdir
    assert len(str(work / "resident-scratch/tmp/tmpXXXXXXXX")) > sockpath.MAX_SOCKET_PATH or home is None
    for name in ENGINES:
        scratch = work / f"{name}-scratch"
        tmp = sandbox.short_tmpdir() if weak else None
        try:
            env = sandbox.child_env(scratch, sandbox.SandboxPolicy(), weak=weak, tmpdir=tmp)
            assert sockpath.ipc_path_len(env["TMPDIR"]) <= sockpath.MAX_SOCKET_PATH, env["TMPDIR"]
            assert not env["TMPDIR"].startswith(str(work)), "TMPDIR derived from the work dir"
        finally:
            if tmp is not None:
                tmp.rmdir()


def test_a_too_long_tmpdir_is_refused_with_the_reason(tmp_path):
    with pytest.raises(sandbox.SandboxError, match="too long for SGLang's ZMQ IPC sockets"):
        sandbox.child_env(tmp_path, sandbox.SandboxPolicy(extra_env={"TMPDIR": LONG}))


BIND = """
import os, socket, tempfile
name = tempfile.NamedTemporaryFile(delete=False).name + ".9999"  # SGLang's PortArgs name + dp rank
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(name)
print("BOUND", len(name), os.environ["TMPDIR"])
"""


@pytest.mark.parametrize("weak", [False, True])
def test_a_child_under_a_long_scratch_binds_its_ipc_socket(tmp_path, monkeypatch, weak):
    """The real thing: a sandboxed child whose scratch path alone is past the limit binds a Unix
    socket where SGLang would put its ZMQ endpoints."""
    if weak:
        monkeypatch.setenv("CACHEON_SANDBOX", "weak")
    elif not sandbox.can_drop_privileges():
        pytest.skip("the sandbox wall cannot be established here")
    scratch = tmp_path / ("s" * 120) / "resident-scratch"
    assert len(str(scratch)) > sockpath.MAX_SOCKET_PATH
    proc = sandbox.launch(
        [sys.executable, "-c", BIND],
        scratch=scratch,
        policy=sandbox.SandboxPolicy(wall_timeout_s=30, isolate_network=not weak),
    )
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        sandbox.stop(proc)
    assert proc.returncode == 0 and b"BOUND" in out, out.decode()[-1500:]
    if weak:  # the short weak-mode TMPDIR is gone with the child
        tmpdir = out.decode().split()[-1]
        assert not Path(tmpdir).exists()


def test_arena_run_without_workdir_uses_the_same_short_engine_tmpdir(tmp_path, monkeypatch):
    """`cacheon arena run --config ... --bundle ...` (no --workdir) and a --control run: their
    work dirs live under the arena home; what the engines get as TMPDIR must not."""
    import argparse

    import arena.run
    from arena.commands import cmd_arena_run

    monkeypatch.setenv("CACHEON_ARENA_HOME", str(tmp_path / ("h" * 180)))
    seen = []

    def fake_qualify(cfg, bundle, op, opts, incumbent=None):
        seen.append(opts.workdir)
        raise arena.run.ArenaUnavailable("stop here")

    monkeypatch.setattr(arena.run, "qualify", fake_qualify)
    bundle_dir = REPO / "examples" / "demo" / "cpu_rmsnorm"
    base = dict(
        config=str(REPO / "configs/arena/dense.toml"),
        bundle=None,
        incumbent=None,
        op=None,
        workdir=None,
        out=None,
        json=False,
        control=None,
        handicap_us=None,
        slot=None,
    )
    for kw in (
        {"bundle": str(bundle_dir)},
        {"control": "handicap", "handicap_us": 5000.0, "slot": max(all_slots(), key=lambda s: len(s.id)).id},
    ):
        with pytest.raises(Exception, match="stop here"):
            cmd_arena_run(argparse.Namespace(**{**base, **kw}))
    assert len(seen) == 2 and all(str(w).startswith(str(default_home())) for w in seen)
    for w in seen:
        env = sandbox.child_env(w / "resident-scratch", sandbox.SandboxPolicy())
        assert sockpath.ipc_path_len(env["TMPDIR"]) <= sockpath.MAX_SOCKET_PATH


def test_a_real_socket_at_the_limit_binds_and_one_past_it_does_not(tmp_path):
    """MAX_SOCKET_PATH is the platform's: bind at exactly it works, one byte more fails."""
    base = tmp_path / "x"
    base.mkdir()
    room = sockpath.MAX_SOCKET_PATH - len(str(base)) - 1
    ok = base / ("a" * room)
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(ok))
    with socket.socket(socket.AF_UNIX) as s, pytest.raises(OSError):
        s.bind(str(base / ("b" * (room + 1))))


def test_bundle_code_may_write_its_weak_mode_tmpdir_but_not_the_shared_tmp(tmp_path):
    """Weak mode moved TMPDIR out of the scratch (to keep it short): the verify worker's guard
    must still let Triton build its launcher there, and never open the shared /tmp."""
    from cacheon_subnet.verify.worker_boot import guard_writable

    tmp = sandbox.short_tmpdir()
    try:
        env = sandbox.child_env(tmp_path, sandbox.SandboxPolicy(), weak=True, tmpdir=tmp)
        assert str(tmp) in guard_writable(env, "/")
        assert "/tmp" not in guard_writable({**env, "TMPDIR": "/tmp"}, "/")
        assert "/tmp" in guard_writable(sandbox.child_env(tmp_path, sandbox.SandboxPolicy()), "/")  # the wall's own
    finally:
        tmp.rmdir()
