"""Class 9: leave the cores the validator pinned this CPU child to (issue 30 item 3). A screen
beside an arena runs on the screening cores; affinity is the child's to change unless the
filter refuses it, and past wall 1 a kernel could spread back onto the arena's cores during
another contribution's timed windows. Any change of its own set, or of a thread's, is an escape."""
import os
import threading

from _attack import attempt


def set_own_affinity():
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[0]})  # any change: narrowing first, widening is the same call
    return f"affinity now {sorted(os.sched_getaffinity(0))}"


def set_thread_affinity():
    out = []

    def body():
        try:
            os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
            out.append("changed")
        except OSError as e:
            out.append(e)

    t = threading.Thread(target=body)
    t.start()
    t.join()
    if isinstance(out[0], OSError):
        raise out[0]
    return out[0]


attempt("set_own_affinity", set_own_affinity)
attempt("set_thread_affinity", set_thread_affinity)
