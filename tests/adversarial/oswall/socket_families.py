"""Class 8: sockets of families the network namespace does not isolate. AF_VSOCK reaches the
hypervisor host (CID 2) from any netns of a VM guest; Bluetooth, CAN, TIPC, RDS, ... are not
namespaced either. Creating one is the escape (connecting would talk to a real host service)."""
import ctypes
import os
import socket

from _attack import attempt

AF_VSOCK, AF_TIPC, AF_CAN, AF_BLUETOOTH, AF_RDS, AF_ALG, AF_PACKET = 40, 30, 29, 31, 21, 38, 17
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def make(fam, kind):
    s = socket.socket(fam, kind)
    s.close()
    return "created"


def raw_socket(fam):
    """socket(2) with junk in the family's upper 32 bits (the kernel reads an int)."""
    fd = libc.syscall(41, ctypes.c_ulong(fam), ctypes.c_ulong(socket.SOCK_STREAM), ctypes.c_ulong(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return f"created fd {fd}"


def socketpair(fam):
    sv = (ctypes.c_int * 2)()
    if libc.socketpair(fam, socket.SOCK_SEQPACKET, 0, sv) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return "created"


attempt("vsock", lambda: make(AF_VSOCK, socket.SOCK_STREAM))
attempt("vsock_high_bits", lambda: raw_socket((1 << 32) | AF_VSOCK))
attempt("tipc", lambda: make(AF_TIPC, socket.SOCK_RDM))
attempt("can", lambda: make(AF_CAN, socket.SOCK_DGRAM))
attempt("bluetooth", lambda: make(AF_BLUETOOTH, socket.SOCK_STREAM))
attempt("rds", lambda: make(AF_RDS, socket.SOCK_SEQPACKET))
attempt("alg", lambda: make(AF_ALG, socket.SOCK_SEQPACKET))
attempt("packet", lambda: make(AF_PACKET, socket.SOCK_RAW))
attempt("socketpair_tipc", lambda: socketpair(AF_TIPC))
# netlink is allowed for NETLINK_ROUTE only: audit (9), uevents (15), netfilter (12), crypto (21)
for _label, _proto in (("netlink_audit", 9), ("netlink_uevent", 15), ("netlink_netfilter", 12), ("netlink_crypto", 21)):
    attempt(_label, lambda p=_proto: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, p).close() or "created")


def netlink_route():
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    s.close()
    raise RuntimeError("route netlink opened (allowed, as expected)")


attempt("netlink_route_allowed", netlink_route)
