"""The miner's archive server serves only <digest>.tar.gz, streams it exactly, and nothing else;
`probe` fetches a URL the way a validator would and names what is wrong."""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import os
import socket
from pathlib import Path

import pytest
from aiohttp import web
from conftest import EXAMPLES

from cacheon_subnet.bundle import pack
from cacheon_subnet.miner.serve import (
    BundleServer,
    ServeError,
    aprobe,
    archive_name,
    probe,
    start_in_thread,
)
from cacheon_subnet.netpolicy import LOCAL

DIGEST_LIKE = "ab" * 32


@pytest.fixture
def served(tmp_path: Path):
    """A serve dir holding the packed norm.rmsnorm example (+ a secret next to and above it)."""
    root = tmp_path / "serve"
    root.mkdir()
    tmp = tmp_path / "x.tar.gz"
    bundle = pack(EXAMPLES / "norm.rmsnorm", tmp)
    archive = root / archive_name(bundle.digest)
    tmp.rename(archive)
    (root / "secret.txt").write_text("do not serve")
    (tmp_path / "outside.txt").write_text("top secret")
    srv = start_in_thread(root)
    yield srv, root, bundle.digest, archive
    srv.stop()


def request(srv, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.server.port, timeout=10)
    conn.request(method, path)
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body


def test_get_serves_the_packed_archive_exactly(served) -> None:
    srv, _, digest, archive = served
    status, headers, body = request(srv, "GET", f"/{digest}.tar.gz")
    assert status == 200
    assert body == archive.read_bytes()
    assert headers["content-length"] == str(archive.stat().st_size)
    assert headers["content-type"] == "application/gzip"
    assert "content-encoding" not in headers  # clients must not unzip it
    assert srv.url_for(digest) == f"{srv.base_url}/{digest}.tar.gz"


def test_head_gives_length_without_body(served) -> None:
    srv, _, digest, archive = served
    status, headers, body = request(srv, "HEAD", f"/{digest}.tar.gz")
    assert status == 200 and body == b""
    assert headers["content-length"] == str(archive.stat().st_size)


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/secret.txt",
        "/../outside.txt",
        "/..%2Foutside.txt",
        "/%2e%2e/outside.txt",
        "/%2e%2e%2foutside.txt",
        f"/{DIGEST_LIKE.upper()}.tar.gz",
        f"/{DIGEST_LIKE}.tgz",
        f"/{DIGEST_LIKE}.tar.gz.part",
        f"/sub/{DIGEST_LIKE}.tar.gz",
        f"/{DIGEST_LIKE}.tar.gz/",
        "//etc/passwd",
        "/%00",
        f"/{DIGEST_LIKE}.tar.gz",  # last: well-formed but absent
    ],
)
def test_everything_else_is_404_without_listing(served, path: str) -> None:
    srv, _, digest, _ = served
    status, _, body = request(srv, "GET", path)
    assert status == 404, path
    assert b"secret" not in body and digest.encode() not in body


def test_symlink_or_directory_named_like_an_archive_is_not_served(served) -> None:
    srv, root, _, _ = served
    link = "cd" * 32
    os.symlink(root.parent / "outside.txt", root / archive_name(link))
    d = "ef" * 32
    (root / archive_name(d)).mkdir()
    assert request(srv, "GET", f"/{link}.tar.gz")[0] == 404
    assert request(srv, "GET", f"/{d}.tar.gz")[0] == 404


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_only_get_and_head(served, method: str) -> None:
    srv, _, digest, archive = served
    status, headers, _ = request(srv, method, f"/{digest}.tar.gz")
    assert status == 405 and headers["allow"] == "GET, HEAD"
    assert archive.exists()


def test_large_file_is_streamed_whole(tmp_path: Path) -> None:
    data = os.urandom(24 * 1024 * 1024 + 123)  # many chunks, not a multiple of the chunk size
    name = archive_name(hashlib.sha256(data).hexdigest())
    (tmp_path / name).write_bytes(data)
    with start_in_thread(tmp_path) as srv:
        conn = http.client.HTTPConnection("127.0.0.1", srv.server.port, timeout=30)
        conn.request("GET", f"/{name}")
        resp = conn.getresponse()
        assert resp.status == 200 and int(resp.getheader("Content-Length")) == len(data)
        h, n = hashlib.sha256(), 0
        while chunk := resp.read(1 << 20):
            h.update(chunk)
            n += len(chunk)
        conn.close()
    assert n == len(data) and h.hexdigest() == hashlib.sha256(data).hexdigest()


def test_busy_port_and_missing_dir_are_specific_errors(tmp_path: Path) -> None:
    with pytest.raises(ServeError, match="does not exist"):
        start_in_thread(tmp_path / "nope")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(ServeError, match="cannot listen"):
            start_in_thread(tmp_path, port=s.getsockname()[1])


def test_in_process_async_server_and_probe(served) -> None:
    _, root, digest, _ = served

    async def main() -> tuple:
        async with BundleServer(root, port=0) as srv:
            assert srv.port != 0
            good = await aprobe(srv.url_for(digest), digest, urls=LOCAL)
            wrong = await aprobe(srv.url_for(digest), DIGEST_LIKE, urls=LOCAL)
            missing = await aprobe(srv.url_for(DIGEST_LIKE), DIGEST_LIKE, urls=LOCAL)
            url = srv.url_for(digest)
        gone = await aprobe(url, digest, timeout_s=5, urls=LOCAL)
        return good, wrong, missing, gone

    good, wrong, missing, gone = asyncio.run(main())
    assert good.ok and good.digest == digest and good.reason == "ok"
    assert not wrong.ok and wrong.reason == "digest_mismatch" and wrong.digest == digest
    assert missing.reason == "http_status" and missing.http_status == 404
    assert gone.reason == "unreachable"


def test_probe_flags_bad_archives_redirects_and_content_encoding(tmp_path: Path) -> None:
    (tmp_path / archive_name(DIGEST_LIKE)).write_bytes(b"not a tarball")

    async def redirect(_: web.Request) -> web.Response:
        raise web.HTTPFound("/elsewhere")

    async def encoded(_: web.Request) -> web.Response:
        return web.Response(body=b"\x1f\x8b...", headers={"Content-Encoding": "gzip"})

    async def main() -> tuple:
        app = web.Application()
        app.router.add_get("/r", redirect)
        app.router.add_get("/e", encoded)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            r = await aprobe(f"http://127.0.0.1:{port}/r", DIGEST_LIKE, urls=LOCAL)
            e = await aprobe(f"http://127.0.0.1:{port}/e", DIGEST_LIKE, urls=LOCAL)
            strict = await aprobe(f"http://127.0.0.1:{port}/r", DIGEST_LIKE)
        finally:
            await runner.cleanup()
        return r, e, strict

    r, e, strict = asyncio.run(main())
    # the probe follows redirects exactly like a validator's fetch (same code): /r -> /elsewhere 404
    assert r.reason == "http_status" and r.http_status == 404 and "/elsewhere" in r.detail
    assert strict.reason == "url" and "http" in strict.detail  # loopback is refused off a local chain
    assert e.reason == "content_encoding"
    with start_in_thread(tmp_path) as srv:
        bad = probe(srv.url_for(DIGEST_LIKE), DIGEST_LIKE, urls=LOCAL)
        small = probe(srv.url_for(DIGEST_LIKE), DIGEST_LIKE, max_bytes=4, urls=LOCAL)
    assert bad.reason == "not_bundle" and "archive-corrupt" in bad.detail
    assert small.reason == "too_large"
