"""The only place that launches contribution code: a child process with layered confinement.

Layers (each tested on its own in tests/test_sandbox.py):
1. own process group + hard wall-clock timeout that kills the whole group;
2. no network: a fresh network namespace (root, or an unprivileged user namespace), and an
   audit hook inside the child that refuses sockets either way;
3. privileges dropped to `nobody` when started as root, so read-only files really are;
4. rlimits: CPU seconds, address space (CPU runs), file size, open files, no core dumps;
5. a scrubbed environment, HOME/TMPDIR/caches inside the child's own scratch dir;
6. the audit hook (`install_guard`) refuses process spawning, native library loading, GC
   scanning, env mutation and writes outside the scratch dir when bundle code asks for them.
"""

from __future__ import annotations

import ctypes
import functools
import os
import stat
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from cacheon_subnet.errors import SandboxError

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
NOBODY = 65534

# Environment passed through to the child (everything else is dropped).
_ENV_KEEP = (
    "PATH", "LANG", "LC_ALL", "PYTHONPATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "LD_LIBRARY_PATH",
    "TRITON_INTERPRET", "TRITON_PTXAS_PATH", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS", "CACHEON_LOG_LEVEL", "VIRTUAL_ENV", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
)
# Engine/JIT settings the operator chose (cache dirs, feature switches) pass through by prefix.
_ENV_KEEP_PREFIXES = ("SGLANG_", "FLASHINFER_", "TVM_FFI_", "CUDA_")


@dataclass(frozen=True)
class SandboxPolicy:
    wall_timeout_s: float = 300.0
    cpu_seconds: int | None = 1800
    address_space_bytes: int | None = None  # set for CPU-only children; CUDA maps huge VA ranges
    file_bytes: int = 256 * 1024 * 1024
    open_files: int = 1024
    isolate_network: bool = True
    loopback: bool = False  # bring `lo` up inside the fresh namespace (engines rendezvous on 127.0.0.1)
    drop_privileges: bool = True
    extra_env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Isolation:
    """What the platform let us apply (recorded in reports; tests assert the strong path)."""

    network_namespace: bool
    dropped_to_uid: int | None


def probe_isolation(policy: SandboxPolicy) -> Isolation:
    """Run a trivial child under the policy and report which layers actually held."""
    code = "import os,socket;print(os.getuid());s=socket.socket();\ntry:\n s.connect(('1.1.1.1',53));print('net')\nexcept OSError:\n print('nonet')"
    with tempfile.TemporaryDirectory(prefix="cacheon-probe-") as tmp:
        proc = launch([sys.executable, "-c", code], scratch=Path(tmp), policy=policy)
        out, _ = proc.communicate(timeout=30)
    lines = out.decode().split()
    uid = int(lines[0]) if lines else -1
    return Isolation(network_namespace="nonet" in lines, dropped_to_uid=uid if uid != os.getuid() else None)


def child_env(scratch: Path, policy: SandboxPolicy) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in _ENV_KEEP or k.startswith(_ENV_KEEP_PREFIXES)}
    home = scratch / "home"
    tmp = scratch / "tmp"
    for d in (home, tmp, scratch / "cache"):
        d.mkdir(parents=True, exist_ok=True)
    env.update(
        HOME=str(home), TMPDIR=str(tmp), XDG_CACHE_HOME=str(scratch / "cache"),
        TRITON_CACHE_DIR=str(scratch / "cache" / "triton"),
        TORCHINDUCTOR_CACHE_DIR=str(scratch / "cache" / "inductor"),
        TORCHINDUCTOR_COMPILE_THREADS="1", PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1",
        PYTHONNOUSERSITE="1", CACHEON_SANDBOX_SCRATCH=str(scratch),
        NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
    )
    # The child must import this package even when it is not installed (source checkouts).
    here = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(policy.extra_env)
    return env


def _world_reachable(path: str) -> bool:
    """True when uid `nobody` could read `path`: every ancestor o+x, the path itself o+r."""
    real = os.path.realpath(path)
    parts = real.split(os.sep)
    for i in range(2, len(parts)):
        d = os.sep.join(parts[:i]) or os.sep
        try:
            if not os.stat(d).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    try:
        return bool(os.stat(real).st_mode & stat.S_IROTH)
    except OSError:
        return False


@functools.lru_cache(maxsize=1)
def can_drop_privileges() -> bool:
    """Dropping to nobody only works when the interpreter and packages are world-readable
    (a pyenv under /root is not); otherwise the audit-hook write guard is the layer left."""
    if os.geteuid() != 0:
        return False
    import importlib.util

    paths = [sys.executable, sys.base_prefix, str(Path(__file__).resolve())]
    for mod in ("torch", "triton", "numpy", "structlog"):
        spec = importlib.util.find_spec(mod)
        if spec and spec.origin:
            paths.append(spec.origin)
    return all(_world_reachable(p) for p in paths)


def _unshare(flags: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.unshare(flags) == 0
    except (OSError, AttributeError):
        return False


def _loopback_up() -> None:
    """SIOCSIFFLAGS(lo, UP|LOOPBACK|RUNNING) in the current (fresh) network namespace."""
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s.fileno(), 0x8914, struct.pack("16sH14x", b"lo", 0x1 | 0x8 | 0x40))


def _preexec(policy: SandboxPolicy, scratch: Path) -> None:
    """Runs in the forked child before exec. Must not raise for optional layers."""
    os.setsid()
    if policy.isolate_network:
        isolated = _unshare(CLONE_NEWNET) if os.geteuid() == 0 else _unshare(CLONE_NEWUSER | CLONE_NEWNET)
        if isolated and policy.loopback:
            try:
                _loopback_up()
            except OSError:
                pass
    limits = [
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_FSIZE, policy.file_bytes),
        (resource.RLIMIT_NOFILE, policy.open_files),
    ]
    if policy.cpu_seconds:
        limits.append((resource.RLIMIT_CPU, policy.cpu_seconds))
    if policy.address_space_bytes:
        limits.append((resource.RLIMIT_AS, policy.address_space_bytes))
    for res, val in limits:
        try:
            soft, hard = resource.getrlimit(res)
            cap = val if hard == resource.RLIM_INFINITY else min(val, hard)
            resource.setrlimit(res, (cap, cap))
        except (ValueError, OSError):
            pass
    if policy.drop_privileges and os.geteuid() == 0 and _DROP_OK[0]:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    os.umask(0o077)


_DROP_OK = [False]


def prepare_scratch(scratch: Path, policy: SandboxPolicy) -> None:
    """Make the child's scratch dir writable by the (possibly dropped) child user."""
    scratch.mkdir(parents=True, exist_ok=True)
    _DROP_OK[0] = policy.drop_privileges and can_drop_privileges()
    if _DROP_OK[0]:
        for d, dirs, files in os.walk(scratch):
            os.chown(d, NOBODY, NOBODY)
            for f in files:
                os.chown(os.path.join(d, f), NOBODY, NOBODY, follow_symlinks=False)


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
    """Start `argv` confined by `policy`. Caller owns the Popen; use `stop()` to end it."""
    env = child_env(scratch, policy)
    prepare_scratch(scratch, policy)
    try:
        return subprocess.Popen(
            list(argv), cwd=str(cwd or scratch), env=env, stdin=subprocess.DEVNULL, stdout=stdout,
            stderr=stderr, pass_fds=tuple(pass_fds), close_fds=True,
            preexec_fn=lambda: _preexec(policy, scratch),
        )
    except OSError as e:
        raise SandboxError(f"cannot start sandboxed child {argv[:2]}: {e}") from e


def stop(proc: subprocess.Popen[bytes], grace_s: float = 2.0) -> None:
    """End the child's whole process group (it called setsid): TERM, a grace period, then KILL
    for every member still there, even when the leader already exited."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 5.0  # SIGKILL is asynchronous: "stopped" means no member still runs
    while live_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)


def live_members(pgid: int) -> list[int]:
    """PIDs of process group `pgid` that are not yet zombies (read from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            out.append(int(entry))
    return out
