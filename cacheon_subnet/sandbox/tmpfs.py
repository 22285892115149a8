"""A child's writable places (scratch, /tmp, /dev/shm) as host-mounted tmpfs bounded in bytes
AND inodes.

Why: bwrap's `--size` bounds a tmpfs's bytes, not its inodes. Empty files and dirs cost no bytes,
so on bwrap's own mounts a child could make about RAM/8 KiB inodes on each of the three (3 M on
a 23 GiB box: 400 k empty files took 400 MiB of unreclaimable kernel memory in 9 s; 256 M per
mount on a 2 TiB GPU host): host RAM that no rlimit bounds. So the host (root) mounts the three
itself, per leased uid, with size= and nr_inodes=, and binds them into the view (bwrap resolves
a bind source's path as the sandbox uid: the dirs above are root's, mode 0711; each mount is 0700
of its uid). stop() detaches them; a crashed host's leftover for a uid is detached when that uid
is leased again. Where the host cannot mount (a container without CAP_SYS_ADMIN) the launch
falls back to bwrap's mounts and says so (stderr and the log, once per process); `cacheon
doctor` then FAILs its `tmpfs_inodes` layer.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import sys

from cacheon_subnet.env import SANDBOX_FS
from cacheon_subnet.errors import SandboxError
from cacheon_subnet.sandbox.policy import SandboxPolicy, lock_dir

MS_NOSUID, MS_NODEV, MNT_DETACH = 0x2, 0x4, 0x2
SUBDIRS = ("scratch", "tmp", "shm")
_warned: list[str] = []


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def base_dir() -> str:
    """Where the mounts live: root-owned, 0711 (bwrap, running as the sandbox uid, resolves a bind
    source's path, so the uid must search it; it cannot list it and sees no other uid's subdirs)."""
    d = SANDBOX_FS.get() or ("/run/cacheon-sandbox-fs" if os.access("/run", os.W_OK) else "/tmp/cacheon-sandbox-fs")
    os.makedirs(d, mode=0o711, exist_ok=True)
    st = os.lstat(d)
    if st.st_uid != os.geteuid() or not os.path.isdir(d) or os.path.islink(d) or st.st_mode & 0o7777 != 0o711:
        raise SandboxError(f"sandbox: tmpfs dir {d} must be a real dir owned by uid {os.geteuid()}, mode 0711")
    return d


def root_for(uid: int) -> str:
    """One per (lease dir, uid): the lease makes it this launch's alone."""
    tag = hashlib.sha256(os.path.realpath(lock_dir()).encode()).hexdigest()[:8]
    return os.path.join(base_dir(), f"fs-{tag}-{uid}")


def unmount(root: str) -> None:
    """Detach every mount of `root` (lazily: the sandbox's own mount namespace may hold one for a
    moment longer) and remove its dirs."""
    libc = _libc()
    for sub in SUBDIRS:
        d = os.path.join(root, sub).encode()
        while libc.umount2(d, MNT_DETACH) == 0:
            pass  # stacked leftovers, if any
        try:
            os.rmdir(d)
        except OSError:
            pass
    try:
        os.rmdir(root)
    except OSError:
        pass


def mount_bounded(uid: int, gid: int, policy: SandboxPolicy) -> tuple[str | None, str]:
    """(the root holding the three mounts, "") or (None, why the host cannot mount them).
    scratch gets policy.scratch_bytes, /tmp and /dev/shm policy.tmp_bytes each; every one of
    them policy.inodes inodes."""
    root = root_for(uid)
    unmount(root)  # the leftover of a host that died holding this uid's lease
    os.makedirs(root, mode=0o711, exist_ok=True)
    libc = _libc()
    for sub, size in zip(SUBDIRS, (policy.scratch_bytes, policy.tmp_bytes, policy.tmp_bytes)):
        d = os.path.join(root, sub)
        os.makedirs(d, mode=0o711, exist_ok=True)
        opts = f"size={size},nr_inodes={policy.inodes},mode=0700,uid={uid},gid={gid}".encode()
        if libc.mount(b"tmpfs", d.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts) != 0:
            err = ctypes.get_errno()
            unmount(root)
            return None, f"mount tmpfs: {os.strerror(err)}"
    try:
        for sub in ("home", "tmp", "cache"):  # what child_env points HOME, caches at
            d = os.path.join(root, "scratch", sub)
            os.mkdir(d, 0o700)
            os.chown(d, uid, gid)
    except OSError as e:
        unmount(root)
        return None, f"prepare the tmpfs: {e}"
    return root, ""


def warn_unbounded(why: str) -> None:
    """Once per process: the child's tmpfs inodes are bounded by RAM only."""
    if why in _warned:
        return
    _warned.append(why)
    msg = (
        f"cacheon sandbox: tmpfs INODES UNBOUNDED ({why}): a child can fill kernel memory with empty files; "
        "run the validator with CAP_SYS_ADMIN (root on the host or a privileged container)"
    )
    print(msg, file=sys.stderr, flush=True)
    from cacheon_subnet.log import get_logger

    try:
        get_logger("sandbox").warning("sandbox.tmpfs_inodes_unbounded", reason=why)
    except (ValueError, OSError):
        pass
