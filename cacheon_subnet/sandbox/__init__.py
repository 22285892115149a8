"""The only place that launches contribution code: the OS wall around every such child.

Layers (tests/sandbox/test_sandbox.py, tests/adversarial/test_oswall*.py; `cacheon doctor` prints them):
1. a dedicated unprivileged uid (CACHEON_SANDBOX_UID, default 64000: not the validator's, not
   nobody), no supplementary groups, no_new_privs, no capabilities (setpriv);
2. fresh user/pid/net/mount/ipc/uts/cgroup namespaces, no nested user namespaces, new session,
   killed with its parent (bwrap); only `lo` in the net namespace;
3. an allowlist filesystem view (fsview.py): system dirs, Python and the repo read-only; the
   scratch dir, /tmp and /dev/shm are private size-bounded tmpfs; nothing else writable;
4. seccomp (seccomp.py): no ptrace / process_vm_* / setns / unshare / mounts / bpf / keyring ...;
5. rlimits: processes (of the dedicated uid), CPU seconds, address space (CPU children), file
   size, open files, no core dumps;
6. a scrubbed environment, HOME and caches inside the scratch, TMPDIR=/tmp;
7. the in-child audit hook (guard.py), defence in depth.
Fail closed: when any layer cannot be established `launch` raises SandboxError saying what to fix.
The only way around is explicit and loud (policy.weak_requested): a warning on stderr and in the
log for every launch, and CACHEON_SANDBOX_MODE=weak in the child's environment.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from cacheon_subnet import lifecycle, sockpath
from cacheon_subnet.env import LOG_LEVEL, SANDBOX, SANDBOX_MODE, SANDBOX_SCRATCH
from cacheon_subnet.errors import SandboxError
from cacheon_subnet.procs import live_members
from cacheon_subnet.sandbox import launcher, tmpfs
from cacheon_subnet.sandbox.fsview import chown_tree, reclaim_tree, remove_tree
from cacheon_subnet.sandbox.policy import (
    DEFAULT_UID,
    NOBODY,
    SandboxPolicy,
    WallConfig,
    lease_uid,
    wall_config,
    weak_requested,
)
from cacheon_subnet.sandbox.probe import Isolation, probe_isolation

__all__ = [
    "DEFAULT_UID",
    "NOBODY",
    "Isolation",
    "SandboxError",
    "SandboxPolicy",
    "WallConfig",
    "can_drop_privileges",
    "child_env",
    "launch",
    "live_members",
    "members",
    "probe_isolation",
    "remove_tree",
    "stop",
    "wall_config",
    "weak_requested",
]

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1

# Environment passed through to the child (everything else is dropped).
_ENV_KEEP = (
    "PATH",
    "LANG",
    "LC_ALL",
    "PYTHONPATH",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_HOME",
    "LD_LIBRARY_PATH",
    "TRITON_INTERPRET",
    "TRITON_PTXAS_PATH",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
    LOG_LEVEL.name,
    "VIRTUAL_ENV",
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
)
# Engine/JIT settings the operator chose (cache dirs, feature switches) pass through by prefix.
_ENV_KEEP_PREFIXES = ("SGLANG_", "FLASHINFER_", "TVM_FFI_", "CUDA_")


def child_env(scratch: Path, policy: SandboxPolicy, weak: bool = False, tmpdir: Path | None = None) -> dict[str, str]:
    """The child's whole environment. TMPDIR is short whatever `scratch` is (sockpath.py: SGLang's
    ZMQ sockets live there): the wall's private /tmp, or in weak mode `tmpdir` (a short dir from
    short_tmpdir()); a policy that sets a TMPDIR too long for them is refused."""
    env = {k: v for k, v in os.environ.items() if k in _ENV_KEEP or k.startswith(_ENV_KEEP_PREFIXES)}
    home, cache = scratch / "home", scratch / "cache"
    tmp = "/tmp" if not weak else str(tmpdir or scratch / "tmp")
    env.update(
        HOME=str(home),
        TMPDIR=tmp,
        XDG_CACHE_HOME=str(cache),
        TRITON_CACHE_DIR=str(cache / "triton"),
        TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"),
        TORCHINDUCTOR_COMPILE_THREADS="1",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        PYTHONNOUSERSITE="1",
        **{SANDBOX_SCRATCH.name: str(scratch)},
        # the leased uid has no passwd entry: getpass.getuser() (Triton, Inductor) reads these first
        USER="cacheon-sandbox",
        LOGNAME="cacheon-sandbox",
        **{SANDBOX_MODE.name: "weak" if weak else "wall"},
        NCCL_NVLS_ENABLE="0",
        TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
        NVSHMEM_DISABLE_NVLS="1",
    )
    # The child must import this package even when it is not installed (source checkouts).
    here = str(Path(__file__).resolve().parent.parent.parent)
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(policy.extra_env)
    try:
        sockpath.check_tmpdir(env["TMPDIR"], "sandbox child")
    except ValueError as e:
        raise SandboxError(str(e)) from None
    return env


def short_tmpdir() -> Path:
    """A fresh private dir whose path is short and fixed-length (/tmp/cx-XXXXXXXX): a weak-mode
    child's TMPDIR, so its socket paths never depend on where its scratch lives."""
    return Path(tempfile.mkdtemp(prefix="cx-", dir="/tmp"))


def can_drop_privileges() -> bool:
    """True when the full wall can be established here (kept name: callers/tests ask this)."""
    try:
        launcher.preflight()
        return True
    except SandboxError:
        return False


def launch(
    argv: Sequence[str],
    *,
    scratch: Path,
    policy: SandboxPolicy,
    pass_fds: Sequence[int] = (),
    stdout: int | None = subprocess.PIPE,
    stderr: int | None = subprocess.STDOUT,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start `argv` behind the wall. Caller owns the Popen; use `stop()` to end it. Inside,
    `scratch` is a fresh tmpfs (host-visible results travel over pass_fds, stdout, rw_paths)."""
    scratch = Path(scratch)
    why_weak = weak_requested(policy)
    if why_weak:
        return _launch_weak(argv, scratch, policy, pass_fds, stdout, stderr, cwd, why_weak)
    cfg, lease = lease_uid(launcher.preflight())
    fs_root = None
    try:
        scratch.mkdir(parents=True, exist_ok=True)
        for p in (*policy.rw_paths, *(src for src, _ in policy.fixed_binds)):
            if not os.path.exists(p):
                raise SandboxError(f"sandbox: rw path {p} does not exist (create it before launch)")
            chown_tree(Path(p), cfg.uid, cfg.gid) if os.path.isdir(p) else os.chown(p, cfg.uid, cfg.gid)
        env = child_env(scratch, policy)
        fs_root, why = tmpfs.mount_bounded(cfg.uid, cfg.gid, policy)  # bytes AND inodes bounded
        if fs_root is None:
            tmpfs.warn_unbounded(why)
        cmd = launcher.build(argv, scratch, policy, cfg, cwd, env, fs_root)
        proc = launcher.popen(cmd, env, pass_fds, stdout, stderr)
    except BaseException:
        if fs_root:
            tmpfs.unmount(fs_root)
        os.close(lease)
        raise
    proc.cacheon_fs = fs_root  # type: ignore[attr-defined]  # detached by stop()
    proc.cacheon_lease = lease  # type: ignore[attr-defined]  # released by stop()
    proc.cacheon_uid = cfg.uid  # type: ignore[attr-defined]
    # host dirs the child may write: the host's again once it is gone (stop: reclaim_tree)
    proc.cacheon_handed = (*policy.rw_paths, *(src for src, _ in policy.fixed_binds))  # type: ignore[attr-defined]
    lifecycle.track(proc.pid, scratch)  # a shutdown kills it; a crash's leftovers are reaped on restart
    return proc


def weak_warning(why: str, miner_side: bool) -> str:
    """The weak-mode line. A miner's own tool (bench) on the miner's machine runs the miner's own
    code: tell them what that means for them, not the validator's "NEVER" (a miner read it as a
    fault of theirs). Everything else weak (CACHEON_SANDBOX=weak) keeps the validator-facing line."""
    if miner_side:
        return (
            f"cacheon: your bundle runs as your own user (uid {os.getuid()}) in a resource-limited worker without "
            "the validator's sandbox wall (dedicated uid, filesystem view, seccomp): fine for your own code on "
            "your own machine; validators run it behind the full wall. Do not run bundles you do not trust this way."
        )
    return (
        f"cacheon sandbox: WEAK MODE ({why}): contribution code runs as uid {os.getuid()} with no dedicated "
        "user, filesystem view or seccomp filter. NEVER use this on a validator."
    )


def _warn_weak(why: str, miner_side: bool = False) -> None:
    print(weak_warning(why, miner_side), file=sys.stderr, flush=True)
    from cacheon_subnet.log import get_logger

    try:
        # the miner was just told in words; a validator-side weak launch is also a warning record
        (get_logger("sandbox").info if miner_side else get_logger("sandbox").warning)(
            "sandbox.weak", reason=why, uid=os.getuid()
        )
    except (ValueError, OSError):  # a closed log stream must not turn a warning into a crash
        pass


def _launch_weak(
    argv: Sequence[str],
    scratch: Path,
    policy: SandboxPolicy,
    pass_fds: Sequence[int],
    stdout: int | None,
    stderr: int | None,
    cwd: Path | None,
    why: str,
) -> subprocess.Popen[bytes]:
    """Development/miner-side only, and loud: own session, a net namespace if allowed, rlimits."""
    _warn_weak(why, miner_side=not policy.drop_privileges and SANDBOX.get() != "weak")
    for d in ("home", "cache"):
        (scratch / d).mkdir(parents=True, exist_ok=True)
    tmp = short_tmpdir()
    try:
        env = child_env(scratch, policy, weak=True, tmpdir=tmp)
        inside = {dest: src for src, dest in policy.fixed_binds}  # no mount namespace: the host dirs
        env = {k: inside.get(v, v) for k, v in env.items()}
    except BaseException:
        remove_tree(tmp)
        raise
    limits = launcher.rlimits(policy, nproc=False)

    def pre() -> None:
        if policy.isolate_network:
            libc = ctypes.CDLL(None, use_errno=True)
            flags = CLONE_NEWNET if os.geteuid() == 0 else CLONE_NEWUSER | CLONE_NEWNET
            if libc.unshare(flags) == 0 and policy.loopback:
                _loopback_up()
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the wall's bwrap: --die-with-parent
        launcher.apply_rlimits(limits, strict=False)
        os.umask(0o077)

    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=str(cwd or scratch),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            pass_fds=tuple(pass_fds),
            close_fds=True,
            start_new_session=True,
            preexec_fn=pre,
        )  # noqa: PLW1509 - weak mode only (development)
    except OSError as e:
        remove_tree(tmp)
        raise SandboxError(f"cannot start sandboxed child {argv[:2]}: {e}") from e
    proc.cacheon_staged = (tmp,)  # type: ignore[attr-defined]  # removed by stop()
    lifecycle.track(proc.pid, scratch)
    return proc


def _loopback_up() -> None:
    """SIOCSIFFLAGS(lo, UP|LOOPBACK|RUNNING) in the current (fresh) network namespace."""
    import fcntl
    import socket
    import struct

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            fcntl.ioctl(s.fileno(), 0x8914, struct.pack("16sH14x", b"lo", 0x1 | 0x8 | 0x40))
    except OSError:
        pass


def _pid_namespace(pid: int) -> str | None:
    """The pid namespace of bwrap's inner init (child of the outer bwrap), None when gone."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        own = os.readlink(f"/proc/{pid}/ns/pid")
        for k in kids:
            ns = os.readlink(f"/proc/{k}/ns/pid")
            if ns != own:
                return ns
    except OSError:
        pass
    return None


def namespace_members(ns: str) -> list[int]:
    """Live (not zombie) processes of pid namespace `ns` ("pid:[inode]")."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") == ns and _state(entry) not in ("Z", "X"):
                    out.append(int(entry))
            except OSError:
                continue
    return out


def _state(pid: str) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2 :].split()[0]


def stop(proc: subprocess.Popen[bytes], grace_s: float = 2.0) -> None:
    """End the child and every descendant: TERM to its process group, a grace period, then KILL;
    then wait until no member of its group, nor of its pid namespace, is left (a setsid or
    double-forked descendant cannot leave the pid namespace, which dies with bwrap)."""
    ns = _pid_namespace(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    for target in [proc.pid] + (namespace_members(ns) if ns else []):
        try:
            os.killpg(target, signal.SIGKILL) if target == proc.pid else os.kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 5.0  # SIGKILL is asynchronous: "stopped" means no member still runs
    while (live_members(proc.pid) or (ns and namespace_members(ns))) and time.monotonic() < deadline:
        time.sleep(0.02)
    for d in getattr(proc, "cacheon_staged", ()):
        remove_tree(d)
    gone = not (ns and namespace_members(ns)) and not live_members(proc.pid)
    if gone:
        lifecycle.untrack(proc.pid)
    if gone:
        for p in getattr(proc, "cacheon_handed", ()):
            reclaim_tree(p)
    fs_root = getattr(proc, "cacheon_fs", None)
    if fs_root and gone:
        tmpfs.unmount(fs_root)
        proc.cacheon_fs = None  # type: ignore[attr-defined]
    lease = getattr(proc, "cacheon_lease", None)
    if lease is not None and gone:
        os.close(lease)  # the uid is free for the next child only once nothing of this one runs
        proc.cacheon_lease = None  # type: ignore[attr-defined]


def members(proc: subprocess.Popen[bytes]) -> list[int]:
    """The live processes of a launched child: its pid namespace's behind the wall (every
    descendant, setsid or not), else (weak mode, or before bwrap's inner init exists) its
    process group's."""
    ns = getattr(proc, "cacheon_ns", None) or _pid_namespace(proc.pid)
    if ns:
        proc.cacheon_ns = ns  # type: ignore[attr-defined]
        return namespace_members(ns)
    return live_members(proc.pid)
