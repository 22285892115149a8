"""The /metrics endpoint, bounded: it lives in the validator's own process.

Why not prometheus_client's `start_http_server`: a ThreadingHTTPServer there starts a thread per
connection with no cap and no deadline for the request head, so a slowloris on the metrics port
cost the validator a thread and an fd per connection, without end. Here:
* at most `max_conns` connections are served at once (a scraper needs one); more are closed at
  accept, so a flood costs an accept and a close each, never a thread or a lasting fd;
* the request head must arrive whole within `head_timeout_s` (a total, not per read) and fit
  in HEAD_MAX bytes; one response, then the connection closes (no keep-alive);
* accept errors and refusals are counted and logged once per `log_every_s`, never a traceback
  per event, and an accept error backs off instead of spinning;
* the exposition is rendered at most once per `min_interval_s` (later scrapes get those bytes),
  and at most `max_rps` connections a second are accepted (more wait in the kernel's backlog,
  and a full backlog drops them there): a red team
  on 2026-12-05 drove ~1500 scrapes a second, each a `generate_latest` in this process, and the
  validator spent a whole core on them.
Bind it to loopback (the default) or firewall it: it is for the operator's scraper only.
"""

from __future__ import annotations

import errno
import select
import socket
import threading
import time
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from cacheon_subnet.connguard import Tally, listen_socket
from cacheon_subnet.validator.web.ratelimit import TokenBuckets

HEAD_MAX = 8192
PATHS = ("/metrics", "/")


class MetricsServer:
    """GET/HEAD /metrics from a registry, in a daemon thread; `start()` returns the bound port."""

    def __init__(
        self,
        registry: CollectorRegistry,
        addr: str,
        port: int,
        *,
        max_conns: int = 4,
        head_timeout_s: float = 5.0,
        log: Any = None,
        log_every_s: float = 60.0,
        min_interval_s: float = 1.0,
        max_rps: float = 20.0,
    ) -> None:
        self.registry, self.addr, self.port = registry, addr, port
        self.max_conns, self.head_timeout_s = max_conns, head_timeout_s
        self.min_interval_s = min_interval_s
        self._rate = TokenBuckets(rate=max_rps, burst=max_rps, max_clients=1)
        self._rendered: tuple[float, bytes] | None = None  # (when, the exposition)
        self._render_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_conns)
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        emit = log.warning if log is not None else (lambda *a, **k: None)
        self.accept_errors = Tally(emit, "metrics.accept_failed", log_every_s)
        self.refused = Tally(emit, "metrics.refused", log_every_s)

    def start(self) -> int:
        self._sock = listen_socket(self.addr, self.port, 64)
        self.port = int(self._sock.getsockname()[1])
        self._thread = threading.Thread(target=self._accept_loop, name="cacheon-metrics", daemon=True)
        self._thread.start()
        return self.port

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            ready, _, _ = select.select([self._sock], [], [], 0.5)
            while ready and not self._stop.is_set():  # drain the backlog, then wait again
                if (pause := self._rate.wait("all")) > 0:  # over max_rps: leave the rest to the
                    self.refused.note(rate=self._rate.rate)  # kernel's backlog (a full one drops
                    self._stop.wait(pause)  # SYNs at no cost to this process)
                    break
                try:
                    conn, _ = self._sock.accept()
                except BlockingIOError:
                    break
                except OSError as exc:
                    self.accept_errors.note(error=f"{type(exc).__name__}: {exc.strerror or exc}")
                    time.sleep(0.1 if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM) else 0.01)
                    break
                self._admit(conn)

    def _admit(self, conn: socket.socket) -> None:
        self._rate.take("all")
        if not self._slots.acquire(blocking=False):
            self.refused.note(cap=self.max_conns)
            conn.close()
            return
        try:
            threading.Thread(target=self._serve, args=(conn,), name="cacheon-metrics-conn", daemon=True).start()
        except RuntimeError:  # no thread to be had: drop this one
            self._slots.release()
            conn.close()

    def _serve(self, conn: socket.socket) -> None:
        try:
            head = _read_head(conn, time.monotonic() + self.head_timeout_s)
            conn.settimeout(self.head_timeout_s)
            if head is not None:
                conn.sendall(self._answer(head))
        except OSError:
            pass
        finally:
            conn.close()
            self._slots.release()

    def _answer(self, head: bytes) -> bytes:
        parts = head.split(b"\r\n", 1)[0].split()
        method, path = (parts[0], parts[1].split(b"?", 1)[0]) if len(parts) == 3 else (b"", b"")
        if method not in (b"GET", b"HEAD"):
            return _reply(405, b"text/plain", b"GET or HEAD only\n", method == b"HEAD")
        if path.decode("latin-1") not in PATHS:
            return _reply(404, b"text/plain", b"not found: /metrics\n", method == b"HEAD")
        return _reply(200, CONTENT_TYPE_LATEST.encode(), self._exposition(), method == b"HEAD")

    def _exposition(self) -> bytes:
        """The registry rendered, at most once per `min_interval_s` (a scraper polls every 15 s)."""
        with self._render_lock:
            now = time.monotonic()
            if self._rendered is None or now - self._rendered[0] >= self.min_interval_s:
                self._rendered = (now, generate_latest(self.registry))
            return self._rendered[1]


def _read_head(conn: socket.socket, deadline: float) -> bytes | None:
    """The request head (up to the blank line), or None: too slow (past `deadline` in total),
    too long, or the peer went away."""
    buf = b""
    while b"\r\n\r\n" not in buf and b"\n\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or len(buf) > HEAD_MAX:
            return None
        conn.settimeout(left)
        try:
            chunk = conn.recv(4096)
        except TimeoutError:
            return None
        if not chunk:
            return None
        buf += chunk
    return buf


def _reply(status: int, ctype: bytes, body: bytes, head_only: bool) -> bytes:
    reason = {200: b"OK", 404: b"Not Found", 405: b"Method Not Allowed"}[status]
    return (
        b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
        % (status, reason, ctype, len(body))
    ) + (b"" if head_only else body)
