"""Commit URLs (issue 16 item 6): public https only off a local chain, checked in the URL,
after DNS resolution and at connect time; one redirect policy for the miner and the validator."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import aiohttp
import pytest

from cacheon_subnet.chain.backend import Commitment
from cacheon_subnet.chain.commitment import CommitmentError, check_url, encode
from cacheon_subnet.netfetch import FetchError, FetchPolicy, download
from cacheon_subnet.netpolicy import (
    LOCAL,
    MAX_REDIRECTS,
    STRICT,
    GuardedConnector,
    GuardedResolver,
    UrlRefused,
    policy_for_backend,
)

sys.path.insert(0, str(Path(__file__).resolve().parent / "validator"))
from validator_fakes import EXAMPLES, FileServer, make_archive  # noqa: E402

# The addresses check_url accepted before (issue 16): SSRF into the operator's network.
SSRF = [
    "169.254.169.254",
    "10.0.0.1",
    "192.168.1.1",
    "[fd00::1]",
    "127.0.0.2",
    "0.0.0.0",
    "100.64.0.1",
    "224.0.0.1",
    "[::ffff:192.168.1.1]",
    "[fe80::1]",
    "240.0.0.1",
    "[fec0::1]",
]  # deprecated site-local (RFC 3879), still routed inside some networks


@pytest.mark.parametrize("host", SSRF)
def test_internal_literal_addresses_are_refused(host):
    with pytest.raises(CommitmentError) as e:
        check_url(f"https://{host}/b.tar.gz")
    assert e.value.reason == "url_address"
    if host != "127.0.0.2":  # a local chain allows loopback only, never the rest
        with pytest.raises(CommitmentError):
            check_url(f"https://{host}/b.tar.gz", LOCAL)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8787/x.tar.gz",
        "https://localhost/x",
        "https://[::1]/x",
        "https://2130706433/x",
        "https://0x7f.1/x",
        "https://intranet/x",
    ],
)
def test_loopback_and_numeric_names_are_refused_off_a_local_chain(url):
    with pytest.raises(CommitmentError):
        check_url(url)


def test_public_https_and_local_loopback_are_accepted():
    assert check_url("https://bundles.example.org/x.tar.gz") and check_url("https://8.8.8.8/x")
    assert check_url("http://127.0.0.1:8787/x.tar.gz", LOCAL)


def test_chain_decides_the_policy(tmp_path):
    from cacheon_subnet.chain import LocalChain

    assert policy_for_backend(LocalChain.create(tmp_path / "c.db", 1)) == LOCAL
    assert policy_for_backend(object()) == STRICT  # a backend that does not say: strict

    class Broken:
        def url_policy(self):
            raise RuntimeError("cannot tell")

    assert policy_for_backend(Broken()) == STRICT  # fails closed


class FakeDNS(aiohttp.abc.AbstractResolver):
    """Answers from a table; `answers[host]` is popped per query (so a name can re-bind)."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.queries: list[str] = []

    async def resolve(self, host, port=0, family=socket.AF_INET):
        self.queries.append(host)
        ip = self.answers[host].pop(0) if len(self.answers[host]) > 1 else self.answers[host][0]
        return [
            {
                "hostname": host,
                "host": ip,
                "port": port,
                "family": socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
        ]

    async def close(self):
        return None


def test_resolver_refuses_a_name_that_resolves_inside():
    dns = FakeDNS({"evil.example": ["10.0.0.7"], "good.example": ["93.184.216.34"]})
    guard = GuardedResolver(STRICT, dns)
    assert asyncio.run(guard.resolve("good.example", 443))[0]["host"] == "93.184.216.34"
    with pytest.raises(UrlRefused) as e:
        asyncio.run(guard.resolve("evil.example", 443))
    assert e.value.reason == "url_address" and "10.0.0.7" in e.value.detail


def _fetch_with(dns: FakeDNS, url: str, policy=STRICT) -> FetchError:
    async def go():
        async with aiohttp.ClientSession(connector=GuardedConnector(policy, dns)) as s:
            await download(url, Path("/dev/null"), FetchPolicy(urls=policy), s)

    with pytest.raises(FetchError) as e:
        asyncio.run(go())
    return e.value


def test_dns_rebinding_to_loopback_never_connects():
    """The name passes the URL check and resolved public once; at fetch time it resolves to the
    validator's own loopback, where a server is listening. No request may reach it."""
    with FileServer() as srv:
        srv.add("a.tar.gz", b"secret")
        dns = FakeDNS({"rebind.example": ["93.184.216.34", "127.0.0.1"]})
        asyncio.run(GuardedResolver(STRICT, dns).resolve("rebind.example"))  # the check-time answer
        err = _fetch_with(dns, f"https://rebind.example:{srv.port}/f/a.tar.gz")
        assert err.reason == "url_address" and not err.transient and "127.0.0.1" in err.detail
        assert srv.hits == []


def test_connect_time_peer_check_backs_up_the_resolver(monkeypatch):
    """If the resolver were fooled (its check bypassed here), the connected peer is checked
    before the request is written: the loopback server still sees nothing."""

    async def unchecked(self, host, port=0, family=socket.AF_INET):
        return await self.inner.resolve(host, port, family)

    monkeypatch.setattr(GuardedResolver, "resolve", unchecked)
    with FileServer() as srv:
        srv.add("a.tar.gz", b"secret")
        dns = FakeDNS({"rebind.example": ["127.0.0.1"]})
        err = _fetch_with(dns, f"https://rebind.example:{srv.port}/f/a.tar.gz")
        assert err.reason == "url_address" and "connecting to 127.0.0.1" in err.detail
        assert srv.hits == []


def test_the_connected_peer_is_checked_before_the_request_is_written(monkeypatch):
    """The last layer alone: with the resolver's and the socket factory's checks both bypassed,
    the peer of the new connection is still refused before a byte of the request is sent."""

    async def unchecked(self, host, port=0, family=socket.AF_INET):
        return await self.inner.resolve(host, port, family)

    def any_socket(self, addr_info):
        family, type_, proto, _, _address = addr_info
        return socket.socket(family=family, type=type_, proto=proto)

    monkeypatch.setattr(GuardedResolver, "resolve", unchecked)
    monkeypatch.setattr(GuardedConnector, "_socket", any_socket)

    async def get(port):  # plain http (no TLS before the check), past download's URL rules
        dns = FakeDNS({"rebind.example": ["127.0.0.1"]})
        async with aiohttp.ClientSession(connector=GuardedConnector(STRICT, dns)) as s:
            async with s.get(f"http://rebind.example:{port}/f/a.tar.gz") as r:
                return r.status

    with FileServer() as srv:
        srv.add("a.tar.gz", b"secret")
        with pytest.raises(OSError) as e:
            asyncio.run(get(srv.port))
        assert "connected peer 127.0.0.1" in str(e.value), repr(e.value)
        assert srv.hits == []


def test_one_redirect_policy_for_the_miners_probe_and_the_validators_fetch(tmp_path):
    from cacheon_subnet.miner.serve import probe
    from cacheon_subnet.validator.fetch import fetch_bundle

    archive, digest = make_archive(EXAMPLES / "norm.rmsnorm", tmp_path, "r")
    assert FetchPolicy().max_redirects == MAX_REDIRECTS
    with FileServer() as srv:
        srv.add("r.tar.gz", archive)
        ok, over = srv.url(f"redirect/{MAX_REDIRECTS}/r.tar.gz"), srv.url(f"redirect/{MAX_REDIRECTS + 1}/r.tar.gz")
        assert probe(ok, digest, urls=LOCAL).ok
        assert probe(over, digest, urls=LOCAL).reason == "redirect"
        assert asyncio.run(fetch_bundle(ok, digest, tmp_path / "c", FetchPolicy(urls=LOCAL))).is_file()
        with pytest.raises(FetchError) as e:
            asyncio.run(fetch_bundle(over, digest, tmp_path / "d", FetchPolicy(urls=LOCAL)))
        assert e.value.reason == "redirects"
        # a redirect hop to an internal address is refused like a committed one
        to_meta = srv.url("to?u=https://169.254.169.254/latest/meta-data")
        assert probe(to_meta, digest, urls=LOCAL).reason == "url"
        with pytest.raises(FetchError) as e:
            asyncio.run(fetch_bundle(to_meta, digest, tmp_path / "e", FetchPolicy(urls=LOCAL)))
        assert e.value.reason == "url_address"


def test_miner_submit_refuses_a_loopback_url_off_a_local_chain(tmp_path):
    from cacheon_subnet.miner.submit import SubmitError, submit

    with pytest.raises(SubmitError) as e:  # default --base-url is http://127.0.0.1:8787
        submit(EXAMPLES / "norm.rmsnorm", backend=object(), netuid=1, hotkey="m1", serve_dir=tmp_path)
    assert e.value.reason == "url" and "url_http_not_loopback" in str(e.value)


def test_validator_intake_refuses_loopback_commitments_off_a_local_chain(tmp_path):
    from cacheon_subnet.validator.intake import IntakePolicy, intake
    from cacheon_subnet.validator.state import StateDB

    digest = "ab" * 32
    c = Commitment("m1", 2, 5, 6, encode(digest, "m1", "http://127.0.0.1:8787/x.tar.gz", LOCAL))
    strict, local = StateDB(tmp_path / "s"), StateDB(tmp_path / "l")
    (ev,) = intake(strict, [c], IntakePolicy(), 10, STRICT)
    assert ev.outcome == "malformed" and "url_http_not_loopback" in ev.reason
    (ev,) = intake(local, [c], IntakePolicy(), 10, LOCAL)
    assert ev.outcome == "queued"
