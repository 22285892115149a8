"""Self-hosting a miner's bundle archives: a tiny static server that serves only `<digest>.tar.gz`.

Validators fetch the URL a miner commits. The server exposes nothing else from the directory:
no listing, no other names (a strict regex, so traversal cannot even be spelled), no symlinks
(opened with O_NOFOLLOW), GET and HEAD only. Archives are streamed in chunks with an exact
Content-Length and `application/gzip` without Content-Encoding, so HTTP clients never unzip
the bytes whose digest a validator checks.

The listener is public (validators fetch from anywhere), so it runs under connection bounds
(cacheon_subnet.connguard: `LIMITS`, tunable through CACHEON_SERVE_* variables): 256
connections, 16 per client address, 10 s for a request head or an idle keep-alive, 120 s per
connection (a 64 MiB archive at validator speeds takes seconds; a reader that stalls is cut),
512 KiB of kernel send buffer per connection (5 MB/s at 100 ms round trip), bounded request
line and headers, accept errors logged as counts.

In process: `async with BundleServer(dir, port=0) as srv: srv.url_for(digest)`; from sync code
(tests, the demo): `start_in_thread(dir)`; blocking: `serve_forever(dir, host, port)`.
`probe(url, digest)` is the client side: fetch a URL with the validator's own download code
(same URL policy and redirect budget) and say whether its bytes unpack to the expected digest.
"""

from __future__ import annotations

import asyncio
import os
import re
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import hdrs, web

from cacheon_subnet import httpsite
from cacheon_subnet.connguard import Limits, Tally
from cacheon_subnet.env import SERVE
from cacheon_subnet.errors import CacheonError
from cacheon_subnet.log import get_logger
from cacheon_subnet.netpolicy import STRICT, UrlPolicy

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787
CHUNK = 256 * 1024
ARCHIVE_NAME = re.compile(r"[0-9a-f]{64}\.tar\.gz")
CONTENT_TYPE = "application/gzip"
LIMITS = Limits(
    max_conns=256, max_conns_per_ip=16, header_timeout_s=10.0, max_conn_s=120.0, sndbuf=512 << 10, max_buffered=128 << 20
)
ENV_PREFIX = SERVE.prefix
SENT_LOG_EVERY_S = 10.0  # `serve.sent` at most once per this many seconds, with the count since

log = get_logger("cacheon.miner.serve")


class ServeError(CacheonError):
    """The server could not start (bad directory, port in use, ...)."""


def archive_name(digest: str) -> str:
    """File name (and URL path) of a bundle archive: the content digest names it."""
    name = f"{digest}.tar.gz"
    if not ARCHIVE_NAME.fullmatch(name):
        raise ValueError(f"not a 64-hex lowercase digest: {digest!r}")
    return name


def base_url(host: str, port: int) -> str:
    """http://host:port, bracketing IPv6 literals."""
    return httpsite.http_url(host, port)


def _open_archive(directory: Path, name: str) -> tuple[int, int] | None:
    """(fd, size) of a regular, non-symlink archive called `name` in `directory`, else None."""
    if not ARCHIVE_NAME.fullmatch(name):
        return None
    try:
        fd = os.open(directory / name, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:  # missing, a symlink (ELOOP), unreadable
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, st.st_size


def make_app(directory: str | os.PathLike[str]) -> web.Application:
    """The aiohttp application serving `directory` (must exist)."""
    root = Path(directory).resolve()
    if not root.is_dir():
        raise ServeError(f"serve directory {root} does not exist or is not a directory")
    # a line per answer was a log flood: 16 keep-alive connections pipelining HEADs of one archive
    # wrote 13 000 lines (3 MB) a second into the miner's log (red team 2026-12-04)
    sent_log = Tally(log.info, "serve.sent", SENT_LOG_EVERY_S)

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.method not in (hdrs.METH_GET, hdrs.METH_HEAD):
            return _plain(405, "method not allowed: GET or HEAD only", {"Allow": "GET, HEAD"})
        # match_info is the decoded path; one segment that must be a digest archive name.
        name = request.match_info.get("name", "")
        opened = _open_archive(root, name)
        if opened is None:
            log.debug("serve.miss", path=request.path, peer=request.remote)
            return _plain(404, "not found")
        fd, size = opened
        with os.fdopen(fd, "rb") as f:
            resp = web.StreamResponse(
                status=200,
                headers={
                    hdrs.CONTENT_TYPE: CONTENT_TYPE,
                    hdrs.CACHE_CONTROL: "no-cache",
                    "X-Content-Type-Options": "nosniff",
                },
            )
            resp.content_length = size
            await resp.prepare(request)
            sent = 0
            if request.method == hdrs.METH_GET:
                loop = asyncio.get_running_loop()
                while sent < size:
                    chunk = await loop.run_in_executor(None, f.read, min(CHUNK, size - sent))
                    if not chunk:  # file shrank under us: the client sees a short body
                        break
                    await resp.write(chunk)
                    sent += len(chunk)
            await resp.write_eof()
        sent_log.note(name=name, method=request.method, bytes=sent, size=size, peer=request.remote)
        return resp

    app = web.Application()
    app.router.add_route("*", "/{name}", handle)
    app.router.add_route("*", "/{tail:.*}", _not_found)  # "/", nested paths: nothing to see
    return app


async def _not_found(request: web.Request) -> web.StreamResponse:
    if request.method not in (hdrs.METH_GET, hdrs.METH_HEAD):
        return _plain(405, "method not allowed: GET or HEAD only", {"Allow": "GET, HEAD"})
    return _plain(404, "not found")


def _plain(status: int, text: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, text=text + "\n", headers=headers)


class BundleServer:
    """An aiohttp site bound to host:port (port 0 picks a free one) serving `directory`."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        limits: Limits | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.host = host
        self.port = port  # the real port once started
        self.limits = limits
        self._site: httpsite.BoundSite | None = None

    async def start(self) -> str:
        """Bind and start serving; returns the base URL (with the real port)."""
        app = make_app(self.directory)
        try:
            limits = self.limits or Limits.from_env(ENV_PREFIX, LIMITS)
            self._site = await httpsite.bind(app, self.host, self.port, limits, log)
        except ValueError as exc:
            raise ServeError(f"connection limits: {exc}") from exc
        except OSError as exc:
            raise ServeError(f"cannot listen on {self.host}:{self.port}: {exc}") from exc
        self.port = self._site.port
        log.info(
            "serve.start",
            dir=str(self.directory),
            url=self.base_url,
            max_conns=limits.max_conns,
            max_conns_per_ip=limits.max_conns_per_ip,
        )
        return self.base_url

    async def stop(self) -> None:
        if self._site is not None:
            await self._site.close()
            self._site = None
            log.info("serve.stop", url=self.base_url)

    @property
    def base_url(self) -> str:
        return base_url(self.host, self.port)

    def url_for(self, digest: str) -> str:
        return f"{self.base_url}/{archive_name(digest)}"

    async def __aenter__(self) -> BundleServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()


class ThreadedServer:
    """A BundleServer running on its own event loop in a daemon thread (for sync callers)."""

    def __init__(self, directory: str | os.PathLike[str], host: str = DEFAULT_HOST, port: int = 0) -> None:
        self.server = BundleServer(Path(directory), host, port)
        self._thread = httpsite.LoopThread("cacheon-serve", self.server.start, self.server.stop)

    def start(self) -> ThreadedServer:
        """Start once (idempotent: `with start_in_thread(d) as srv:` works too)."""
        try:
            self._thread.run()
        except TimeoutError as exc:
            raise ServeError(str(exc)) from exc
        return self

    def stop(self) -> None:
        self._thread.stop()

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def url_for(self, digest: str) -> str:
        return self.server.url_for(digest)

    def __enter__(self) -> ThreadedServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start_in_thread(directory: str | os.PathLike[str], host: str = DEFAULT_HOST, port: int = 0) -> ThreadedServer:
    """Serve `directory` from a background thread; call `.stop()` when done."""
    return ThreadedServer(directory, host, port).start()


def serve_forever(directory: str | os.PathLike[str], host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
    """Block serving `directory` until SIGINT/SIGTERM (the soft fd limit raised to the hard one first)."""
    from cacheon_subnet import fdbudget

    fdbudget.log_budget(log, "serve.nofile")
    server = BundleServer(Path(directory), host, port)
    httpsite.serve_until_signal(server.start, server.stop)


# -- client side: what a validator would get from a URL --------------------------------------

PROBE_REASONS = (
    "ok",
    "url",
    "unreachable",
    "timeout",
    "redirect",
    "http_status",
    "content_encoding",
    "too_large",
    "not_bundle",
    "digest_mismatch",
)
_PROBE_REASON = {
    "url": "url",
    "url_address": "url",
    "redirects": "redirect",
    "http_status": "http_status",
    "content_encoding": "content_encoding",
    "too_large": "too_large",
    "timeout": "timeout",
    "connect": "unreachable",
    "io": "unreachable",
}


@dataclass(frozen=True)
class Probe:
    """One fetch of `url`. `reason` is one of PROBE_REASONS; `digest` is the content digest."""

    url: str
    ok: bool
    reason: str
    detail: str
    http_status: int | None = None
    size: int | None = None
    sha256: str | None = None
    digest: str | None = None


async def aprobe(
    url: str,
    expected_digest: str | None = None,
    *,
    timeout_s: float = 60.0,
    max_bytes: int | None = None,
    urls: UrlPolicy = STRICT,
) -> Probe:
    """Fetch `url` with the validator's own download (cacheon_subnet.netfetch: same URL and
    address policy, same redirect budget, no Content-Encoding) and digest what arrives."""
    import hashlib
    import tempfile

    from cacheon_subnet.bundle import load_bundle
    from cacheon_subnet.errors import BundleError
    from cacheon_subnet.netfetch import FetchError, FetchPolicy, download

    policy = FetchPolicy(total_timeout_s=timeout_s, urls=urls, **({} if max_bytes is None else {"max_bytes": max_bytes}))

    def fail(reason: str, detail: str, **kw: Any) -> Probe:
        return Probe(url, False, reason, detail, **kw)

    with tempfile.TemporaryDirectory(prefix="cacheon-probe-") as tmp:
        path = Path(tmp) / "fetched.tar.gz"
        try:
            size = await download(url, path, policy)
        except FetchError as exc:
            return fail(_PROBE_REASON.get(exc.reason, "unreachable"), exc.detail, http_status=exc.status)
        data = path.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        try:
            digest = load_bundle(path).digest
        except BundleError as exc:
            return fail(
                "not_bundle", f"served bytes are not a valid bundle archive: {exc}", http_status=200, size=size, sha256=sha
            )
    if expected_digest is not None and digest != expected_digest:
        return fail(
            "digest_mismatch",
            f"serves content digest {digest}, expected {expected_digest}",
            http_status=200,
            size=size,
            sha256=sha,
            digest=digest,
        )
    return Probe(url, True, "ok", f"{size} bytes, content digest {digest}", 200, size, sha, digest)


def probe(
    url: str,
    expected_digest: str | None = None,
    *,
    timeout_s: float = 60.0,
    max_bytes: int | None = None,
    urls: UrlPolicy = STRICT,
) -> Probe:
    """Blocking `aprobe`; safe to call from a thread that already runs an event loop."""

    def run() -> Probe:
        return asyncio.run(aprobe(url, expected_digest, timeout_s=timeout_s, max_bytes=max_bytes, urls=urls))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run()
    out: list[Probe] = []
    t = threading.Thread(target=lambda: out.append(run()))
    t.start()
    t.join()
    if not out:
        raise ServeError(f"probe of {url} failed without a result")
    return out[0]
