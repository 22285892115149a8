"""Class 8: ptrace attach and process_vm_readv (ctypes), on the host pid and on a same-uid child
(same uid inside the sandbox: only seccomp stands between them)."""
import ctypes
import os
import time

from _attack import attempt, ctx

libc = ctypes.CDLL(None, use_errno=True)
host = ctx()["host_pid"]
child = os.fork()
if child == 0:
    time.sleep(30)
    os._exit(0)


def call(fn, *args):
    r = fn(*args)
    if r == -1:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


PTRACE_ATTACH = 16
for target, pid in (("host", host), ("child", child)):
    attempt(f"ptrace_{target}", lambda pid=pid: call(libc.ptrace, PTRACE_ATTACH, pid, None, None))


class IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


buf = ctypes.create_string_buffer(64)
local = IOVec(ctypes.cast(buf, ctypes.c_void_p), 64)
remote = IOVec(ctypes.c_void_p(id(buf)), 64)
libc.process_vm_readv.restype = ctypes.c_ssize_t
for target, pid in (("host", host), ("child", child)):
    attempt(f"process_vm_readv_{target}", lambda pid=pid: call(
        libc.process_vm_readv, pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
os.kill(child, 9)
