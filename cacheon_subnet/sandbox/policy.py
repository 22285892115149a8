"""What a sandboxed child may use, and which uid/tools the wall is built from (env-configurable)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field

from cacheon_subnet.env import BWRAP, PRLIMIT, SANDBOX, SANDBOX_GID, SANDBOX_LOCKS, SANDBOX_UID, SANDBOX_UIDS, SETPRIV
from cacheon_subnet.errors import SandboxError

DEFAULT_UID = SANDBOX_UID.default  # 64000: neither root, nor nobody (65534, shared by every daemon), nor a login user
DEFAULT_UIDS = SANDBOX_UIDS.default  # 64: concurrent children get distinct uids base..base+63 (no shared process budget)
NOBODY = 65534


@dataclass(frozen=True)
class SandboxPolicy:
    """Limits of one child. `drop_privileges=False` is the explicit weak mode (the miner's own
    `cacheon bench` on the miner's machine): same uid, no filesystem view, loud warning."""

    wall_timeout_s: float = 300.0
    cpu_seconds: int | None = 1800
    address_space_bytes: int | None = None  # set for CPU-only children; CUDA maps huge VA ranges
    file_bytes: int = 256 * 1024 * 1024
    open_files: int = 1024
    max_processes: int = 512  # RLIMIT_NPROC of the sandbox uid (threads count): fork bombs stop here
    scratch_bytes: int = 1 << 30  # the scratch dir is a tmpfs of this size inside the view
    tmp_bytes: int = 256 << 20  # each of /tmp and /dev/shm (private tmpfs)
    inodes: int = 1 << 18  # files + dirs of each of scratch, /tmp, /dev/shm (~1 KiB kernel memory each)
    isolate_network: bool = True
    loopback: bool = False  # `lo` is up in every fresh bwrap net namespace; kept for callers
    drop_privileges: bool = True
    gpu: bool = False  # NVIDIA device nodes, /sys, when present
    ro_paths: tuple[str, ...] = ()  # host paths visible read-only at the same path
    rw_paths: tuple[str, ...] = ()  # host paths visible read-write (handed to the sandbox uid)
    # (host dir, path inside): read-write at a path that does not depend on the host's. Caches
    # keyed by their own absolute path (tvm-ffi's ninja builds) then hit in every child. Weak
    # mode has no mount namespace: there the child sees the host dir, and extra_env values that
    # name a path inside are rewritten to it.
    fixed_binds: tuple[tuple[str, str], ...] = ()
    extra_env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class WallConfig:
    uid: int  # the base uid; each running child holds its own uid in [uid, uid + count)
    gid: int
    bwrap: str
    setpriv: str
    prlimit: str
    count: int = DEFAULT_UIDS


def weak_requested(policy: SandboxPolicy) -> str | None:
    """Why this launch runs without the wall (None: it does not)."""
    if SANDBOX.get() == "weak":
        return f"{SANDBOX.name}=weak"
    if not policy.drop_privileges:
        return "policy drop_privileges=False (miner-side tool)"
    return None


def wall_config() -> WallConfig:
    """The dedicated uid (CACHEON_SANDBOX_UID, gid CACHEON_SANDBOX_GID or the same) and the tool
    paths (CACHEON_BWRAP, CACHEON_SETPRIV, CACHEON_PRLIMIT, else PATH). Raises with what to fix."""
    raw = os.environ.get(SANDBOX_UID.name, str(DEFAULT_UID))
    try:
        uid, gid_set, count = SANDBOX_UID.get(), SANDBOX_GID.get(), SANDBOX_UIDS.get()
    except ValueError:
        raise SandboxError(f"{SANDBOX_UID.name}/GID/UIDS must be integers, got {raw!r}") from None
    gid = uid if gid_set is None else gid_set
    span = range(uid, uid + max(count, 1))
    if 0 in span or NOBODY in span or os.getuid() in span or gid in (0, NOBODY) or uid < 1000 or count < 1:
        raise SandboxError(
            f"{SANDBOX_UID.name}={uid} (gid {gid}, {count} uids) is not a dedicated unprivileged uid "
            f"range: it must be >= 1000 and hold neither root, nobody ({NOBODY}) nor the validator's "
            f"uid ({os.getuid()}); default {DEFAULT_UID}..{DEFAULT_UID + DEFAULT_UIDS - 1}"
        )
    tools = {}
    for name, var in (("bwrap", BWRAP), ("setpriv", SETPRIV), ("prlimit", PRLIMIT)):
        path = var.get() or shutil.which(name) or ""
        if not (path and os.path.isfile(path) and os.access(path, os.X_OK)):
            pkg = "bubblewrap" if name == "bwrap" else "util-linux"
            raise SandboxError(
                f"sandbox: `{name}` not found ({var.name}={var.raw() or ''!r}, PATH has none): "
                f"install it (apt-get install {pkg}) or point {var.name} at the binary"
            )
        tools[name] = os.path.realpath(path)
    return WallConfig(uid, gid, tools["bwrap"], tools["setpriv"], tools["prlimit"], count)


def lock_dir() -> str:
    """Where uid leases live: root-only (0700), one per host."""
    d = SANDBOX_LOCKS.get() or ("/run/cacheon-sandbox" if os.access("/run", os.W_OK) else "/tmp/cacheon-sandbox-locks")
    os.makedirs(d, mode=0o700, exist_ok=True)
    st = os.lstat(d)
    if st.st_uid != os.geteuid() or st.st_mode & 0o077 or not os.path.isdir(d) or os.path.islink(d):
        raise SandboxError(f"sandbox: uid lease dir {d} must be a real dir owned by uid {os.geteuid()}, mode 0700")
    return d


def lease_uid(cfg: WallConfig) -> tuple[WallConfig, int]:
    """A uid of the range that no other running child holds (flock: released with the fd, even
    when the host dies). Returns the config for that uid and the lock fd (close it to release)."""
    import dataclasses
    import fcntl

    d = lock_dir()
    for n in range(cfg.count):
        fd = os.open(os.path.join(d, f"uid-{cfg.uid + n}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return dataclasses.replace(cfg, uid=cfg.uid + n, gid=cfg.gid + n), fd
    raise SandboxError(
        f"sandbox: all {cfg.count} sandbox uids from {cfg.uid} are in use by running children; "
        f"raise {SANDBOX_UIDS.name} or run fewer at once"
    )
