"""Prometheus metrics for the validator loop (prometheus-client), served only when asked.

`--metrics-port PORT` (off by default) serves /metrics on `--metrics-addr` (127.0.0.1 unless
given) through metrics_http.MetricsServer (bounded: a few connections at once, a deadline for
the request head; it runs in the validator's process). The registry is the validator's own, so
nothing else in the process leaks into it.

    cacheon_validator_passes_total{result}            ok | failed | crashed
    cacheon_validator_pass_duration_seconds            histogram of pass wall time
    cacheon_validator_last_pass_timestamp_seconds      unix time the last pass completed
    cacheon_validator_last_pass_ok                     1 when the last pass had no problem
    cacheon_validator_queue{state}                     contributions per state (after the pass)
    cacheon_validator_verdicts_total{verdict}          qualifier verdicts recorded
    cacheon_validator_weights_total{action}            publisher outcomes (verified, refused, ...)
    cacheon_validator_weights_verified_block           block of the last read-back-verified weights
    cacheon_validator_chain_errors_total{op,kind}      failed chain calls (transient | definitive)
    cacheon_validator_chain_block                      last block seen by sync
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_PASS_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.passes = Counter("cacheon_validator_passes", "Validator passes by result", ["result"], registry=r)
        self.pass_seconds = Histogram(
            "cacheon_validator_pass_duration_seconds", "Wall time of one pass", buckets=_PASS_BUCKETS, registry=r
        )
        self.last_pass = Gauge(
            "cacheon_validator_last_pass_timestamp_seconds", "Unix time the last pass completed", registry=r
        )
        self.last_ok = Gauge("cacheon_validator_last_pass_ok", "1 if the last pass had no problem", registry=r)
        self.queue = Gauge("cacheon_validator_queue", "Contributions per state", ["state"], registry=r)
        self.verdicts = Counter("cacheon_validator_verdicts", "Qualifier verdicts", ["verdict"], registry=r)
        self.weights = Counter("cacheon_validator_weights", "Publisher outcomes", ["action"], registry=r)
        self.weights_block = Gauge(
            "cacheon_validator_weights_verified_block", "Block of the last read-back-verified weights", registry=r
        )
        self.chain_errors = Counter("cacheon_validator_chain_errors", "Failed chain calls", ["op", "kind"], registry=r)
        self.chain_block = Gauge("cacheon_validator_chain_block", "Last block seen by sync", registry=r)
        self._server: Any = None

    def chain_error(self, op: str, exc: BaseException, kind: str) -> None:
        self.chain_errors.labels(op=op, kind=kind).inc()

    def verdict(self, verdict: str) -> None:
        self.verdicts.labels(verdict=verdict).inc()

    def observe_pass(
        self,
        *,
        ok: bool,
        duration_s: float,
        at: float,
        counts: Mapping[str, int],
        weights: str | None,
        block: int | None,
        verified_block: int | None,
    ) -> None:
        self.passes.labels(result="ok" if ok else "failed").inc()
        self.pass_seconds.observe(duration_s)
        self.last_pass.set(at)
        self.last_ok.set(1 if ok else 0)
        for state, n in counts.items():
            self.queue.labels(state=state).set(n)
        if weights:
            self.weights.labels(action=weights).inc()
        if block is not None:
            self.chain_block.set(block)
        if verified_block is not None:
            self.weights_block.set(verified_block)

    def crashed(self) -> None:
        self.passes.labels(result="crashed").inc()
        self.last_ok.set(0)

    def serve(self, port: int, addr: str = "127.0.0.1") -> int:
        """Start the bounded /metrics server in a daemon thread; returns the bound port."""
        from cacheon_subnet.log import get_logger
        from cacheon_subnet.validator.metrics_http import MetricsServer

        self._server = MetricsServer(self.registry, addr, port, log=get_logger("cacheon.validator.metrics"))
        return self._server.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
