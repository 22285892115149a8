"""fetch.py against a real loopback server: URL policy, redirects, size cap, timeouts, digests."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from validator_fakes import EXAMPLES, FileServer, make_archive

from cacheon_subnet.netpolicy import LOCAL
from cacheon_subnet.validator.fetch import FetchError, FetchPolicy, cache_path, fetch_bundle, load_cached

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def srv():
    with FileServer() as s:
        yield s


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    tmp = tmp_path_factory.mktemp("archives")
    return {
        "a": make_archive(EXAMPLES / "norm.rmsnorm", tmp, "a", {"speed.txt": "1.1"}),
        "b": make_archive(EXAMPLES / "norm.rmsnorm", tmp, "b", {"speed.txt": "1.2"}),
    }


def fetch(url: str, digest: str, cache: Path, **policy) -> Path:
    policy.setdefault("urls", LOCAL)  # the test server is on loopback (a local chain's policy)
    return asyncio.run(fetch_bundle(url, digest, cache, FetchPolicy(**policy)))


def fails(url: str, digest: str, cache: Path, **policy) -> FetchError:
    with pytest.raises(FetchError) as info:
        fetch(url, digest, cache, **policy)
    return info.value


def test_ok_is_cached_atomically_and_reused(srv, archives, tmp_path):
    archive, digest = archives["a"]
    url = srv.add("ok.tar.gz", archive)
    path = fetch(url, digest, tmp_path)
    assert path == cache_path(tmp_path, digest) and path.read_bytes() == archive.read_bytes()
    assert load_cached(tmp_path, digest).digest == digest
    assert list((tmp_path / ".tmp").iterdir()) == []  # the temp file was moved, not copied
    del srv.files["ok.tar.gz"]  # second fetch never touches the network
    assert fetch(url, digest, tmp_path) == path


def test_redirects_followed_up_to_the_limit(srv, archives, tmp_path):
    archive, digest = archives["a"]
    srv.add("r.tar.gz", archive)
    assert fetch(srv.url("redirect/3/r.tar.gz"), digest, tmp_path, max_redirects=3).is_file()
    err = fails(srv.url("redirect/4/r.tar.gz"), digest, tmp_path / "x", max_redirects=3)
    assert err.reason == "redirects" and not err.transient


def test_redirect_to_plain_http_remote_is_rejected(srv, archives, tmp_path):
    _, digest = archives["a"]
    err = fails(srv.url("to?u=http://example.com/a.tar.gz"), digest, tmp_path)
    assert err.reason == "url" and "http" in err.detail and not err.transient


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/a.tar.gz",
        "ftp://127.0.0.1/a.tar.gz",
        "https://user:pw@example.com/a.tar.gz",
        "file:///etc/passwd",
    ],
)
def test_url_policy(url, archives, tmp_path):
    err = fails(url, archives["a"][1], tmp_path)
    assert err.reason == "url" and not err.transient


def test_streaming_cap_aborts_early_without_content_length(srv, archives, tmp_path):
    err = fails(srv.url("big"), archives["a"][1], tmp_path, max_bytes=MiB)
    assert err.reason == "too_large" and not err.transient
    assert srv.big_sent < 32 * MiB  # the server was cut off, not drained (it would send 6 GiB)
    assert not cache_path(tmp_path, archives["a"][1]).exists()
    assert list((tmp_path / ".tmp").iterdir()) == []


def test_content_length_over_cap_is_refused_before_reading(srv, archives, tmp_path):
    url = srv.add("big.tar.gz", b"\0" * (2 * MiB))
    err = fails(url, archives["a"][1], tmp_path, max_bytes=MiB)
    assert err.reason == "too_large" and "Content-Length" in err.detail


def test_digest_mismatch_is_permanent_and_leaves_no_cache(srv, archives, tmp_path):
    (archive_a, _), (_, digest_b) = archives["a"], archives["b"]
    url = srv.add("a-claims-b.tar.gz", archive_a)
    err = fails(url, digest_b, tmp_path)
    assert err.reason == "digest_mismatch" and not err.transient
    assert not cache_path(tmp_path, digest_b).exists() and list((tmp_path / ".tmp").iterdir()) == []


def test_not_a_bundle_is_permanent(srv, archives, tmp_path):
    err = fails(srv.add("junk.tar.gz", b"not gzip at all"), archives["a"][1], tmp_path)
    assert err.reason == "bundle_invalid" and not err.transient


def test_total_timeout_is_transient(srv, archives, tmp_path):
    err = fails(srv.url("slow"), archives["a"][1], tmp_path, total_timeout_s=0.5)
    assert err.reason == "timeout" and err.transient


@pytest.mark.parametrize("code,transient", [(404, False), (403, False), (503, True), (429, True)])
def test_http_status_classification(srv, archives, tmp_path, code, transient):
    err = fails(srv.url(f"status/{code}"), archives["a"][1], tmp_path)
    assert err.reason == "http_status" and err.transient is transient


def test_connection_refused_is_transient(archives, tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    err = fails(f"http://127.0.0.1:{port}/a.tar.gz", archives["a"][1], tmp_path, connect_timeout_s=2)
    assert err.reason == "connect" and err.transient
