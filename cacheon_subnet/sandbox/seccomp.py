"""The seccomp filter every sandboxed child runs under, built with libseccomp (pyseccomp).

Default ALLOW (Python, torch, CUDA and NCCL need a wide, moving set of syscalls), and EPERM for
the calls that reach outside the sandbox or other processes: debugging/memory access of other
processes, namespaces and mounts, kernel modules/kexec, bpf/perf, the keyring, userfaultfd,
io_uring (it bypasses seccomp for the operations it queues), fd stealing (pidfd_getfd), handle
opens. clone() with any namespace flag is refused; clone3 gets ENOSYS (its flags live in
memory a filter cannot read), so glibc falls back to clone(), which is filtered. Syscalls of
any other architecture (i386 `int 0x80`, x32) kill the process: libseccomp's default bad-arch
action. bwrap loads the program (`--seccomp FD`) as the last step before exec.

Sockets are an allowlist of address families (SOCKET_FAMILIES): the network namespace isolates
only families that are namespaced. AF_VSOCK is not (on a VM it reaches the hypervisor host's
services, CID 2, from inside a fresh netns), nor are several others (Bluetooth, CAN, TIPC, RDS,
...); socket() and socketpair() with any family but AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK
(netns-scoped; getifaddrs and NCCL's interface scan need it) get EPERM; netlink sockets only
with protocol NETLINK_ROUTE.

A child whose memory the address-space rlimit is meant to bound (CPU children: `bounded_memory`)
may not make memory that no mapping of its own holds: memfd_create, memfd_secret and SysV
shmget get EPERM. A memfd is sized by RLIMIT_FSIZE only (1024 fds x 256 MiB) and a detached SysV
segment lives in the child's IPC namespace with no rlimit at all, so either held host RAM far past
RLIMIT_AS (red team 2026-12-04: 3 GiB under a 1 GiB limit, `oswall/shm_balloon.py`). Such a child
may not change its CPU affinity either (`oswall/escape_pinning.py`): it keeps the cores it was
started on (a CPU screen: the screening cores, never the arena's).
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile

from cacheon_subnet.errors import SandboxError

DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "process_madvise",
    "pidfd_getfd",
    "kcmp",
    "setns",
    "unshare",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "open_tree",
    "mount_setattr",
    "kexec_load",
    "kexec_file_load",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "init_module",
    "finit_module",
    "delete_module",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "open_by_handle_at",
    "name_to_handle_at",
    "swapon",
    "swapoff",
    "reboot",
    "syslog",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "iopl",
    "ioperm",
    "quotactl",
    "vhangup",
    "lookup_dcookie",
    "quotactl_fd",
    "fanotify_init",
    "landlock_create_ruleset",
)
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
SOCKET_FAMILIES = (AF_UNIX, AF_INET, AF_INET6, AF_NETLINK)
NETLINK_ROUTE = 0
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME
NS_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080)


# memory outside every mapping (and so outside RLIMIT_AS): refused where RLIMIT_AS is the bound
UNMAPPED_MEMORY = ("memfd_create", "memfd_secret", "shmget")
# the CPU set a CPU child was started on (the validator pins screens beside a timed arena to the
# screening cores, validator/background.py): affinity is the child's own to change otherwise
PINNED_CPUS = ("sched_setaffinity",)


@functools.lru_cache(maxsize=2)
def program(bounded_memory: bool = False) -> bytes:
    """The compiled BPF program (cached: one per kind of child). `bounded_memory`: the child's
    RAM is bounded by RLIMIT_AS, so memory it could hold unmapped is refused too."""
    try:
        import pyseccomp as sc
    except (ImportError, OSError) as e:  # the module, or libseccomp.so.2 under it
        raise SandboxError(
            f"seccomp: cannot load libseccomp through pyseccomp ({e}); "
            "`pip install pyseccomp` and install libseccomp2 (apt) / libseccomp (rpm)"
        ) from e
    f = sc.SyscallFilter(sc.ALLOW)
    eperm = sc.ERRNO(errno.EPERM)
    for name in DENIED + (UNMAPPED_MEMORY + PINNED_CPUS if bounded_memory else ()):
        try:
            f.add_rule(eperm, name)
        except (OSError, RuntimeError, ValueError):
            pass  # a syscall this kernel/arch does not know cannot be called either
    for flag in NS_FLAGS:
        f.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    for call in ("socket", "socketpair"):  # the family is an int: the kernel reads the low 32 bits
        f.add_rule(eperm, call, sc.Arg(0, sc.GE, max(SOCKET_FAMILIES) + 1))
        for fam in range(max(SOCKET_FAMILIES)):
            if fam not in SOCKET_FAMILIES:
                f.add_rule(eperm, call, sc.Arg(0, sc.MASKED_EQ, 0xFFFFFFFF, fam))
    # netlink: NETLINK_ROUTE (protocol 0) only, the one getifaddrs and NCCL use; audit, uevent,
    # netfilter, crypto, generic, ... are refused (an allowlist within the family too)
    f.add_rule(eperm, "socket", sc.Arg(0, sc.MASKED_EQ, 0xFFFFFFFF, AF_NETLINK), sc.Arg(2, sc.NE, NETLINK_ROUTE))
    with tempfile.TemporaryFile() as tmp:
        f.export_bpf(tmp)
        tmp.seek(0)
        data = tmp.read()
    if not data:
        raise SandboxError("seccomp: libseccomp exported an empty program")
    return data


def program_fd(bounded_memory: bool = False) -> int:
    """A fresh readable fd holding the program (bwrap reads it to EOF); the caller closes it."""
    fd = os.memfd_create("cacheon-seccomp", 0)
    os.write(fd, program(bounded_memory))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
