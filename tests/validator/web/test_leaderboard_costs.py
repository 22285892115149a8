"""The page's budget is priced by what a request costs and shared by a network, and a health check
never queues behind list pages. Red team 2026-12-05: eight addresses of one /24, each under its own
rate limit, held every reader at 12-15 s by asking for 500-row pages (0.27 s of CPU each)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request
from board_fixtures import make_state

from cacheon_subnet.validator.web.ratelimit import ClientBuckets, TokenBuckets
from cacheon_subnet.validator.web.server import make_app, request_cost


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> Path:
    return make_state(tmp_path_factory.mktemp("board"))


def statuses(state_dir: Path, paths: list[str], buckets: ClientBuckets | TokenBuckets) -> list[int]:
    async def go() -> list[int]:
        async with TestClient(TestServer(make_app(state_dir, buckets))) as client:
            return [(await client.get(p)).status for p in paths]

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("path", "cost"),
    [
        ("/api/health", 1.0),
        ("/api/crowns", 1.0),
        ("/api/contributions", 3.0),  # the default 100 rows
        ("/api/contributions?limit=500", 11.0),
        ("/?limit=500", 11.0),
        ("/api/contributions?limit=%C2%B2", 1.0),  # malformed: refused before any read
        ("/api/contributions?limit=501", 1.0),
        ("/contributions/" + "a" * 64, 2.0),
    ],
)
def test_a_request_costs_what_it_makes_the_server_read(path: str, cost: float) -> None:
    assert request_cost(make_mocked_request("GET", path)) == cost


def test_a_big_page_spends_its_rows_and_a_health_check_one_token(state: Path) -> None:
    slow = dict(rate=0.001, burst=20.0)
    assert statuses(state, ["/api/contributions?limit=500"] * 2, TokenBuckets(**slow)) == [200, 429]
    assert statuses(state, ["/api/health"] * 20, TokenBuckets(**slow)) == [200] * 20


def test_the_addresses_of_one_network_share_its_budget() -> None:
    now = [0.0]
    clock = lambda: now[0]  # noqa: E731
    cb = ClientBuckets(TokenBuckets(rate=1.0, burst=20, clock=clock), TokenBuckets(rate=1.0, burst=30, clock=clock))
    assert [cb.take(f"203.0.113.{i}", 10) for i in (1, 2, 3)] == [0.0, 0.0, 0.0]
    assert cb.take("203.0.113.4", 10) == pytest.approx(10.0)  # the /24 spent its 30
    assert cb.take("198.51.100.7", 10) == 0.0  # another network has its own
    assert cb.per_client.wait("203.0.113.4", 20) == 0.0  # a refused request spent nothing of its own
    v6 = ClientBuckets(TokenBuckets(rate=1.0, burst=20, clock=clock), TokenBuckets(rate=1.0, burst=30, clock=clock))
    assert [v6.take(f"2001:db8:0:{i}::/64", 15) for i in (1, 2, 3)][2] > 0  # /64s of one /48
    alone = ClientBuckets(TokenBuckets(rate=1.0, burst=20, clock=clock), None)  # control: no network bucket
    assert [alone.take(f"203.0.113.{i}", 10) for i in (1, 2, 3, 4)] == [0.0] * 4


def test_unicode_digits_in_a_query_are_a_400_not_a_500(state: Path) -> None:
    got = statuses(state, ["/api/contributions?limit=²", "/?offset=¹", "/api/contributions?limit=7"], TokenBuckets())
    assert got == [400, 400, 200]


def test_a_health_check_is_answered_while_every_page_reader_is_busy(state: Path) -> None:
    release = threading.Event()

    async def go() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        pages = ThreadPoolExecutor(2, thread_name_prefix="pages")
        loop.set_default_executor(pages)
        busy = [loop.run_in_executor(None, release.wait, 30) for _ in range(2)]  # list pages in flight
        try:
            async with TestClient(TestServer(make_app(state, TokenBuckets()))) as client:
                health = await asyncio.wait_for(client.get("/api/health"), 10)
                crowns = await asyncio.wait_for(client.get("/api/crowns"), 10)
                return health.status, crowns.status
        finally:
            release.set()
            await asyncio.gather(*busy)

    assert asyncio.run(go()) == (200, 200)
