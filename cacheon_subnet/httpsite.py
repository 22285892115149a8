"""One way to run a small public aiohttp site: bound (connguard.py: connection caps, head and
lifetime timeouts, header limits, quiet accept errors), served from a daemon thread beside
synchronous code, or blocking until SIGINT/SIGTERM. Used by the miner's archive server, the
leaderboard's web process and its in-process form (tests), so start-up errors, the real bound
port, the bounds and shutdown behave the same everywhere."""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from cacheon_subnet.connguard import GuardedListener, Limits, listen_socket

START_TIMEOUT_S = 30.0


def http_url(host: str, port: int) -> str:
    """http://host:port, bracketing IPv6 literals."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@dataclass(frozen=True)
class BoundSite:
    """A started site: `close()` stops accepting, drops its connections and cleans the app up."""

    runner: web.AppRunner
    listener: GuardedListener
    port: int

    async def close(self) -> None:
        await self.listener.stop()
        self.listener.sock.close()
        await self.runner.cleanup()


async def serve_socket(app: web.Application, sock: socket.socket, limits: Limits, log: Any) -> BoundSite:
    """Serve `app` on an already listening socket (the web process gets its socket from the
    validator, which bound it) under `limits`."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0, **limits.handler_args())
    await runner.setup()
    assert runner.server is not None
    listener = GuardedListener(sock, runner.server, limits, log)
    listener.start()
    return BoundSite(runner, listener, int(sock.getsockname()[1]))


async def bind(app: web.Application, host: str, port: int, limits: Limits, log: Any) -> BoundSite:
    """Bind host:port and serve `app` under `limits`. Raises OSError (port in use, bad address),
    so callers wrap it in their own error with their own words."""
    sock = listen_socket(host, port, limits.backlog)
    try:
        return await serve_socket(app, sock, limits, log)
    except BaseException:
        sock.close()
        raise


class LoopThread:
    """Runs `start()` on a fresh event loop in a daemon thread, serves until `stop()`, then runs
    `cleanup()` and cancels handlers still in flight. `run()` returns once started, or raises
    the start-up error in the calling thread (TimeoutError if it never came up)."""

    def __init__(self, name: str, start: Callable[[], Awaitable[object]], cleanup: Callable[[], Awaitable[None]]) -> None:
        self._start, self._cleanup = start, cleanup
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def _main(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._start())
        except BaseException as exc:  # handed to the starting thread
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        loop.run_forever()
        loop.run_until_complete(self._cleanup())
        rest = asyncio.all_tasks(loop)
        for task in rest:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
        loop.close()

    def run(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start once (idempotent); returns when listening."""
        if not (self._thread.is_alive() or self._ready.is_set()):
            self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TimeoutError(f"{self._thread.name}: did not start within {timeout_s:.0f} s")
        if self._error is not None:
            raise self._error

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._thread.is_alive() and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout_s)


def serve_until_signal(
    start: Callable[[], Awaitable[object]], cleanup: Callable[[], Awaitable[None]], started: Callable[[], None] | None = None
) -> None:
    """Block: start, call `started()`, serve until SIGINT/SIGTERM, then clean up."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):  # not the main thread
                pass
        await start()
        try:
            if started is not None:
                started()
            await stop.wait()
        finally:
            await cleanup()

    asyncio.run(main())
