"""Class 8: reach a host service: TCP on 127.0.0.1, an abstract unix socket, the outside."""
import socket

from _attack import attempt, ctx

c = ctx()
attempt("host_tcp_loopback", lambda: socket.create_connection(("127.0.0.1", c["port"]), timeout=2))


def abstract():
    s = socket.socket(socket.AF_UNIX)
    s.connect("\0" + c["abstract"])
    return "connected"


attempt("host_abstract_unix", abstract)
attempt("outside", lambda: socket.create_connection(("1.1.1.1", 53), timeout=2))
attempt("interfaces", lambda: [l for l in open("/proc/net/dev").read().splitlines()[2:] if not l.strip().startswith("lo:")]
        or (_ for _ in ()).throw(OSError("only lo")))
