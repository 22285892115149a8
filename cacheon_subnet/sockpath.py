"""Unix socket path budget: SGLang's ZMQ IPC endpoints must fit `sockaddr_un.sun_path`.

SGLang 0.5.13.post1 names every IPC endpoint `ipc://` + `tempfile.NamedTemporaryFile().name`
(srt/server_args.py PortArgs.init_new; metrics_reporter adds `.<dp rank>`), i.e.
`$TMPDIR/tmpXXXXXXXX[.N]`. A path past the kernel's limit makes ZMQ's bind fail and the engine
dies at start: every verdict NO_DECISION (issue 16). So the engine's TMPDIR is short by
construction (the sandbox's private `/tmp`; a short `/tmp/cx-XXXXXXXX` in weak mode), never
derived from the state/arena home or a work dir, and checked here before an engine starts.
"""

from __future__ import annotations

import os
import sys

# sun_path is 108 bytes on Linux, 104 on the BSDs/macOS; one byte is the terminating NUL.
SUN_PATH_MAX = 104 if sys.platform == "darwin" or "bsd" in sys.platform else 108
MAX_SOCKET_PATH = SUN_PATH_MAX - 1
# What SGLang appends to TMPDIR: "/" + tempfile's "tmp" + 8 random chars, then ".<dp rank>"
# (4 digits allowed: dp ranks are far fewer).
SGLANG_IPC_TAIL = len("/tmp") + 8 + len(".9999")


def ipc_path_len(tmpdir: str | os.PathLike[str]) -> int:
    """Bytes of the longest IPC socket path SGLang makes under `tmpdir`."""
    return len(os.fsencode(os.fspath(tmpdir)).rstrip(b"/")) + SGLANG_IPC_TAIL


def check_tmpdir(tmpdir: str | os.PathLike[str], who: str) -> None:
    """Raise ValueError (saying which dir, how long, the limit) when SGLang's sockets under
    `tmpdir` could exceed the platform's Unix socket path limit."""
    n = ipc_path_len(tmpdir)
    if n > MAX_SOCKET_PATH:
        raise ValueError(
            f"{who}: TMPDIR {os.fspath(tmpdir)!r} is too long for SGLang's ZMQ IPC sockets "
            f"({n} > {MAX_SOCKET_PATH} bytes with its tmpXXXXXXXX.N names); use a short TMPDIR"
        )
