"""The child's filesystem: an allowlist of read-only binds, and the host-side scratch handling.

Nothing is visible unless listed here: system dirs (/usr, /lib*, /bin, /sbin, /etc), the
interpreter's prefixes, every sys.path entry, the repo's source dirs, and what the caller names
(SandboxPolicy.ro_paths / rw_paths). A secret (a wallet dir, a validator state dir, anything in
CACHEON_SANDBOX_DENY) is never bound; a listed dir that contains one, or that is a broad dir
(/, home dirs, /root, /var, /opt, ...), is split into its children, so the secret is simply absent
(a venv inside a home dir may be bound; the home dir itself never is). Hidden entries of the repo (.git, .cacheon,
.venv: the venv is bound on its own) are never bound.

Binds are made from O_PATH fds the host (root) opens: the sandbox user needs no search
permission on the ancestors (pytest's 0700 tmp dirs), only read permission on the files.
"""

from __future__ import annotations

import glob
import os
import shutil
import stat
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cacheon_subnet.env import SANDBOX_DENY, SANDBOX_STAGE

REPO = Path(__file__).resolve().parent.parent.parent
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
GPU_DEV_GLOBS = ("/dev/nvidia*", "/dev/nvidia-caps")


@dataclass(frozen=True)
class Bind:
    src: str  # host path (opened by the host as an O_PATH fd)
    dest: str  # path inside the sandbox
    mode: str  # "ro" | "rw" | "dev"


_DENIED: set[str] = set()  # registered by the process that owns them (the validator at start-up)


def deny(*paths: str | os.PathLike[str] | None) -> None:
    """Never bind these in any later child of this process: the validator's effective wallet
    dir and state dir, wherever the operator put them (inside the checkout, a venv dir, ...)."""
    _DENIED.update(os.path.realpath(os.fspath(p)) for p in paths if p)


def secret_paths() -> tuple[str, ...]:
    """Never bound, even when asked for: wallets, validator state, the operator's list."""
    home = os.path.expanduser("~")
    out = [os.path.join(home, ".bittensor"), os.path.abspath(".cacheon"), str(REPO / ".cacheon")]
    out += list(SANDBOX_DENY.get())
    return tuple(sorted({os.path.realpath(p) for p in out} | _DENIED))


def broad_paths() -> tuple[str, ...]:
    """Never bound as a whole (a venv or pyenv prefix inside one may be bound on its own)."""
    return tuple(
        sorted(
            {
                os.path.realpath(p)
                for p in (
                    os.path.expanduser("~"),
                    "/root",
                    "/home",
                    "/var/lib",
                    "/var",
                    "/srv",
                    "/mnt",
                    "/media",
                    "/opt",
                    "/work",
                    "/",
                )
            }
        )
    )


# Shared dirs (other runs' temp files, host sockets): a sys.path entry equal to one is dropped, not
# split; only an explicitly named path inside one (a bundle dir under /tmp) is bound.
SHARED = ("/tmp", "/var/tmp", "/dev", "/dev/shm", "/run", "/proc", "/sys")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _split(src: str, secret: Sequence[str], broad: Sequence[str], force: bool) -> list[str]:
    """`src` itself, or (when it holds a secret, is a broad dir, or `force`) its non-hidden
    children, recursively. A secret or a shared dir yields nothing."""
    if any(_under(src, d) for d in secret) or src in SHARED:
        return []
    if not force and src not in broad and not any(_under(d, src) for d in (*secret, *SHARED)):
        return [src]
    out: list[str] = []
    try:
        entries = sorted(os.scandir(src), key=lambda e: e.name)
    except OSError:
        return []
    for e in entries:
        if not (e.name.startswith(".") or e.name == "__pycache__"):
            out += _split(e.path, secret, broad, False)
    return out


def python_paths() -> list[str]:
    """What the child interpreter needs: prefixes, stdlib, every existing sys.path entry."""
    import sysconfig

    paths = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        os.path.dirname(os.path.abspath(sys.executable)),
    }
    paths.update(v for k, v in sysconfig.get_paths().items() if v)
    paths.update(p for p in sys.path if p)
    return sorted(p for p in {os.path.realpath(p) for p in paths} if os.path.isdir(p))


def system_binds(gpu: bool) -> tuple[list[Bind], list[tuple[str, str]]]:
    """Read-only system dirs (a merged-/usr symlink such as /bin -> usr/bin is recreated as a
    symlink) and, for GPU children, the NVIDIA device nodes and /sys (CUDA/NCCL topology)."""
    binds, links = [], []
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            links.append((os.readlink(d), d))
        elif os.path.isdir(d):
            binds.append(Bind(d, d, "ro"))
    if gpu:
        for pattern in GPU_DEV_GLOBS:
            binds += [Bind(p, p, "dev") for p in sorted(glob.glob(pattern))]
        binds.append(Bind("/sys", "/sys", "ro"))
    else:
        binds += [Bind(p, p, "ro") for p in ("/sys/devices/system/cpu",) if os.path.isdir(p)]
    return binds, links


def read_binds(extra_ro: Iterable[str]) -> list[Bind]:
    """Python, the repo's source dirs and the caller's read-only paths, minus denied paths and
    minus anything already inside another read-only root."""
    secret, broad = secret_paths(), broad_paths()
    roots: list[str] = []
    for p in python_paths():
        roots += _split(p, secret, broad, force=_under(str(REPO), p))
    roots += _split(str(REPO), secret, broad, force=True)
    for p in extra_ro:
        real = os.path.realpath(p)
        if os.path.exists(real):
            roots += _split(real, secret, broad, force=_under(str(REPO), real))
    system = [d for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    kept: list[str] = []
    for r in sorted(set(roots), key=lambda x: (x.count(os.sep), x)):
        if any(_under(r, k) for k in kept + system):
            continue
        kept.append(r)
    return [Bind(r, r, "ro") for r in kept]


def gpu_present() -> bool:
    return bool(glob.glob("/dev/nvidia[0-9]*"))


# -- readability checks (fail closed before launching) ------------------------------------------


def _allows(st: os.stat_result, uid: int, gid: int, bits: int) -> bool:
    """Plain permission bits for `uid` (no groups: the sandbox runs with --clear-groups)."""
    if st.st_uid == uid:
        bits <<= 6
    elif st.st_gid == gid:
        bits <<= 3
    return st.st_mode & bits == bits


def unreachable_by(uid: int, gid: int, path: str) -> str | None:
    """Why `uid` could not reach and read `path` (bwrap resolves bind sources as that uid), or None."""
    real = os.path.realpath(path)
    parts = real.split(os.sep)
    for i in range(2, len(parts)):
        d = os.sep.join(parts[:i])
        try:
            st = os.stat(d)
        except OSError as e:
            return f"{d}: {e.strerror}"
        if not _allows(st, uid, gid, stat.S_IXOTH):
            return f"{d} (mode {stat.filemode(st.st_mode)}, owner {st.st_uid}:{st.st_gid}) is not searchable"
    try:
        st = os.stat(real)
    except OSError as e:
        return f"{real}: {e.strerror}"
    need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else 0)
    if not _allows(st, uid, gid, need):
        return f"{real} (mode {stat.filemode(st.st_mode)}, owner {st.st_uid}:{st.st_gid}) is not readable"
    return None


def unreadable_by(uid: int, gid: int, paths: Iterable[str]) -> list[str]:
    """The paths of `paths` that exist and that `uid` cannot reach or read, each with why."""
    return [why for p in paths if os.path.exists(p) and (why := unreachable_by(uid, gid, p))]


STAGE_LIMIT = 256 << 20


def stage_link(src: str, uid: int, gid: int) -> str:
    """A hard link to the regular file `src` (same inode: writes reach the host file) in a fresh
    dir under its nearest ancestor on the same filesystem that `uid` can reach. Returns the
    staging root (caller removes it); raises OSError when there is none."""
    import tempfile

    real = os.path.realpath(src)
    if not os.path.isfile(real) or os.path.islink(src):
        raise OSError(f"{src}: only a regular file can be staged read-write (a dir needs searchable parents)")
    dev = os.stat(real).st_dev
    d = os.path.dirname(real)
    while d != os.sep:
        d = os.path.dirname(d)
        if os.stat(d).st_dev == dev and unreachable_by(uid, gid, d) is None and os.access(d, os.W_OK):
            root = tempfile.mkdtemp(prefix="cacheon-rw-", dir=d)
            os.chmod(root, 0o711)
            os.link(real, os.path.join(root, "x"))
            return root
    raise OSError(f"{src}: no ancestor on its filesystem that the sandbox uid can search")


def stage_copy(src: str, base: str | None = None) -> str:
    """A copy of `src` (a small read-only input: a bundle dir, a job file) under a fresh dir the
    sandbox uid can reach, for a source whose ancestors it cannot search (e.g. a 0700 tmp dir).
    The view still shows it at its original path. Returns the staging root (caller removes it)."""
    import tempfile

    total = 0
    for d, _, files in os.walk(src):
        total += sum(os.lstat(os.path.join(d, f)).st_size for f in files)
    if os.path.isfile(src):
        total = os.path.getsize(src)
    if total > STAGE_LIMIT:
        raise OSError(
            f"{src}: {total >> 20} MiB is too large to stage (limit {STAGE_LIMIT >> 20} MiB); "
            "make its parent dirs searchable by the sandbox uid instead"
        )
    root = tempfile.mkdtemp(prefix="cacheon-ro-", dir=base or SANDBOX_STAGE.get())
    os.chmod(root, 0o755)
    dst = os.path.join(root, "x")
    if os.path.isdir(src):
        shutil.copytree(src, dst, symlinks=True)
    else:
        shutil.copy2(src, dst)
    for d, _dirs, files in os.walk(root):
        os.chmod(d, 0o755)
        for f in files:
            if not os.path.islink(os.path.join(d, f)):
                os.chmod(os.path.join(d, f), 0o644)
    return root


def interpreter_files() -> list[str]:
    """Files and dirs the child interpreter opens first: the binary, stdlib, key packages."""
    import importlib.util
    import sysconfig

    out = [os.path.realpath(sys.executable), sysconfig.get_paths()["stdlib"], str(REPO / "cacheon_subnet")]
    out.append(os.path.join(sysconfig.get_paths()["stdlib"], "os.py"))
    for mod in ("torch", "triton", "numpy", "structlog"):
        try:
            spec = importlib.util.find_spec(mod)
        except (ImportError, ValueError):
            spec = None
        if spec and spec.origin:
            out += [spec.origin, os.path.dirname(spec.origin)]
    out += [p for p in python_paths()]
    return out


# -- scratch --------------------------------------------------------------------------------------


def chown_tree(path: Path, uid: int, gid: int) -> None:
    """Hand a host-made tree to the sandbox user without following any link in it."""
    for d, dirs, files in os.walk(path):
        os.chown(d, uid, gid, follow_symlinks=False)
        for f in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
            os.chown(os.path.join(d, f), uid, gid, follow_symlinks=False)


class TreeTooDeep(Exception):
    """A tree with directories nested deeper than a walk allows (walk_fds: max_depth)."""


def walk_fds(path: Path | str, max_depth: int) -> Iterator[tuple[int, str | None, os.stat_result]]:
    """Every entry of the directory tree at `path`, pre-order, as (dir fd, name, lstat), `path`
    itself first with name None (the fd is then its own); the fd is valid until the next entry.

    Through directory fds (openat, O_NOFOLLOW), so no path grows: os.walk joins path strings, got
    ENAMETOOLONG past PATH_MAX (4096) and skipped that subtree silently (a child builds any depth
    with openat), and it recursed once per level (RecursionError past Python's limit). Links are
    never followed; entries that vanish meanwhile are skipped; a directory deeper than max_depth
    raises TreeTooDeep (at most 2 fds per level are open)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    top = os.open(path, flags)
    stack: list[tuple[int, Iterator[os.DirEntry[str]]]] = []
    try:
        stack.append((top, os.scandir(top)))
        yield top, None, os.fstat(top)
        while stack:
            fd, entries = stack[-1]
            e = next(entries, None)
            if e is None:
                stack.pop()
                entries.close()  # type: ignore[attr-defined]
                os.close(fd)
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            yield fd, e.name, st
            if stat.S_ISDIR(st.st_mode):
                if len(stack) > max_depth:
                    raise TreeTooDeep(f"{path}: directories nested deeper than {max_depth} levels")
                try:
                    sub = os.open(e.name, flags, dir_fd=fd)
                except OSError:
                    continue
                stack.append((sub, os.scandir(sub)))
    finally:
        for fd, entries in reversed(stack):
            entries.close()  # type: ignore[attr-defined]
            os.close(fd)


RECLAIM_DEPTH = 256  # deeper (2 fds a level): coreutils' fts, which has no depth limit


def reclaim_tree(path: Path | str) -> None:
    """After a child is gone: what it may have left in a host dir it was handed (setuid or
    world-writable files owned by its uid) becomes the host's, with no set-id bits and no write
    for others, so nothing there can later run or be changed as that uid. Never follows a link;
    any depth and path length (walk_fds: os.walk skipped a subtree below PATH_MAX, so a setuid
    file of the sandbox uid stayed there)."""
    uid, gid = os.getuid(), os.getgid()
    strip = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | stat.S_IWGRP | stat.S_IWOTH
    try:
        st = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISDIR(st.st_mode):
        try:
            os.chown(path, uid, gid, follow_symlinks=False)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & strip:
                os.chmod(path, stat.S_IMODE(st.st_mode) & ~strip)
        except OSError:
            pass
        return
    try:
        for fd, name, st in walk_fds(path, RECLAIM_DEPTH):
            try:
                if name is None:
                    os.fchown(fd, uid, gid)
                    if st.st_mode & strip:
                        os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~strip)
                    continue
                os.chown(name, uid, gid, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISLNK(st.st_mode) and st.st_mode & strip:
                    os.chmod(name, stat.S_IMODE(st.st_mode) & ~strip, dir_fd=fd)  # not a link: nothing runs now
            except OSError:
                continue
    except (TreeTooDeep, OSError):  # deeper than RECLAIM_DEPTH (or out of fds): coreutils' fts
        _coreutils("chown", "-R", "-P", "-h", f"{uid}:{gid}", "--", os.fspath(path))  # never follows a link
        _coreutils("chmod", "-R", "u-s,g-s,a-t,go-w", "--", os.fspath(path))  # -R skips links it meets


def _coreutils(*argv: str) -> None:
    """Run a coreutils tree walk (fts: any depth, links not followed); never raises."""
    import subprocess

    try:
        subprocess.run(
            [shutil.which(argv[0]) or f"/usr/bin/{argv[0]}", *argv[1:]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=300,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        pass


def remove_tree(path: Path | str) -> list[str]:
    """Remove `path` whatever the child left there (links, fifos, 000 dirs, read-only trees)
    without following a link and without raising; returns what could not be removed."""
    path = os.fspath(path)
    left: list[str] = []
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return left
    except OSError as e:
        return [f"{path}: {e}"]
    if not stat.S_ISDIR(st.st_mode):
        try:
            os.unlink(path)
        except OSError as e:
            left.append(f"{path}: {e}")
        return left

    def onerror(func: object, p: str, exc: object) -> None:
        try:  # a 0o000 / 0o500 dir (a root host can still be refused on some filesystems)
            parent = os.path.dirname(p)
            if not os.path.islink(parent):
                os.chmod(parent, 0o700)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o700)
                shutil.rmtree(p, onerror=lambda *a: left.append(f"{a[1]}: {a[2][1]}"))
            else:
                os.unlink(p)
        except OSError as e:
            left.append(f"{p}: {e}")

    try:
        shutil.rmtree(path, onerror=onerror)  # rmtree never follows symlinks (it unlinks them)
    except RecursionError:  # a tree deeper than Python's recursion limit: coreutils' fts has none
        left.clear()
        _coreutils("rm", "-rf", "--one-file-system", "--", path)
        if os.path.lexists(path):
            left.append(f"{path}: a tree too deep to remove")
    return left
