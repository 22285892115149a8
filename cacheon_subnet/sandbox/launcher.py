"""The wall's command line: setpriv (dedicated uid, no groups, no_new_privs, no capabilities)
exec'ing bwrap (every namespace, no nested user namespaces, allowlist view, seccomp last).

    setpriv --reuid=U --regid=G --clear-groups --no-new-privs --inh-caps=-all --bounding-set=-all
      bwrap --unshare-all --unshare-user --disable-userns --die-with-parent --new-session
            --cap-drop ALL --seccomp FD <view> --chdir CWD -- argv

Rlimits come first, from `prlimit` (util-linux) as root, so they hold across the uid switch
and every exec (no preexec_fn in a possibly threaded host):

    prlimit --core=0 --fsize=F --nofile=N --nproc=P [--cpu=S] [--as=A] -- setpriv ...
"""

from __future__ import annotations

import functools
import os
import resource
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cacheon_subnet.env import BWRAP, SANDBOX, SANDBOX_UID, SCRATCH
from cacheon_subnet.errors import SandboxError
from cacheon_subnet.sandbox import fsview, seccomp
from cacheon_subnet.sandbox.policy import (
    SandboxPolicy,
    WallConfig,
    lease_uid,
    wall_config,
)


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    fds: tuple[int, ...]  # to pass to the child (bind fds, seccomp fd); the host closes them after Popen
    staged: tuple[str, ...] = ()  # copies of unreachable read-only inputs; removed by sandbox.stop()


_PRLIMIT_NAMES = {
    resource.RLIMIT_CORE: "core",
    resource.RLIMIT_FSIZE: "fsize",
    resource.RLIMIT_NOFILE: "nofile",
    resource.RLIMIT_NPROC: "nproc",
    resource.RLIMIT_CPU: "cpu",
    resource.RLIMIT_AS: "as",
}


def rlimits(policy: SandboxPolicy, nproc: bool) -> list[tuple[int, int]]:
    out = [
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_FSIZE, policy.file_bytes),
        (resource.RLIMIT_NOFILE, policy.open_files),
    ]
    if nproc:
        out.append((resource.RLIMIT_NPROC, policy.max_processes))
    if policy.cpu_seconds:
        out.append((resource.RLIMIT_CPU, policy.cpu_seconds))
    if policy.address_space_bytes:
        out.append((resource.RLIMIT_AS, policy.address_space_bytes))
    return out


def _capped(res: int, val: int) -> int:
    """`val`, or the host's hard limit when lower (raising it needs CAP_SYS_RESOURCE)."""
    hard = resource.getrlimit(res)[1]
    return val if hard == resource.RLIM_INFINITY else min(val, hard)


def apply_rlimits(limits: Sequence[tuple[int, int]], strict: bool) -> None:
    """In a forked child (weak mode). Strict: a limit that cannot be set raises."""
    for res, val in limits:
        try:
            _, hard = resource.getrlimit(res)
            cap = val if hard == resource.RLIM_INFINITY else min(val, hard)
            resource.setrlimit(res, (cap, cap))
        except (ValueError, OSError):
            if strict:
                raise


def _open(path: str) -> int:
    return os.open(path, os.O_PATH | os.O_CLOEXEC)


def build(
    argv: Sequence[str],
    scratch: Path,
    policy: SandboxPolicy,
    cfg: WallConfig,
    cwd: Path | None,
    env: dict[str, str],
    fs_root: str | None = None,
) -> Command:
    """The full command and the fds it needs. Binds are sorted so parents come before children.
    fs_root: the host-mounted, inode-bounded tmpfs (tmpfs.py) whose subdirs become scratch, /tmp
    and /dev/shm; None: bwrap's own tmpfs mounts (bytes bounded, inodes not)."""
    limits = [
        f"--{_PRLIMIT_NAMES[res]}={v}:{v}" for res, val in rlimits(policy, nproc=True) if (v := _capped(res, val)) >= 0
    ]
    return _build([cfg.prlimit, *limits, "--"], argv, scratch, policy, cfg, cwd, env, fs_root)


def _build(
    head: list[str],
    argv: Sequence[str],
    scratch: Path,
    policy: SandboxPolicy,
    cfg: WallConfig,
    cwd: Path | None,
    env: dict[str, str],
    fs_root: str | None = None,
) -> Command:
    fds: list[int] = []
    staged: list[str] = []

    def ro_source(path: str) -> str:
        """`path`, or a reachable copy of it when the sandbox uid cannot search its ancestors."""
        if fsview.unreachable_by(cfg.uid, cfg.gid, path) is None:
            return path
        staged.append(fsview.stage_copy(path))
        return os.path.join(staged[-1], "x")

    def fd(path: str) -> str:
        fds.append(_open(path))
        return str(fds[-1])

    out = [
        *head,
        cfg.setpriv,
        f"--reuid={cfg.uid}",
        f"--regid={cfg.gid}",
        "--clear-groups",
        "--no-new-privs",
        "--inh-caps=-all",
        "--bounding-set=-all",
        cfg.bwrap,
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--hostname",
        "sandbox",
    ]
    if not policy.isolate_network:
        out.append("--share-net")
    try:
        system, links = fsview.system_binds(policy.gpu)
        for b in system:
            if b.mode != "dev":
                out += ["--ro-bind-fd", fd(b.src), b.dest]
        for target, link in links:
            out += ["--symlink", target, link]
        out += ["--proc", "/proc", "--dev", "/dev"]
        for b in system:
            if b.mode == "dev":
                out += ["--dev-bind", b.src, b.dest]  # device nodes: path bind (mode 0666 on hosts)
        if fs_root:
            out += [
                "--bind-fd",
                fd(os.path.join(fs_root, "tmp")),
                "/tmp",
                "--bind-fd",
                fd(os.path.join(fs_root, "shm")),
                "/dev/shm",
            ]
        else:
            out += [
                "--size",
                str(policy.tmp_bytes),
                "--tmpfs",
                "/tmp",
                "--size",
                str(policy.tmp_bytes),
                "--tmpfs",
                "/dev/shm",
            ]
        extra_ro = list(policy.ro_paths) + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        mounts: list[tuple[str, list[str]]] = [
            (b.dest, ["--ro-bind-fd", fd(ro_source(b.src)), b.dest]) for b in fsview.read_binds(extra_ro)
        ]
        sdest = os.path.abspath(scratch)
        if fs_root:  # home, tmp, cache made by tmpfs.mount_bounded
            scratch_ops = ["--bind-fd", fd(os.path.join(fs_root, "scratch")), sdest]
        else:
            scratch_ops = ["--size", str(policy.scratch_bytes), "--tmpfs", sdest]
            for sub in ("home", "tmp", "cache"):
                scratch_ops += ["--dir", os.path.join(sdest, sub)]
        mounts.append((sdest, scratch_ops))
        for p, dest in [(p, p) for p in policy.rw_paths] + list(policy.fixed_binds):
            src = p
            why = fsview.unreachable_by(cfg.uid, cfg.gid, p)
            if why:
                try:
                    staged.append(fsview.stage_link(p, cfg.uid, cfg.gid))
                except OSError as e:
                    raise SandboxError(
                        f"sandbox: rw path {p} is out of the sandbox uid's reach: {why} ({e}); put it "
                        f"under a dir others can search (e.g. {SCRATCH.name}=/var/tmp/cacheon)"
                    ) from None
                src = os.path.join(staged[-1], "x")
            mounts.append((os.path.abspath(dest), ["--bind-fd", fd(src), os.path.abspath(dest)]))
        for _, ops in sorted(mounts, key=lambda m: (m[0].count(os.sep), m[0])):
            out += ops
        # bwrap's root tmpfs: read-only; where RLIMIT_AS bounds the child's RAM, no unmapped memory either
        out += ["--remount-ro", "/", "--seccomp", str(_seccomp(fds, policy.address_space_bytes is not None))]
    except (OSError, SandboxError) as e:
        for f in fds:
            os.close(f)
        for d in staged:
            fsview.remove_tree(d)
        if isinstance(e, SandboxError):
            raise
        raise SandboxError(f"sandbox: cannot open a path of the filesystem view: {e}") from e
    out += ["--chdir", os.path.abspath(cwd or scratch), "--", *argv]
    return Command(tuple(out), tuple(fds), tuple(staged))


def _seccomp(fds: list[int], bounded_memory: bool = False) -> int:
    fds.append(seccomp.program_fd(bounded_memory))
    return fds[-1]


def popen(
    cmd: Command, env: dict[str, str], pass_fds: Sequence[int], stdout: int | None, stderr: int | None
) -> subprocess.Popen[bytes]:
    try:
        proc = subprocess.Popen(
            list(cmd.argv),
            cwd="/",
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            pass_fds=tuple(pass_fds) + cmd.fds,
            close_fds=True,
            start_new_session=True,
        )
        proc.cacheon_staged = cmd.staged  # type: ignore[attr-defined]
        return proc
    except (OSError, subprocess.SubprocessError) as e:
        for d in cmd.staged:
            fsview.remove_tree(d)
        raise SandboxError(f"cannot start sandboxed child {cmd.argv[-2:]}: {e}") from e
    finally:
        for f in cmd.fds:
            os.close(f)


@functools.lru_cache(maxsize=1)
def preflight() -> WallConfig:
    """Once per process: every condition of the wall, or SandboxError naming what to fix."""
    if os.geteuid() != 0:
        raise SandboxError(
            f"sandbox: the validator runs as uid {os.geteuid()}, not root, so it cannot start contribution code "
            "under a dedicated uid (a shared uid is no boundary: same-uid processes can ptrace and signal it). "
            f"Run the validator as root (container default); {SANDBOX.name}=weak is for local development only "
            "(a validator off a local chain refuses it)"
        )
    cfg = wall_config()
    tool = fsview.unreachable_by(cfg.uid, cfg.gid, cfg.bwrap)
    if tool:
        raise SandboxError(
            f"sandbox: setpriv runs bwrap as uid {cfg.uid}, which cannot reach it: {tool}; put the "
            f"binary ({BWRAP.name}) under a dir others can search, mode 0755"
        )
    bad = fsview.unreadable_by(cfg.uid, cfg.gid, fsview.interpreter_files())
    if bad:
        raise SandboxError(
            f"sandbox: uid {cfg.uid} cannot read the interpreter / packages the child needs: {', '.join(bad[:5])}. "
            "Use a world-readable interpreter and venv (e.g. `make` builds .venv from /usr/bin/python3.11; "
            f"chmod -R o+rX the venv), or pick {SANDBOX_UID.name} accordingly"
        )
    policy = SandboxPolicy(cpu_seconds=30, max_processes=64)
    scratch = Path("/tmp/cacheon-preflight-scratch")
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    leased, lease = lease_uid(cfg)
    try:
        cmd = build(
            [sys.executable, "-I", "-S", "-c", "import os; print(os.getuid())"], scratch, policy, leased, Path("/"), env
        )
        proc = popen(cmd, env, (), subprocess.PIPE, subprocess.STDOUT)
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise SandboxError("sandbox: the preflight child did not finish within 60 s") from None
    finally:
        os.close(lease)
    text = out.decode(errors="replace").strip()
    if proc.returncode != 0 or text.splitlines()[-1:] != [str(leased.uid)]:
        hint = ""
        if "namespace" in text or "uid map" in text or "Operation not permitted" in text:
            hint = (
                " User namespaces look unavailable: check `sysctl user.max_user_namespaces` (> 0), "
                "kernel.unprivileged_userns_clone=1 (Debian), kernel.apparmor_restrict_unprivileged_userns=0 "
                "(Ubuntu 23.10+) or an AppArmor profile for this bwrap, and that the container allows unshare."
            )
        raise SandboxError(
            f"sandbox: the wall does not start on this machine (rc {proc.returncode}): {text[-600:]!r}.{hint}"
        )
    return cfg
