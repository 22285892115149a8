"""Fetch (queued -> fetched/failed): download committed archives into the cache, a few at
once (validator/fetch.py does the distrustful part). A failure the miner caused (a bad archive,
a digest mismatch) is `failed`; a flaky server is retried; our own disk or descriptors are
never the miner's fault (`no_decision` after the retries)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

from cacheon_subnet.resources import describe, is_resource_error
from cacheon_subnet.validator.background import pinned
from cacheon_subnet.validator.fetch import FetchError, FetchPolicy, fetch_bundle, guarded_session
from cacheon_subnet.validator.stages.items import Items
from cacheon_subnet.validator.stages.passstate import PassState
from cacheon_subnet.validator.stages.ports import Log
from cacheon_subnet.validator.state import Contribution, StateDB

Fetcher = Callable[[str, str, Path, FetchPolicy, aiohttp.ClientSession], Awaitable[Path]]


class FetchStage:
    name = "fetch"

    def __init__(
        self,
        db: StateDB,
        items: Items,
        policy: FetchPolicy,
        cache_dir: Path,
        log: Log,
        *,
        fetcher: Fetcher | None = None,
        cpus: frozenset[int] | None = None,
        max_items: int = 16,
        concurrency: int = 4,
    ) -> None:
        self.db, self.items, self.policy, self.cache_dir, self.log = db, items, policy, cache_dir, log
        self.fetcher: Fetcher = fetcher or fetch_bundle
        self.cpus, self.max_items, self.concurrency = cpus, max_items, concurrency

    def run(self, ps: PassState) -> None:
        items = self.db.due("queued")[: self.max_items]
        if items:
            with pinned(self.cpus):  # unpacking and digesting beside a timed window: the screens' cores
                asyncio.run(self._fetch_all(ps, items))

    async def _fetch_all(self, ps: PassState, items: list[Contribution]) -> None:
        sem = asyncio.Semaphore(self.concurrency)
        async with guarded_session(self.policy) as session:

            async def one(c: Contribution) -> None:
                async with sem:
                    await self._one(ps, c, session)

            await asyncio.gather(*(one(c) for c in items))

    async def _one(self, ps: PassState, c: Contribution, session: aiohttp.ClientSession) -> None:
        self.log.info("fetch.start", contribution=c.id, url=c.url)
        try:
            path = await self.fetcher(c.url or "", c.digest or "", self.cache_dir, self.policy, session)
        except FetchError as exc:
            ps.attempted("fetch", failed=True)
            if exc.transient:  # the miner's server, or our own disk ("io": never the miner's fault)
                self.items.transient(c, "fetch", str(exc), "no_decision" if exc.reason == "io" else "failed")
            else:
                self.db.transition(c.id, "failed", f"fetch: {exc.reason}: {exc.detail}"[:2000])
                self.log.info("fetch.failed", contribution=c.id, reason=str(exc)[:300])
            return
        except Exception as exc:  # noqa: BLE001 - our side (disk, fds, a bug): not the miner's fault
            ps.attempted("fetch", failed=True)
            why = (
                f"resource exhausted on this validator: {describe(exc)}"
                if is_resource_error(exc)
                else f"{type(exc).__name__}: {exc}"
            )
            self.items.transient(c, "fetch", why, "no_decision")
            return
        ps.attempted("fetch")
        self.db.transition(
            c.id, "fetched", "archive cached, content digest matches", detail={**c.detail, "archive": path.name}
        )
        ps.advanced("fetched")
        self.log.info("fetch.ok", contribution=c.id, archive=path.name)
