"""Class 8: fork until refused; the count must stay under the dedicated uid's process limit."""
import os
import time

from _attack import report

kids, err = [], ""
try:
    for _ in range(5000):
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        kids.append(pid)
except OSError as e:
    err = f"{e.errno} {e.strerror}"
report("fork_bomb", not err, f"forked {len(kids)} then {err}")
print(f"COUNT {len(kids)}", flush=True)
