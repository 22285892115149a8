"""Class 8: exhaust host RAM through tmpfs inodes. Empty files cost no bytes, so a size-bounded
tmpfs still takes ~1 KiB of kernel memory per file: fill scratch, /tmp and /dev/shm with them."""
import os

from _attack import ctx, report

limit = ctx()["per_dir"]
total = 0
for label, d in (("scratch", os.environ["CACHEON_SANDBOX_SCRATCH"]), ("tmp", "/tmp"), ("shm", "/dev/shm")):
    n, err = 0, 0
    try:
        for i in range(limit):
            os.close(os.open(os.path.join(d, f"e{i}"), os.O_CREAT | os.O_WRONLY, 0o600))
            n += 1
    except OSError as e:
        err = e.errno
    total += n
    report(f"inode_flood_{label}", n == limit, f"made {n} empty files then errno {err}; statvfs f_files {os.statvfs(d).f_files}")
print(f"TOTAL {total}", flush=True)
