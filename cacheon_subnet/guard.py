"""In-child audit hook: the last layer of the sandbox, installed before any bundle import.

An audit hook cannot be removed once added. It refuses, whenever a bundle frame is on the
stack (or always, for the network), the operations a kernel never needs: sockets, process
spawning, native library loading, GC scans (a known cheat: finding the expected tensor),
environment mutation and file writes outside the child's scratch dir. Toolchains that the
trusted compilers run themselves (Triton invoking ptxas / cc) stay allowed.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

_SPAWN_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                           "os.fork", "os.forkpty", "pty.spawn"})
_NET_EVENTS = frozenset({"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg",
                         "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr"})
_BUNDLE_ONLY = frozenset({"ctypes.dlopen", "ctypes.dlsym", "gc.get_objects", "gc.get_referrers",
                          "gc.get_referents", "os.putenv", "os.unsetenv", "sys.settrace", "sys.setprofile",
                          "ctypes.cdata", "ctypes.addressof"})
ALLOWED_TOOLS = frozenset({"ptxas", "cc", "gcc", "x86_64-linux-gnu-gcc", "clang", "ldconfig", "nvcc",
                           "cuobjdump", "nvdisasm", "uname", "which", "ninja", "c++", "g++"})
_WRITE_CHARS = set("wax+")

_state: dict[str, Any] = {}
violations: list[str] = []


class SandboxViolation(PermissionError):
    pass


def _bundle_frame() -> str | None:
    root = _state["bundle_root"]
    f = sys._getframe(2)
    while f is not None:
        fn = f.f_code.co_filename
        if fn.startswith(root):
            return f"{os.path.relpath(fn, root)}:{f.f_lineno}"
        f = f.f_back
    return None


def _spawned_by_toolchain() -> bool:
    """True when the nearest non-stdlib frame asking for the spawn lives in triton or torch:
    their compilers run ptxas / ldconfig / cc themselves while a bundle kernel is launching."""
    f = sys._getframe(2)
    stdlib = _state["stdlib"]
    while f is not None:
        fn = f.f_code.co_filename
        if fn.startswith(_state["bundle_root"]):
            return False
        if any(fn.startswith(t) for t in _state["toolchains"]):
            return True
        if not (fn.startswith(stdlib) or fn.startswith("<")):
            return False
        f = f.f_back
    return False


def _writable(path: str) -> bool:
    p = os.path.realpath(path)
    if p.startswith(_state["bundle_root"]):
        return False
    return any(p == w or p.startswith(w + os.sep) for w in _state["writable"])


def _deny(event: str, detail: str) -> None:
    where = _bundle_frame()
    msg = f"cacheon sandbox refused {event}: {detail}" + (f" (from {where})" if where else "")
    violations.append(msg)
    raise SandboxViolation(msg)


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event in _NET_EVENTS:
        _deny(event, "network access is not allowed")
    elif event == "socket.__new__":
        if len(args) > 1 and args[1] not in (socket.AF_UNIX, -1):
            _deny(event, "network sockets are not allowed")
    elif event in _SPAWN_EVENTS:
        exe = args[0] if args else ""
        if isinstance(exe, (list, tuple)):
            exe = exe[0] if exe else ""
        name = os.path.basename(os.fsdecode(exe)) if isinstance(exe, (str, bytes, os.PathLike)) else ""
        if name in ALLOWED_TOOLS and (_bundle_frame() is None or _spawned_by_toolchain()):
            return
        _deny(event, f"process spawning is not allowed ({name or exe!r})")
    elif event in _BUNDLE_ONLY:
        if _bundle_frame() is not None:
            _deny(event, "not allowed in contribution code")
    elif event == "open":
        path, mode, flags = (list(args) + [None, None, None])[:3]
        writing = (isinstance(mode, str) and bool(_WRITE_CHARS & set(mode))) or (
            isinstance(flags, int) and bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC)))
        if writing and isinstance(path, (str, bytes, os.PathLike)) and not _writable(os.fsdecode(path)):
            _deny(event, f"writing {os.fsdecode(path)!r} outside the scratch dir")


def install_guard(bundle_root: str, writable: list[str]) -> None:
    """Arm the hook (idempotent per process)."""
    if _state:
        return
    _state["bundle_root"] = os.path.realpath(bundle_root) + os.sep
    _state["writable"] = [os.path.realpath(w) for w in writable] + ["/dev/null", "/dev/shm"]
    import sysconfig

    _state["stdlib"] = os.path.realpath(sysconfig.get_paths()["stdlib"])
    roots = []
    for mod in ("triton", "torch"):
        m = sys.modules.get(mod)
        if m is not None and getattr(m, "__file__", None):
            roots.append(os.path.dirname(os.path.realpath(m.__file__)) + os.sep)
    _state["toolchains"] = tuple(roots)
    sys.addaudithook(_hook)
