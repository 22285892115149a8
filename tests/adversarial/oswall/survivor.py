"""Class 8: a setsid + double-forked child that tries to outlive the run (marker in argv)."""
import os
import sys
import time

from _attack import ctx

marker = ctx()["marker"]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", f"import time; time.sleep(600)  # {marker}"])
    os._exit(0)
time.sleep(0.5)
print("RESULT survivor_spawned BLOCKED the host decides after stop()", flush=True)
time.sleep(600)
