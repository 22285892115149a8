"""Class 8: regain root through a setuid-root binary of the host's /usr (no_new_privs and the
nosuid view must make the bit inert), and write a setuid file of one's own into scratch."""
import os
import stat
import subprocess

from _attack import attempt, report


def run(argv):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL, check=False)
    if r.returncode != 0:
        raise PermissionError(f"rc {r.returncode}: {(r.stderr or r.stdout).strip()[:120]}")
    return r.stdout.strip()


for exe in ("/usr/bin/mount", "/usr/bin/umount", "/usr/bin/newgrp", "/usr/bin/su"):
    if os.path.exists(exe) and os.stat(exe).st_mode & stat.S_ISUID:
        args = {"/usr/bin/mount": [exe, "-t", "tmpfs", "none", "/mnt"], "/usr/bin/umount": [exe, "/proc"],
                "/usr/bin/newgrp": [exe, "root"], "/usr/bin/su": [exe, "-c", "id -u", "root"]}[exe]
        attempt(f"setuid_{os.path.basename(exe)}", lambda a=args: run(a))
own = os.path.join(os.environ["CACHEON_SANDBOX_SCRATCH"], "suid-python")
with open("/usr/bin/id", "rb") as src, open(own, "wb") as dst:
    dst.write(src.read())
os.chmod(own, 0o4755)
out = run([own, "-u"])
report("own_setuid_file", out != str(os.getuid()), f"euid after exec {out}")
