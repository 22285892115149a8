"""Class 3: contribution code that expects to run as root (the drop to an unprivileged user
silently skipped): it checks its ids and capabilities and tries to take root back."""
import os

from _attack import attempt, report

status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
ids = {int(x) for k in ("Uid", "Gid") for x in status[k].split()}
report("root_ids", 0 in ids, f"Uid {status['Uid'].split()} Gid {status['Gid'].split()}")
caps = {k: int(status[k].strip(), 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
report("capabilities", any(caps[k] for k in ("CapInh", "CapPrm", "CapEff", "CapAmb")),
       " ".join(f"{k}={v:x}" for k, v in caps.items()))
report("bounding_set", caps["CapBnd"] != 0, f"CapBnd={caps['CapBnd']:x}")
report("no_new_privs_off", status["NoNewPrivs"].strip() != "1", f"NoNewPrivs {status['NoNewPrivs'].strip()}")
groups = os.getgroups()
report("supplementary_groups", bool(groups), groups)
attempt("setuid_root", lambda: os.setuid(0))
attempt("setgroups_root", lambda: os.setgroups([0]))
own = os.path.join(os.environ["CACHEON_SANDBOX_SCRATCH"], "mine")
open(own, "w").close()
attempt("chown_to_root", lambda: os.chown(own, 0, 0))
