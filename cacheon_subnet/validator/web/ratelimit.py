"""Per-client token buckets: each client IP may spend `burst` tokens at once and `rate` per
second after that; a request costs what it makes the server do (server.request_cost), so a
500-row page is not priced like a health check. The table is bounded (least recently seen
clients are dropped first), so a flood of distinct source addresses costs memory up to
`max_clients` entries, never more.

`ClientBuckets` adds a bucket per network (an IPv4 /24, an IPv6 /48: connguard.client_group,
what one subscriber or tunnel is handed), so the addresses of one network share one budget as
they share one eviction group: a red team on 2026-12-05 held the page at 12-15 s a read from
eight addresses of one /24, each under its own limit.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from cacheon_subnet.connguard import client_group


@dataclass
class TokenBuckets:
    rate: float = 2.0  # tokens per second
    burst: float = 20.0
    max_clients: int = 10_000
    clock: Callable[[], float] = time.monotonic
    _buckets: OrderedDict[str, tuple[float, float]] = field(default_factory=OrderedDict, repr=False)

    def __post_init__(self) -> None:
        if not (self.rate > 0 and self.burst >= 1 and self.max_clients >= 1):
            raise ValueError(f"rate {self.rate} must be > 0, burst {self.burst} >= 1, max_clients {self.max_clients} >= 1")

    def take(self, client: str, cost: float = 1.0) -> float:
        """0.0 when the request may go ahead (`cost` tokens are spent, at most `burst`), else the
        seconds until they are free (nothing is spent)."""
        return self._settle(client, cost, spend=True)

    def wait(self, client: str, cost: float = 1.0) -> float:
        """What `take` would answer, spending nothing."""
        return self._settle(client, cost, spend=False)

    def _settle(self, client: str, cost: float, spend: bool) -> float:
        need = min(max(cost, 0.0), self.burst)
        now = self.clock()
        tokens, last = self._buckets.pop(client, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        wait = 0.0
        if tokens >= need:
            tokens -= need if spend else 0.0
        else:
            wait = (need - tokens) / self.rate
        self._buckets[client] = (tokens, now)
        while len(self._buckets) > self.max_clients:
            self._buckets.popitem(last=False)
        return wait

    def __len__(self) -> int:
        return len(self._buckets)


@dataclass
class ClientBuckets:
    """A budget per client key and one per its network; a request goes ahead only when both
    have its cost, and then both pay it."""

    per_client: TokenBuckets = field(default_factory=TokenBuckets)
    per_network: TokenBuckets | None = field(default_factory=lambda: TokenBuckets(rate=6.0, burst=60.0))

    def take(self, client: str, cost: float = 1.0) -> float:
        network = client_group(client)
        wait = self.per_client.wait(client, cost)
        if self.per_network is not None:
            wait = max(wait, self.per_network.wait(network, cost))
        if wait > 0:
            return wait
        self.per_client.take(client, cost)
        if self.per_network is not None:
            self.per_network.take(network, cost)
        return 0.0
