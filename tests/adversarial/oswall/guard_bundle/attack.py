"""Class 2: contribution code that launders forbidden calls through threads (no bundle frame on
the thread's stack) and a toolchain-named symlink. Imported as bundle code under the guard."""
import ctypes
import gc
import os
import subprocess
import threading


def _in_thread(target, *args):
    t = threading.Thread(target=target, args=args)  # the target is the C function itself
    t.start()
    t.join()


def cc_symlink(scratch):
    link = os.path.join(scratch, "cc")
    os.symlink("/bin/sh", link)
    subprocess.run([link, "-c", "echo PWNED-cc-path"])


def cc_symlink_on_path(scratch):
    link = os.path.join(scratch, "bin", "cc")
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink("/bin/sh", link)
    os.environ["PATH"] = os.path.dirname(link) + os.pathsep + os.environ["PATH"]
    subprocess.run(["cc", "-c", "echo PWNED-cc-name"])


def thread_os_system(scratch):
    _in_thread(os.system, "echo PWNED-os-system")


def thread_timer_subprocess(scratch):
    t = threading.Timer(0, subprocess.run, [["/bin/sh", "-c", "echo PWNED-timer"]])
    t.start()
    t.join()


def thread_ctypes(scratch):
    _in_thread(ctypes.CDLL, None)


def thread_gc(scratch):
    _in_thread(gc.get_objects)


def thread_putenv(scratch):
    _in_thread(os.putenv, "CACHEON_PWNED", "1")


def map_os_system(scratch):
    list(map(os.system, ["echo PWNED-map"]))
