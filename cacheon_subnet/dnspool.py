"""Name resolution on threads of its own, so a miner's slow names cannot starve anyone else's.

Why: aiohttp's default resolver runs `getaddrinfo` in asyncio's default executor (min(32, CPUs +
4) threads: 6 on a 2-core validator). A connect timeout cancels the await, not the thread, so a
name whose authoritative server never answers holds a thread until the system resolver gives up
(10-30 s). With the fetch stage's 4 at a time and its 10 s connect timeout, twelve such names
held every default thread: an honest miner's lookup queued behind them and failed, and the
stage's `asyncio.run` then waited for every hung thread before the pass went on (70 s for a 60 s
stage; red team 2026-12-05). Here lookups run in one pool of `THREADS` threads shared by every
session and never waited for at a loop's end: filling it takes 32 names that hang for 80 s
(est.), past what a system resolver waits.
"""

from __future__ import annotations

import asyncio
import socket
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from aiohttp.abc import AbstractResolver, ResolveResult

THREADS = 32
_POOL = ThreadPoolExecutor(THREADS, thread_name_prefix="cacheon-dns")
_NUMERIC = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV


class PooledResolver(AbstractResolver):
    """getaddrinfo in the module's own pool (or `pool`); results as aiohttp's threaded resolver
    gives them. A link-local IPv6 address keeps its scope in `host` (policy refuses it anyway)."""

    def __init__(self, pool: ThreadPoolExecutor | None = None) -> None:
        self.pool = pool or _POOL

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        lookup = partial(socket.getaddrinfo, host, port, family, socket.SOCK_STREAM, 0, socket.AI_ADDRCONFIG)
        infos = await asyncio.get_running_loop().run_in_executor(self.pool, lookup)
        out: list[ResolveResult] = []
        for fam, _, proto, _, address in infos:
            if fam == socket.AF_INET6 and len(address) >= 4 and address[3]:
                resolved = f"{address[0]}%{address[3]}"
            elif fam in (socket.AF_INET, socket.AF_INET6):
                resolved = str(address[0])
            else:
                continue
            out.append(
                ResolveResult(hostname=host, host=resolved, port=int(address[1]), family=fam, proto=proto, flags=_NUMERIC)
            )
        return out

    async def close(self) -> None:
        pass
