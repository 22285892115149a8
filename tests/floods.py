"""Connection floods as an attacker runs them (tests of the leaderboard, the metrics port and the
miner's archive server): raw sockets from chosen loopback addresses
(127.0.0.0/8 is all local on Linux, so one test box plays many clients). Every helper keeps
its sockets open until the caller closes them; none waits on the server longer than asked."""

from __future__ import annotations

import contextlib
import resource
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

HEAD = b"GET /api/health HTTP/1.1\r\nHost: board\r\n"


def raise_client_fds(need: int) -> None:
    """The attacker side needs an fd per connection: lift this process's limit (root may raise the hard one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = need + 256
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (max(want, soft), max(want, hard)))
        except (ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def connect(port: int, src: str = "127.0.0.1", timeout: float = 10.0) -> socket.socket | None:
    """A connected socket from `src`, or None when the server refused or never accepted."""
    s = socket.socket()
    s.settimeout(timeout)
    try:
        s.bind((src, 0))
        s.connect(("127.0.0.1", port))
    except OSError:
        s.close()
        return None
    return s


def open_many(port: int, n: int, src: str = "127.0.0.1", first: bytes = HEAD) -> list[socket.socket]:
    """`n` connections from `src`, each having sent `first` (a request line and no end of head:
    a slowloris). Connections the server refused are closed and left out."""
    out = []
    for _ in range(n):
        s = connect(port, src)
        if s is None:
            continue
        try:
            s.sendall(first)
        except OSError:
            s.close()
            continue
        out.append(s)
    return out


def alive(socks: list[socket.socket], wait_s: float = 0.5) -> int:
    """How many of `socks` the server still holds open after `wait_s`: not closed (EOF, reset)
    and not refused (its 503). Whatever the server sent is read and dropped; the ones found
    closed are closed on our side too."""
    time.sleep(wait_s)
    n = 0
    for s in socks:
        if s.fileno() < 0:
            continue
        if _open(s):
            n += 1
        else:
            s.close()
    return n


def _open(s: socket.socket) -> bool:
    s.setblocking(False)  # (with a timeout set, recv would wait it out instead of saying "nothing yet")
    while True:
        try:
            data = s.recv(65536, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data or data.startswith(b"HTTP/1.1 503"):
            return False


def _readable(s: socket.socket, timeout_s: float) -> bool:
    """poll, not select: fds of a flood run past select's 1024."""
    p = select.poll()
    p.register(s, select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(p.poll(timeout_s * 1000))


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        with contextlib.suppress(OSError):
            s.close()


def get(port: int, path: str = "/api/health", src: str = "127.0.0.2", timeout: float = 20.0) -> int:
    """Status of one ordinary GET from `src` (0: no answer)."""
    s = connect(port, src, timeout)
    if s is None:
        return 0
    try:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: board\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        parts = data.split(b" ", 2)
        return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    except OSError:
        return 0
    finally:
        s.close()


def get_until(port: int, ok: int = 200, src: str = "127.0.0.2", within_s: float = 60.0, **kw: object) -> int:
    """Retry `get` (a patient user reloading) until it answers `ok` or time runs out; the last status."""
    end = time.monotonic() + within_s
    status = 0
    while time.monotonic() < end:
        status = get(port, src=src, **kw)  # type: ignore[arg-type]
        if status == ok:
            return status
        time.sleep(0.5)
    return status


def header_bomb(port: int, src: str, lines: int = 127, line_bytes: int = 8190) -> socket.socket | None:
    """A request whose head is `lines` header lines of `line_bytes` each, never finished (the
    measured attack: 127 x 8 KB)."""
    s = connect(port, src)
    if s is None:
        return None
    s.setblocking(False)
    try:
        s.send(HEAD)
        for i in range(lines):
            s.send(b"X-Pad-%d: " % i + b"a" * (line_bytes - 12) + b"\r\n")
    except OSError:  # the server already answered 431/400 and closed, or our buffer is full
        pass
    return s


def huge_line(port: int, src: str, size: int = 1 << 20) -> bytes:
    """One header line of `size` bytes without a newline: what the server answers, b"" if only a close."""
    s = connect(port, src)
    if s is None:
        return b""
    try:
        s.sendall(HEAD + b"X-Huge: ")
        s.setblocking(False)
        chunk = b"b" * 65536
        sent = 0
        while sent < size:
            try:
                sent += s.send(chunk)
            except BlockingIOError:
                if _readable(s, 2.0):
                    break
            except OSError:
                break
        s.settimeout(10)
        try:
            return s.recv(4096)
        except OSError:
            return b""
    finally:
        s.close()


def idle_keepalive(port: int, n: int, src: str) -> list[socket.socket]:
    """`n` connections that each finish one request (keep-alive) and then say nothing."""
    out = []
    for _ in range(n):
        s = connect(port, src)
        if s is None:
            continue
        try:
            s.sendall(b"GET /api/health HTTP/1.1\r\nHost: board\r\n\r\n")
            s.settimeout(10)
            if not s.recv(65536).startswith(b"HTTP/1.1 "):
                s.close()
                continue
        except OSError:
            s.close()
            continue
        out.append(s)
    return out


def accept_flood(port: int, n: int, src: str) -> None:
    """`n` connects closed at once (a reset each: SO_LINGER 0)."""
    for _ in range(n):
        s = connect(port, src, timeout=5)
        if s is not None:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()


def fd_count(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def web_child(marker: str) -> int | None:
    """The pid of the leaderboard's web process whose command line names `marker` (its snapshot dir)."""
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            b"cacheon_subnet.validator.web.child" in argv
            and any(marker.encode() in a for a in argv)
            and not argv[0].endswith(b"bwrap")
        ):
            return int(p.name)
    return None


@contextlib.contextmanager
def holding(socks: list[socket.socket]) -> Iterator[list[socket.socket]]:
    try:
        yield socks
    finally:
        close_all(socks)
