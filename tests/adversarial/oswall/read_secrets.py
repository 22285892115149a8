"""Class 8: read the shadow file, the validator's 0600 wallet hotkey, its 0644 state DB, a file
under /root, the host's home dir listing."""
from _attack import attempt, ctx

c = ctx()
attempt("shadow", lambda: open("/etc/shadow").read(64))
for i, p in enumerate(c.get("secrets", [])):
    attempt(f"secret{i}", lambda p=p: open(p, "rb").read(64))
attempt("root_home", lambda: __import__("os").listdir("/root"))
attempt("var_lib", lambda: __import__("os").listdir("/var/lib"))
