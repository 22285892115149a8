"""In-child audit hook: defence in depth inside the OS wall, installed before any bundle import.

An audit hook cannot be removed once added. Decisions do not depend on which frame asks (a
thread the bundle starts, or a callback, has no bundle frame on its stack):
- always refused: network sockets, writes outside the scratch dir (and into the bundle);
- refused once the bundle is imported (the first open of a file under the bundle root arms
  it): process spawning except the toolchain binaries (checked by realpath against the
  realpaths `shutil.which` gives at arm time, never by name: a link named `cc` to /bin/sh is
  /bin/sh), `os.system` and shells always; ctypes, GC scans, environment mutation and tracing
  unless the nearest non-stdlib frame is the toolchain itself (triton / torch loading what
  they need while compiling a bundle kernel).
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import FrameType

_SPAWN_EVENTS = frozenset(
    {"subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "pty.spawn"}
)
_NET_EVENTS = frozenset(
    {
        "socket.connect",
        "socket.bind",
        "socket.sendto",
        "socket.sendmsg",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyaddr",
    }
)
_TOOLCHAIN_ONLY = frozenset(
    {
        "ctypes.dlopen",
        "ctypes.dlsym",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "os.putenv",
        "os.unsetenv",
        "sys.settrace",
        "sys.setprofile",
        "ctypes.cdata",
        "ctypes.addressof",
        "ctypes.call_function",
        "sys._current_frames",
    }
)
ALLOWED_TOOLS = (
    "ptxas",
    "cc",
    "gcc",
    "x86_64-linux-gnu-gcc",
    "clang",
    "ldconfig",
    "nvcc",
    "cuobjdump",
    "nvdisasm",
    "uname",
    "which",
    "ninja",
    "c++",
    "g++",
)
_WRITE_CHARS = set("wax+")

_state: dict[str, Any] = {}
violations: list[str] = []


class SandboxViolation(PermissionError):
    pass


def _bundle_frame() -> str | None:
    root = _state["bundle_root"]
    f: FrameType | None = sys._getframe(2)
    while f is not None:
        fn = f.f_code.co_filename
        if fn.startswith(root):
            return f"{os.path.relpath(fn, root)}:{f.f_lineno}"
        f = f.f_back
    return None


def _toolchain_asks() -> bool:
    """True when the nearest frame outside the stdlib lives in triton or torch (their compilers
    run ptxas / cc and load libraries while a kernel launches). A bundle frame, or no
    non-stdlib frame at all (a thread started on os.system / ctypes.CDLL), is False."""
    f: FrameType | None = sys._getframe(2)
    stdlib, root, tools = _state["stdlib"], _state["bundle_root"], _state["toolchains"]
    while f is not None:
        fn = f.f_code.co_filename
        if fn.startswith(root):
            return False
        if fn.startswith(tools):
            return True
        if not (fn.startswith((stdlib, "<")) or fn == __file__):
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


def _executable(event: str, args: tuple[Any, ...]) -> str:
    """The program a spawn event would run ('' when it cannot be told)."""
    exe: Any = args[0] if args else None
    if event == "subprocess.Popen" and exe is None and len(args) > 1:
        argv = args[1]
        exe = argv if isinstance(argv, (str, bytes, os.PathLike)) else next(iter(argv), None)
    if isinstance(exe, (list, tuple)):
        exe = exe[0] if exe else None
    if not isinstance(exe, (str, bytes, os.PathLike)):
        return ""
    exe = os.fsdecode(exe)
    if os.sep not in exe:
        exe = shutil.which(exe) or exe
    return os.path.realpath(exe)


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event in _NET_EVENTS:
        _deny(event, "network access is not allowed")
    elif event == "socket.__new__":
        if len(args) > 1 and args[1] not in (socket.AF_UNIX, -1):
            _deny(event, "network sockets are not allowed")
    elif event == "open":
        path, mode, flags = (list(args) + [None, None, None])[:3]
        if not isinstance(path, (str, bytes, os.PathLike)):
            return
        p = os.fsdecode(path)
        writing = (isinstance(mode, str) and bool(_WRITE_CHARS & set(mode))) or (
            isinstance(flags, int) and bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC))
        )
        if writing and not _writable(p):
            _deny(event, f"writing {p!r} outside the scratch dir")
        if not _state["armed"] and os.path.realpath(p).startswith(_state["bundle_root"]):
            _state["armed"] = True  # the bundle is being imported: from now on, whatever the thread
    elif not _state["armed"]:
        return
    elif event == "os.system":
        _deny(event, "shell commands are not allowed")
    elif event in _SPAWN_EVENTS:
        exe = _executable(event, args)
        if exe and exe in _state["tool_paths"] and _toolchain_asks():
            return
        _deny(event, f"process spawning is not allowed ({exe or args[:1]!r})")
    elif event in _TOOLCHAIN_ONLY and not _toolchain_asks():
        _deny(event, "not allowed in contribution code")


def install_guard(bundle_root: str, writable: list[str]) -> None:
    """Arm the hook (idempotent per process). Call before the bundle is imported."""
    if _state:
        return
    import sysconfig

    _state["bundle_root"] = os.path.realpath(bundle_root) + os.sep
    _state["writable"] = [os.path.realpath(w) for w in writable] + ["/dev/null", "/dev/shm"]
    _state["stdlib"] = os.path.realpath(sysconfig.get_paths()["stdlib"])
    _state["armed"] = False
    tools = set()
    for t in ALLOWED_TOOLS + tuple(os.environ.get(k, "") for k in ("TRITON_PTXAS_PATH",)):
        found = shutil.which(t) if t else None
        if found:
            tools.add(os.path.realpath(found))
    roots = []
    import importlib.util

    for mod in ("triton", "torch"):
        m = sys.modules.get(mod)
        origin = getattr(m, "__file__", None) if m is not None else None
        if origin is None:
            spec = importlib.util.find_spec(mod)  # not imported yet: locate it without importing
            origin = spec.origin if spec else None
        if origin:
            roots.append(os.path.dirname(os.path.realpath(origin)) + os.sep)
    # the binaries Triton ships itself (backends/nvidia/bin/ptxas, cuobjdump, nvdisasm), by realpath
    for root in roots:
        for d, _, files in os.walk(os.path.join(root, "backends")):
            if os.path.basename(d) == "bin":
                tools.update(os.path.realpath(os.path.join(d, f)) for f in files if os.path.splitext(f)[0] in ALLOWED_TOOLS)
    _state["tool_paths"] = frozenset(tools)
    _state["toolchains"] = tuple(roots) or ("\0",)
    sys.addaudithook(_hook)
