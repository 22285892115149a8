"""Class 8: fill the scratch dir, /tmp and /dev/shm with many files (each under the file limit)."""
import os

from _attack import report


def fill(d):
    total, chunk = 0, b"x" * (1 << 20)
    try:
        for i in range(100000):
            with open(os.path.join(d, f"fill{i}"), "wb") as f:
                for _ in range(8):
                    f.write(chunk)
                    total += len(chunk)
    except OSError as e:
        return total, e.errno
    return total, 0


for label, d in (("scratch", os.environ["CACHEON_SANDBOX_SCRATCH"]), ("tmp", "/tmp"), ("shm", "/dev/shm")):
    total, errno_ = fill(d)
    report(f"disk_fill_{label}", errno_ == 0, f"wrote {total >> 20} MiB then errno {errno_}")
    print(f"BYTES {label} {total}", flush=True)
