"""Per-client token buckets: each client IP may make `burst` requests at once and `rate` per
second after that. The table is bounded (least recently seen clients are dropped first), so a
flood of distinct source addresses costs memory up to `max_clients` entries, never more.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field


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

    def take(self, client: str) -> float:
        """0.0 when the request may go ahead (a token is spent), else the seconds until one is free."""
        now = self.clock()
        tokens, last = self._buckets.pop(client, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        wait = 0.0
        if tokens >= 1.0:
            tokens -= 1.0
        else:
            wait = (1.0 - tokens) / self.rate
        self._buckets[client] = (tokens, now)
        while len(self._buckets) > self.max_clients:
            self._buckets.popitem(last=False)
        return wait

    def __len__(self) -> int:
        return len(self._buckets)
