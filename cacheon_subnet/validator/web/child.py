"""The leaderboard's web process: serves the page on a listening socket the validator hands it.

Started by supervisor.py behind the sandbox wall (its own uid, namespaces without a network of
its own, an allowlist filesystem view holding the snapshot dir read-only, seccomp, rlimits). It
binds nothing and opens no connection: the validator (root) bound the socket, so a port below
1024 works and a restart reuses it. It reads only the snapshot (snapshot.py). It lowers its own
CPU priority: a request flood competes with the validator's timing as little as possible.

    python -m cacheon_subnet.validator.web.child --fd N --snapshot-dir DIR --limits JSON
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import signal
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cacheon_subnet import httpsite
from cacheon_subnet.connguard import Limits, Tally
from cacheon_subnet.log import configure, get_logger

READ_THREADS = 4  # concurrent snapshot reads; more requests queue (each holds a connection, which is capped)
NICE = 10


class _BadRequests(logging.Filter):
    """aiohttp logs every malformed request (a header over the limit, a garbage line) with a
    traceback at ERROR: an attacker's flood would be a log flood. Counted here instead, once per
    `every_s` (a handler's own failure is logged by server.guard as web.error)."""

    def __init__(self, every_s: float) -> None:
        super().__init__()
        self.tally = Tally(get_logger("cacheon.validator.web").warning, "http.bad_requests", every_s)

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        self.tally.note(error=f"{type(exc).__name__}: {exc}"[:200] if exc else record.getMessage()[:200])
        return False


async def serve(sock: socket.socket, snapshot_dir: Path, limits: Limits) -> None:
    from cacheon_subnet.validator.web.server import make_app

    log = get_logger("cacheon.validator.web")
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(READ_THREADS, thread_name_prefix="board-read"))
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    site = await httpsite.serve_socket(make_app(snapshot_dir, snapshot=True), sock, limits, log)
    log.info("web.child_ready", pid=os.getpid(), uid=os.getuid(), port=site.port, limits=limits.to_json())
    try:
        await stop.wait()
    finally:
        await site.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="cacheon-web")
    p.add_argument("--fd", type=int, required=True, help="a listening TCP socket")
    p.add_argument("--snapshot-dir", required=True)
    p.add_argument("--limits", required=True, help="connguard.Limits as JSON")
    args = p.parse_args(argv)
    configure(json=True)
    log = get_logger("cacheon.validator.web")
    try:
        os.nice(NICE)
    except OSError:
        pass
    limits = Limits(**json.loads(args.limits))
    logging.getLogger("aiohttp.server").addFilter(_BadRequests(limits.log_every_s))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    fitted = limits.fitted(soft if soft != resource.RLIM_INFINITY else 1 << 20)
    if fitted != limits:
        log.warning("web.limits_fitted", nofile=soft, max_conns=fitted.max_conns, asked=limits.max_conns)
    sock = socket.socket(fileno=args.fd)
    if sock.type != socket.SOCK_STREAM:
        print(f"cacheon-web: fd {args.fd} is not a stream socket", file=sys.stderr)
        return 2
    asyncio.run(serve(sock, Path(args.snapshot_dir), fitted))
    return 0


if __name__ == "__main__":
    sys.exit(main())
