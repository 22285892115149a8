"""Class 8: the host's environment and memory through procfs, and host pids by scanning /proc."""
import os

from _attack import attempt, ctx, report

host = ctx()["host_pid"]
attempt("host_environ", lambda: open(f"/proc/{host}/environ", "rb").read(256))


def mem():
    maps = open(f"/proc/{host}/maps").readline()
    start = int(maps.split("-")[0], 16)
    with open(f"/proc/{host}/mem", "rb") as f:
        f.seek(start)
        return f.read(16)


attempt("host_mem", mem)
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
report("proc_scan", host in pids or any(p > 100 for p in pids), f"visible pids {pids[:10]}")
attempt("parent_environ", lambda: open(f"/proc/{os.getppid()}/environ", "rb").read(256) and
        (_ for _ in ()).throw(PermissionError("the parent is the sandbox's own init: nothing of the host")))
