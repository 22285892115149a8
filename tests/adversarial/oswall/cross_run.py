"""Class 7: one sandboxed run steering or reading another running at the same time. `plant`
leaves SysV shm and message queues, a POSIX message queue, an abstract unix socket and files in
/tmp and /dev/shm under well-known names, then waits; `seek` (another run) looks for each and
for the planter's processes."""
import ctypes
import os
import socket
import sys
import time

from _attack import attempt, ctx

c = ctx()
KEY, name = 0xC0FFEE, c["marker"]
libc = ctypes.CDLL(None, use_errno=True)
rt = ctypes.CDLL("librt.so.1", use_errno=True)


def ok(v, what):
    if v < 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")
    return v


if c["role"] == "plant":
    ok(libc.shmget(KEY, 4096, 0o1666), "shmget")
    ok(libc.msgget(KEY, 0o1666), "msgget")
    ok(rt.mq_open(("/" + name).encode(), os.O_CREAT | os.O_RDWR, 0o666, None), "mq_open")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind("\0" + name)
    srv.listen(1)
    for d in ("/tmp", "/dev/shm"):
        with open(os.path.join(d, name), "w") as f:
            f.write("from run A")
    print("PLANTED", flush=True)
    time.sleep(60)
    sys.exit(0)


def abstract():
    s = socket.socket(socket.AF_UNIX)
    s.connect("\0" + name)
    return "connected"


def others():
    mine = {1, os.getpid(), os.getppid()}
    seen = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in mine]
    if not seen:
        raise LookupError("no other process visible")
    return seen


attempt("sysv_shm", lambda: ok(libc.shmget(KEY, 0, 0), "shmget"))
attempt("sysv_msg", lambda: ok(libc.msgget(KEY, 0), "msgget"))
attempt("posix_mq", lambda: ok(rt.mq_open(("/" + name).encode(), os.O_RDWR), "mq_open"))
attempt("abstract_socket", abstract)
attempt("tmp_file", lambda: open(os.path.join("/tmp", name)).read())
attempt("shm_file", lambda: open(os.path.join("/dev/shm", name)).read())
attempt("processes", others)
