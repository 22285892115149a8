"""A miner's names that never resolve cannot starve another miner's lookup, nor hold the fetch
stage's loop at its end (cacheon_subnet/dnspool.py). Red team 2026-12-05: twelve names hanging
30 s filled asyncio's default executor (6 threads here); an honest lookup queued behind them
failed, and the stage returned after 70 s."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from cacheon_subnet import dnspool

real = socket.getaddrinfo


@pytest.fixture
def hanging(monkeypatch):
    """*.hang.test lookups block until released; everything else resolves as usual."""
    release = threading.Event()

    def fake(host, *a, **kw):
        if str(host).endswith(".hang.test"):
            release.wait(30)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return real(host, *a, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    yield release
    release.set()


def attack_then_honest(resolver) -> tuple[str, float]:
    """Twelve hanging names, each given up at 0.1 s (the connect timeout's role), then an honest
    lookup; (its outcome, how long asyncio.run took to return)."""

    async def go() -> str:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(6))  # a 2-core box's default
        for i in range(12):
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(resolver.resolve(f"n{i}.hang.test", 443), 0.1)
        try:
            got = await asyncio.wait_for(resolver.resolve("localhost", 443), 3)
        except TimeoutError:
            return "starved"
        return got[0]["host"]

    t0 = time.monotonic()
    outcome = asyncio.run(go())
    return outcome, time.monotonic() - t0


def test_hanging_names_neither_starve_an_honest_lookup_nor_hold_the_loop(hanging):
    outcome, took = attack_then_honest(dnspool.PooledResolver(ThreadPoolExecutor(32)))
    assert outcome in ("127.0.0.1", "::1") and took < 5, (outcome, took)


@pytest.mark.slow
def test_control_a_pool_the_size_of_the_default_executor_is_starved(hanging):
    outcome, _ = attack_then_honest(dnspool.PooledResolver(ThreadPoolExecutor(6)))
    assert outcome == "starved"


def test_results_have_aiohttps_shape():
    async def go():
        return await dnspool.PooledResolver().resolve("127.0.0.1", 8080)

    [r] = asyncio.run(go())
    assert (r["hostname"], r["host"], r["port"], r["family"]) == ("127.0.0.1", "127.0.0.1", 8080, socket.AF_INET)
