"""Class 8: SIGSTOP / SIGKILL the validator (a poison pill), and every process it may signal."""
import os
import signal

from _attack import attempt, ctx

host = ctx()["host_pid"]
attempt("sigstop_host", lambda: os.kill(host, signal.SIGSTOP))
attempt("sigkill_host", lambda: os.kill(host, signal.SIGKILL))
attempt("sigkill_parent", lambda: os.kill(os.getppid(), signal.SIGKILL) or
        (_ for _ in ()).throw(PermissionError("only the sandbox's own init")))
