"""Bounds for a public aiohttp listener: our own accept loop in front of aiohttp's protocol.

Why: anyone can open connections to a page whose address is on chain. Measured on the old
leaderboard (aiohttp's own accept loop, its defaults): 1100 connections from one address that
never finished their headers took every fd of the process (soft limit 1024), and asyncio logged
every failed accept with a traceback (2.1 GB in 7 minutes); 400 connections of 127 header lines
of 8 KB each raised RSS from 45 to 841 MiB and were never closed. So:

* connections are capped per client (an IPv4 address, an IPv6 /64) and in total, both checked
  when a connection is accepted, before aiohttp allocates anything for it; beyond the per-client
  cap the new one gets a 503 and is closed; beyond the total a connection of the heaviest network
  is dropped (the IPv4 /24 or IPv6 /48 holding the most connections, in it the client holding the
  most, its oldest). Oldest-first let one attacker evict every reader: 32 clients' worth of
  connections (32 IPv4 addresses, or 32 /64s of the one /48 a tunnel broker hands out for free)
  churned at the accept rate aborted each reader's connection before its response was out;
  now such a flood evicts itself and a reader from another network is dropped only when every
  network holds as few connections as the reader's does (red team 2026-12-04);
* a request's head must arrive within `header_timeout_s` of the connect or of the last response
  (aiohttp's keep-alive timer, which also closes idle keep-alive connections);
* every connection ends after `max_conn_s` whatever it does (a client that never reads its
  response, a body trickled byte by byte);
* what slow readers leave unsent is bounded: each accepted socket gets small kernel buffers
  (`sndbuf`, `rcvbuf`: no autotuning to megabytes per connection), and when the bytes queued in
  all transports pass `max_buffered` the connections holding the most are dropped first;
* request line, header field and header count are bounded (aiohttp's parser limits);
* accept errors (EMFILE...) and refusals are counted and logged once per `log_every_s` with the
  count, never a traceback per event, and an accept error backs off instead of spinning.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import os
import socket
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

FD_RESERVE = 64  # fds a server process needs besides its connections (listener, epoll, DB, pipes, executor)
REFUSAL = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 5\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


@dataclass(frozen=True)
class Limits:
    """What one listener may cost. `max_conns + FD_RESERVE` must fit in the process's fd limit."""

    max_conns: int = 512
    max_conns_per_ip: int = 16
    header_timeout_s: float = 10.0
    max_conn_s: float = 60.0
    max_line_size: int = 4096
    max_field_size: int = 4096
    max_headers: int = 32
    backlog: int = 128
    log_every_s: float = 10.0
    sndbuf: int = 64 << 10  # per accepted socket (0: the kernel's autotuning)
    rcvbuf: int = 16 << 10  # requests are small
    max_buffered: int = 64 << 20  # bytes queued in user space for all connections together

    def __post_init__(self) -> None:
        if not (
            self.max_conns >= 1
            and 1 <= self.max_conns_per_ip <= self.max_conns
            and self.header_timeout_s > 0
            and self.max_conn_s >= self.header_timeout_s
            and self.max_line_size >= 256
            and self.max_field_size >= 256
            and self.max_headers >= 8
            and self.backlog >= 1
            and self.log_every_s > 0
            and self.sndbuf >= 0
            and self.rcvbuf >= 0
            and self.max_buffered >= 1 << 16
        ):
            raise ValueError(f"connection limits out of range: {self}")

    def handler_args(self) -> dict[str, Any]:
        """aiohttp RequestHandler keywords: the head/idle timer and the parser's size limits."""
        return {
            "keepalive_timeout": self.header_timeout_s,
            "max_line_size": self.max_line_size,
            "max_field_size": self.max_field_size,
            "max_headers": self.max_headers,
            "lingering_time": min(2.0, self.header_timeout_s),
        }

    def fitted(self, nofile: int) -> Limits:
        """These limits with max_conns lowered to what `nofile` fds leave (ValueError if nothing)."""
        room = nofile - FD_RESERVE
        if room < 1:
            raise ValueError(f"an fd limit of {nofile} leaves no room for connections (reserve {FD_RESERVE})")
        if self.max_conns <= room:
            return self
        return replace(self, max_conns=room, max_conns_per_ip=min(self.max_conns_per_ip, room))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_env(cls, prefix: str, base: Limits | None = None, env: Mapping[str, str] | None = None) -> Limits:
        """`base` with any PREFIX_<FIELD> (upper case) from the environment, e.g. CACHEON_WEB_MAX_CONNS."""
        env = os.environ if env is None else env
        base = base or cls()
        over: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f"{prefix}{f.name.upper()}")
            if raw is not None:
                try:
                    over[f.name] = float(raw) if f.type in ("float", float) else int(raw)
                except ValueError:
                    raise ValueError(f"{prefix}{f.name.upper()}={raw!r}: expected a number") from None
        return replace(base, **over)


def client_key(addr: Any) -> str:
    """The unit a per-client cap counts: the IPv4 address, or an IPv6 address's /64 (one host
    holds a whole /64). An IPv4-mapped IPv6 address counts as its IPv4 address."""
    host = addr[0] if isinstance(addr, tuple) and addr else str(addr)
    try:
        ip = ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return str(host)
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def client_group(key: str) -> str:
    """The network a client key belongs to for eviction: an IPv4 /24 or an IPv6 /48 (what one
    subscriber or one tunnel is handed); any other key is its own group."""
    try:
        net = ipaddress.ip_network(key, strict=False)
    except ValueError:
        return key
    prefix = 24 if net.version == 4 else 48
    return str(net.supernet(new_prefix=prefix)) if net.prefixlen > prefix else str(net)


class Tally:
    """Counts an event and logs it at most once per `every_s` with the count (never a traceback)."""

    def __init__(
        self, emit: Callable[..., Any], event: str, every_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.emit, self.event, self.every_s, self.clock = emit, event, every_s, clock
        self.total = 0
        self._count = 0
        self._last = float("-inf")

    def note(self, **detail: Any) -> None:
        self.total += 1
        self._count += 1
        now = self.clock()
        if now - self._last >= self.every_s:
            self.emit(self.event, count=self._count, total=self.total, **detail)
            self._count, self._last = 0, now


def _released(transport: asyncio.Transport) -> bool:
    """True once the connection's socket is really closed (a closing transport with unsent data
    still holds its fd)."""
    sock = transport.get_extra_info("socket")
    return sock is None or sock.fileno() < 0


class ConnTable:
    """Open connections by client key (and its network, client_group), oldest first."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits, self.clock = limits, clock
        self._conns: dict[asyncio.Transport, tuple[str, float]] = {}
        self._per: Counter[str] = Counter()
        self._by_key: dict[str, dict[asyncio.Transport, None]] = {}  # each client's, oldest first
        self._groups: dict[str, Counter[str]] = {}  # network -> its clients' connection counts
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._conns)

    def count(self, key: str) -> int:
        return self._per[key]

    def prune(self) -> None:
        for t in [t for t in self._conns if _released(t)]:
            self._drop(t)

    def _drop(self, t: asyncio.Transport) -> None:
        key, _ = self._conns.pop(t)
        self._per[key] -= 1
        mine, group = self._by_key[key], client_group(key)
        del mine[t]
        self._groups[group][key] -= 1
        if self._per[key] <= 0:
            del self._per[key], self._by_key[key], self._groups[group][key]
            if not self._groups[group]:
                del self._groups[group]

    def _victim(self) -> asyncio.Transport:
        """The oldest connection of the client holding the most in the network holding the most."""
        group = max(self._groups, key=lambda g: self._groups[g].total())
        key = max(self._groups[group], key=self._groups[group].__getitem__)
        return next(iter(self._by_key[key]))

    def admit(self, key: str) -> bool:
        """False when `key` is at its cap; at the total cap a connection of the heaviest network
        is dropped (_victim)."""
        if self._per[key] >= self.limits.max_conns_per_ip or len(self._conns) >= self.limits.max_conns:
            self.prune()
        if self._per[key] >= self.limits.max_conns_per_ip:
            return False
        while len(self._conns) >= self.limits.max_conns:
            victim = self._victim()
            victim.abort()
            self._drop(victim)
            self.evicted += 1
        return True

    def add(self, key: str, transport: asyncio.Transport) -> None:
        self._conns[transport] = (key, self.clock())
        self._per[key] += 1
        self._by_key.setdefault(key, {})[transport] = None
        self._groups.setdefault(client_group(key), Counter())[key] += 1

    def expire(self) -> int:
        """Abort every connection older than max_conn_s; forget the closed ones. Returns how many."""
        self.prune()
        cutoff = self.clock() - self.limits.max_conn_s
        old = [t for t, (_, at) in self._conns.items() if at <= cutoff]
        for t in old:
            t.abort()
            self._drop(t)
        return len(old)

    def buffered(self) -> int:
        """Bytes queued in user space, unsent, over every open connection."""
        return sum(t.get_write_buffer_size() for t in self._conns if not _released(t))

    def shed(self) -> int:
        """While more than max_buffered bytes wait for slow readers, drop the connection holding
        the most. Returns how many were dropped."""
        sizes = sorted(
            ((t.get_write_buffer_size(), i, t) for i, t in enumerate(self._conns) if not _released(t)),
            key=lambda x: (x[0], -x[1]),
            reverse=True,
        )
        total, n = sum(x[0] for x in sizes), 0
        for size, _, t in sizes:
            if total <= self.limits.max_buffered or size == 0:
                break
            t.abort()
            self._drop(t)
            total -= size
            n += 1
        return n

    def close_all(self) -> None:
        for t in list(self._conns):
            t.abort()
            self._drop(t)


def _tune(conn: socket.socket, limits: Limits) -> None:
    for opt, size in ((socket.SO_SNDBUF, limits.sndbuf), (socket.SO_RCVBUF, limits.rcvbuf)):
        if size:
            try:
                conn.setsockopt(socket.SOL_SOCKET, opt, size)
            except OSError:
                pass


def _refuse(conn: socket.socket) -> None:
    try:
        conn.setblocking(False)
        conn.send(REFUSAL)
    except OSError:
        pass
    conn.close()


class GuardedListener:
    """Accepts on `sock` (listening, non-blocking) and hands admitted connections to `factory`
    (an aiohttp `web.Server`, i.e. `runner.server`)."""

    def __init__(self, sock: socket.socket, factory: Callable[[], asyncio.Protocol], limits: Limits, log: Any) -> None:
        self.sock, self.factory, self.limits, self.log = sock, factory, limits, log
        self.table = ConnTable(limits)
        self.accept_errors = Tally(log.warning, "http.accept_failed", limits.log_every_s)
        self.refused = Tally(log.warning, "http.refused", limits.log_every_s)
        self.dropped = Tally(log.warning, "http.dropped", limits.log_every_s)
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self.sock.setblocking(False)
        self._tasks = [asyncio.create_task(self._accept_loop()), asyncio.create_task(self._sweep_loop())]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self.table.close_all()

    async def _accept_loop(self) -> None:
        """Accepts until cancelled, whatever one accept meets. Why not only OSError: a flood of
        pipelined header-heavy requests took the web process to its address-space cap (1 GiB;
        reads failed with MemoryError), and a MemoryError here would end this task while the
        process lived on: never restarted, never accepting again (red team 2026-12-04)."""
        loop = asyncio.get_running_loop()
        while True:
            conn: socket.socket | None = None
            try:
                conn, addr = await loop.sock_accept(self.sock)
                await self._admit(loop, conn, addr)
            except Exception as exc:  # noqa: BLE001 - EMFILE, MemoryError...: count, say so now and then, back off
                if conn is not None:
                    conn.close()
                self.accept_errors.note(error=f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}")
                resource = isinstance(exc, MemoryError) or getattr(exc, "errno", None) in _RESOURCE_ERRNOS
                await asyncio.sleep(0.1 if resource else 0.01)

    async def _admit(self, loop: asyncio.AbstractEventLoop, conn: socket.socket, addr: Any) -> None:
        key = client_key(addr)
        evicted = self.table.evicted
        if not self.table.admit(key):
            self.refused.note(client=key, reason="per-client connection cap", cap=self.limits.max_conns_per_ip)
            _refuse(conn)
            return
        if self.table.evicted > evicted:
            self.dropped.note(reason="total connection cap: the heaviest network made room", cap=self.limits.max_conns)
            await asyncio.sleep(0)  # abort() closes the evicted fd on the next loop pass: let it, before serving this one
        _tune(conn, self.limits)
        try:
            transport, _ = await loop.connect_accepted_socket(self.factory, conn)
        except OSError:
            conn.close()
            return
        self.table.add(key, transport)

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.limits.header_timeout_s / 4))
            try:
                old, heavy = self.table.expire(), self.table.shed()
            except Exception as exc:  # noqa: BLE001 - as in _accept_loop: the sweep outlives a MemoryError
                self.dropped.note(error=f"{type(exc).__name__}: {exc}"[:200])
                continue
            if old or heavy:
                self.dropped.note(
                    too_old=old,
                    too_much_unsent=heavy,
                    max_conn_s=self.limits.max_conn_s,
                    max_buffered=self.limits.max_buffered,
                )


def listen_socket(host: str, port: int, backlog: int) -> socket.socket:
    """A bound, listening, non-blocking TCP socket for host:port (port 0: any free one)."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    if not infos:
        raise OSError(f"cannot resolve {host!r}")
    family, type_, proto, _, addr = infos[0]
    sock = socket.socket(family, type_, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
