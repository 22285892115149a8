"""The leaderboard's aiohttp app: GET/HEAD only, rate-limited per client IP and per network by
what each request costs, strict headers.

The validator serves it from its own process and uid (supervisor.py, child.py) over a snapshot
of its state; `Leaderboard` below runs it in the calling process (tests, embedding). Either
way the connection bounds of cacheon_subnet.connguard apply (`LIMITS`, tunable through
CACHEON_WEB_* variables).

Routes: `/` (crowns + contributions page), `/contributions/<id>` (verdicts, full reasons,
per-window plots), and the JSON API of cacheon_subnet.webapi: `/api/health`, `/api/crowns`,
`/api/contributions` (?hotkey=&state=&limit=&offset=), `/api/contributions/<id>`.

Why these headers: every string a miner controls is escaped (page.py); the Content-Security-
Policy (no script at all, nothing from elsewhere) is a second wall should escaping ever miss.
The client IP is the TCP peer (`request.remote`); forwarded-for headers are not trusted, so
behind a reverse proxy every client shares the proxy's bucket (rate-limit at the proxy then).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from aiohttp import web

from cacheon_subnet import httpsite
from cacheon_subnet.connguard import Limits, client_key
from cacheon_subnet.env import WEB
from cacheon_subnet.errors import CacheonError
from cacheon_subnet.log import get_logger
from cacheon_subnet.validator.web import data, page
from cacheon_subnet.validator.web.ratelimit import ClientBuckets, TokenBuckets
from cacheon_subnet.webapi import MAX_PAGE, PATH_CONTRIBUTIONS, PATH_CROWNS, PATH_HEALTH, SCHEMA

log = get_logger("cacheon.validator.web")
DEFAULT_LISTEN = "127.0.0.1:8090"
LIMITS = Limits()  # 512 connections, 16 per client, 10 s for a request head or an idle keep-alive, 60 s a connection
ENV_PREFIX = WEB.prefix  # CACHEON_WEB_MAX_CONNS=..., CACHEON_WEB_HEADER_TIMEOUT_S=..., every Limits field
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SOURCE: web.AppKey[data.Source] = web.AppKey("source", data.Source)
BUCKETS: web.AppKey[ClientBuckets] = web.AppKey("buckets", ClientBuckets)
LIGHT: web.AppKey[ThreadPoolExecutor] = web.AppKey("light", ThreadPoolExecutor)
ROWS_A_TOKEN = 50  # a list page costs 1 + limit // ROWS_A_TOKEN tokens (the default 100 rows: 3)
_dumps = partial(json.dumps, allow_nan=False, sort_keys=True)


class LeaderboardError(CacheonError):
    """The server could not start (bad listen address, port in use)."""


def _json(doc: Any, status: int = 200) -> web.Response:
    return web.json_response(doc, status=status, dumps=_dumps)


def _error(status: int, message: str, html: bool) -> web.Response:
    if html:
        return web.Response(status=status, text=f"{status}: {message}\n", content_type="text/plain")
    return _json({"schema": SCHEMA, "error": message}, status)


def request_cost(request: web.Request) -> float:
    """The tokens a request spends: what it makes the server read and render. A list page (the
    index, /api/contributions) grows with its rows; one contribution decodes its plot figures;
    the rest are a few rows. A malformed query costs 1 (it is refused before any read)."""
    path = request.path
    if path in ("/", PATH_CONTRIBUTIONS):
        raw = request.query.get("limit", "100")
        return 1.0 + (int(raw) // ROWS_A_TOKEN if _is_int(raw) and int(raw) <= MAX_PAGE else 0)
    if path.startswith(("/contributions/", PATH_CONTRIBUTIONS + "/")):
        return 2.0
    return 1.0


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Rate limit first (a 429 costs no DB read), then the handler, then the headers."""
    html = not request.path.startswith("/api/")
    wait = request.app[BUCKETS].take(client_key(request.remote or "?"), request_cost(request))
    if wait > 0:
        resp: web.StreamResponse = _error(429, "too many requests from this address; slow down", html)
        resp.headers["Retry-After"] = str(max(1, int(wait + 0.999)))
    else:
        try:
            resp = await handler(request)
        except web.HTTPException as exc:
            resp = _error(exc.status, exc.reason, html)
            if exc.status == 405:
                resp.headers["Allow"] = "GET, HEAD"
        except CacheonError as exc:  # no state yet, or a schema this code does not read
            resp = _error(503, str(exc), html)
        except Exception as exc:  # noqa: BLE001 - a bug: log it, tell the client nothing internal
            log.error("web.error", path=request.path, error=f"{type(exc).__name__}: {exc}")
            resp = _error(500, "internal error", html)
    resp.headers.update(HEADERS)
    return resp


async def _read(request: web.Request, fn: Callable[..., Any], *args: Any, light: bool = False, **kw: Any) -> Any:
    """SQLite reads run in an executor: a slow disk never stalls the event loop. The light reads
    (health, crowns: a few rows) have a thread of their own, so a monitor's health check never
    queues behind list pages."""
    executor = request.app[LIGHT] if light else None
    return await asyncio.get_running_loop().run_in_executor(executor, partial(fn, request.app[SOURCE], *args, **kw))


def _is_int(raw: str) -> bool:
    """ASCII digits only: `str.isdigit` takes '²', which int() refuses (a 500, red team 2026-12-05)."""
    return raw.isascii() and raw.isdigit() and len(raw) <= 12


def _int(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    if not _is_int(raw) or not lo <= int(raw) <= hi:
        raise web.HTTPBadRequest(reason=f"query {name}={raw[:40]!r}: expected an integer in {lo}..{hi}")
    return int(raw)


def _page_args(request: web.Request) -> dict[str, Any]:
    state = request.query.get("state")
    if state is not None and state not in data.STATES:
        raise web.HTTPBadRequest(reason=f"query state={state[:40]!r}: expected one of {', '.join(data.STATES)}")
    hotkey = request.query.get("hotkey")
    if hotkey is not None and not 0 < len(hotkey) <= 128:
        raise web.HTTPBadRequest(reason="query hotkey: 1..128 characters")
    return {
        "hotkey": hotkey,
        "state": state,
        "limit": _int(request, "limit", 100, 1, MAX_PAGE),
        "offset": _int(request, "offset", 0, 0, 10**9),
    }


def _cid(request: web.Request) -> str:
    cid = request.match_info["cid"]
    if not data.CONTRIBUTION_ID.fullmatch(cid):
        raise web.HTTPNotFound(reason="no such contribution (ids are hex digests or malformed:<hex>)")
    return cid


async def api_health(request: web.Request) -> web.Response:
    return _json(await _read(request, data.health, light=True))


async def api_crowns(request: web.Request) -> web.Response:
    return _json(await _read(request, data.crowns, light=True))


async def api_contributions(request: web.Request) -> web.Response:
    return _json(await _read(request, data.contributions, **_page_args(request)))


async def api_contribution(request: web.Request) -> web.Response:
    doc = await _read(request, data.contribution, _cid(request))
    if doc is None:
        raise web.HTTPNotFound(reason="no such contribution")
    return _json(doc)


async def html_index(request: web.Request) -> web.Response:
    crowns = await _read(request, data.crowns)
    contribs = await _read(request, data.contributions, **_page_args(request))
    return web.Response(text=page.index(crowns, contribs, SCHEMA), content_type="text/html", charset="utf-8")


async def html_contribution(request: web.Request) -> web.Response:
    doc = await _read(request, data.contribution, _cid(request))
    if doc is None:
        raise web.HTTPNotFound(reason="no such contribution")
    return web.Response(text=page.detail(doc, SCHEMA), content_type="text/html", charset="utf-8")


async def _not_found(request: web.Request) -> web.Response:
    if request.method not in ("GET", "HEAD"):
        raise web.HTTPMethodNotAllowed(request.method, ["GET", "HEAD"])
    raise web.HTTPNotFound(reason="not found")


def make_app(
    state_dir: str | Path, buckets: ClientBuckets | TokenBuckets | None = None, *, snapshot: bool = False
) -> web.Application:
    """The app over one state dir, or (snapshot=True) a snapshot dir; either need not hold a DB
    yet: requests answer 503 until it does. `buckets`: a bare TokenBuckets limits per client only."""
    app = web.Application(middlewares=[guard], client_max_size=1024)
    app[SOURCE] = data.Source(Path(state_dir), snapshot)
    if isinstance(buckets, TokenBuckets):
        buckets = ClientBuckets(buckets, None)
    app[BUCKETS] = buckets if buckets is not None else ClientBuckets()  # (an empty table is falsy: len 0)
    app[LIGHT] = ThreadPoolExecutor(1, thread_name_prefix="board-light")

    async def _close_light(app: web.Application) -> None:
        app[LIGHT].shutdown(wait=False, cancel_futures=True)

    app.on_cleanup.append(_close_light)
    for path, fn in (
        ("/", html_index),
        ("/contributions/{cid}", html_contribution),
        (PATH_HEALTH, api_health),
        (PATH_CROWNS, api_crowns),
        (PATH_CONTRIBUTIONS, api_contributions),
        (PATH_CONTRIBUTIONS + "/{cid}", api_contribution),
    ):
        app.router.add_get(path, fn)  # GET and HEAD
    app.router.add_route("*", "/{tail:.*}", _not_found)
    return app


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT ([v6]:PORT for IPv6); a clear error naming the flag value otherwise."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not _is_int(port) or not 0 <= int(port) < 65536:
        raise LeaderboardError(f"listen address {text!r}: expected HOST:PORT (e.g. {DEFAULT_LISTEN}, [::1]:8090)")
    return host, int(port)


class Leaderboard:
    """The app bound to host:port on its own event loop in a daemon thread of the calling process
    (tests, embedding). The validator and `cacheon leaderboard` do not use it: their page runs in
    a process and uid of its own (supervisor.WebSupervisor)."""

    def __init__(
        self,
        state_dir: str | Path,
        host: str,
        port: int,
        buckets: ClientBuckets | TokenBuckets | None = None,
        limits: Limits = LIMITS,
    ) -> None:
        self.state_dir, self.host, self.port = Path(state_dir), host, port
        self.buckets, self.limits = buckets, limits
        self._site: httpsite.BoundSite | None = None
        self._thread: httpsite.LoopThread | None = None

    async def start_async(self) -> str:
        try:
            self._site = await httpsite.bind(make_app(self.state_dir, self.buckets), self.host, self.port, self.limits, log)
        except OSError as exc:
            raise LeaderboardError(f"leaderboard: cannot listen on {self.host}:{self.port}: {exc}") from exc
        self.port = self._site.port
        log.info("web.start", url=self.url, state_dir=str(self.state_dir))
        return self.url

    async def stop_async(self) -> None:
        if self._site is not None:
            await self._site.close()
            self._site = None

    @property
    def url(self) -> str:
        return httpsite.http_url(self.host, self.port)

    def start(self) -> Leaderboard:
        """Serve from a daemon thread; returns once listening (or raises why not)."""
        self._thread = httpsite.LoopThread("cacheon-leaderboard", self.start_async, self.stop_async)
        try:
            self._thread.run()
        except TimeoutError as exc:
            raise LeaderboardError(f"leaderboard: {exc}") from exc
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.stop()

    def __enter__(self) -> Leaderboard:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
