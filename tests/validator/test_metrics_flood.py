"""The /metrics endpoint lives in the validator's process: a flood there may cost it a few
threads and fds, never one per connection (prometheus_client's ThreadingHTTPServer started a
thread per connection and waited on a silent one for ever)."""

from __future__ import annotations

import os
import socket
import threading
import time
import urllib.error
import urllib.request

import floods
import pytest

from cacheon_subnet.validator.metrics import Metrics
from cacheon_subnet.validator.metrics_http import MetricsServer


def _server(max_conns: int = 4, head_timeout_s: float = 1.0) -> tuple[MetricsServer, int]:
    m = Metrics()
    m.passes.labels(result="ok").inc()
    srv = MetricsServer(m.registry, "127.0.0.1", 0, max_conns=max_conns, head_timeout_s=head_timeout_s)
    return srv, srv.start()


def _scrape(port: int) -> bytes:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()


def _conn_threads() -> int:
    return sum(t.name == "cacheon-metrics-conn" for t in threading.enumerate())


@pytest.mark.slow
def test_a_slowloris_costs_at_most_the_cap_in_threads_and_ends_at_the_head_deadline():
    srv, port = _server(head_timeout_s=5.0)  # longer than opening the 200 takes here
    try:
        fds0 = len(os.listdir("/proc/self/fd"))
        socks = floods.open_many(port, 200, first=b"GET /metrics HTTP/1.1\r\n")
        try:
            time.sleep(0.3)
            assert _conn_threads() <= 4  # 200 silent connections, at most 4 threads
            server_fds = len(os.listdir("/proc/self/fd")) - fds0 - sum(s.fileno() >= 0 for s in socks)
            assert server_fds <= 4 + 2  # the rest closed at accept or left in the kernel's backlog
            end = time.monotonic() + 20
            while _conn_threads() and time.monotonic() < end:
                time.sleep(0.1)
            assert _conn_threads() == 0  # each gave up at its deadline
        finally:
            floods.close_all(socks)
        assert b"cacheon_validator_passes_total" in _scrape(port)
    finally:
        srv.stop()


@pytest.mark.slow
def test_a_trickled_head_is_cut_at_its_total_deadline_not_per_read():
    srv, port = _server(head_timeout_s=1.0)
    try:
        s = floods.connect(port)
        assert s is not None
        s.sendall(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
        t0, cut = time.monotonic(), None
        for _ in range(40):  # a byte every 0.2 s: each read is quick, the head never ends
            time.sleep(0.2)
            try:
                s.send(b"a")
            except OSError:
                cut = time.monotonic() - t0
                break
        s.close()
        assert cut is not None and cut < 4.0, f"trickled head held the connection {cut} s"
    finally:
        srv.stop()


def test_only_get_and_head_of_the_metrics_path():
    srv, port = _server()
    try:
        req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", method="POST", data=b"x")
        try:
            urllib.request.urlopen(req, timeout=10)
            raise AssertionError("POST answered")
        except urllib.error.HTTPError as exc:
            assert exc.code == 405
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/etc/passwd", timeout=10)
            raise AssertionError("other path answered")
        except urllib.error.HTTPError as exc:
            assert exc.code == 404
        head = urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/metrics", method="HEAD"), timeout=10)
        assert head.status == 200 and head.read() == b""
        big = socket.create_connection(("127.0.0.1", port))
        big.sendall(b"GET /metrics HTTP/1.1\r\n" + b"X: " + b"a" * 20000)  # a head past HEAD_MAX
        big.settimeout(10)
        try:
            answer = big.recv(100)
        except ConnectionResetError:
            answer = b""
        assert answer == b""  # closed without an answer
        big.close()
    finally:
        srv.stop()


@pytest.mark.slow
def test_a_scrape_flood_renders_the_registry_once_a_second_and_is_capped_per_second():
    """Red team 2026-12-05: ~1500 scrapes a second, each a `generate_latest` in the validator's
    own process, took a whole core. Now the exposition is rendered at most once per
    `min_interval_s`, and at most `max_rps` connections a second are accepted."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import GaugeMetricFamily

    class Counted:
        calls = 0

        def collect(self):
            Counted.calls += 1
            yield GaugeMetricFamily("cacheon_test_renders", "renders", value=Counted.calls)

    reg = CollectorRegistry()
    reg.register(Counted())
    Counted.calls = 0
    srv = MetricsServer(reg, "127.0.0.1", 0, min_interval_s=60.0, max_rps=10.0)
    port = srv.start()
    try:
        bodies = [_scrape(port) for _ in range(8)]
        assert Counted.calls == 1 and len(set(bodies)) == 1  # one render, the same bytes
        t0 = time.monotonic()
        for _ in range(40):  # 10 a second after the first 10 (the rest wait in the backlog)
            _scrape(port)
        took = time.monotonic() - t0
        assert took >= 2.5 and Counted.calls == 1, (took, Counted.calls)
    finally:
        srv.stop()
