"""The connection bounds' bookkeeping, without sockets: who is admitted, who is dropped, what is
logged. The same rules under real floods: test_guarded_site.py and test_validator_flood.py."""

from __future__ import annotations

import pytest

from cacheon_subnet.connguard import FD_RESERVE, ConnTable, Limits, Tally, client_key


class FakeSock:
    def __init__(self) -> None:
        self.fd = 5

    def fileno(self) -> int:
        return self.fd


class FakeTransport:
    def __init__(self, buffered: int = 0) -> None:
        self.sock, self.buffered, self.aborted = FakeSock(), buffered, False

    def get_extra_info(self, name: str):
        return self.sock if name == "socket" else None

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def abort(self) -> None:
        self.aborted = True
        self.sock.fd = -1


def test_client_key_groups_ipv6_by_64_and_unmaps_ipv4():
    assert client_key(("203.0.113.7", 5000)) == "203.0.113.7"
    assert client_key(("2001:db8:1:2:aaaa::1", 1, 0, 0)) == client_key(("2001:db8:1:2:ffff::9", 2, 0, 0))
    assert client_key(("2001:db8:1:2::1", 1, 0, 0)) == "2001:db8:1:2::/64"
    assert client_key(("2001:db8:1:3::1", 1, 0, 0)) != client_key(("2001:db8:1:2::1", 1, 0, 0))
    assert client_key(("::ffff:198.51.100.4", 1, 0, 0)) == "198.51.100.4"
    assert client_key("fe80::1%eth0") == "fe80::/64" and client_key("?") == "?"


def test_per_client_cap_refuses_and_a_closed_connection_frees_its_slot():
    table = ConnTable(Limits(max_conns=100, max_conns_per_ip=3))
    conns = [FakeTransport() for _ in range(3)]
    for t in conns:
        assert table.admit("a")
        table.add("a", t)
    assert not table.admit("a") and table.admit("b")  # another client is not affected
    conns[0].sock.fd = -1  # the peer went away: its fd is released
    assert table.admit("a") and table.count("a") == 2


def test_total_cap_drops_the_oldest_connection_for_a_newcomer():
    table = ConnTable(Limits(max_conns=4, max_conns_per_ip=2))
    conns = [FakeTransport() for _ in range(4)]
    for i, t in enumerate(conns):
        assert table.admit(f"c{i // 2}")
        table.add(f"c{i // 2}", t)
    assert table.admit("newcomer")
    assert conns[0].aborted and not any(t.aborted for t in conns[1:]) and len(table) == 3 and table.evicted == 1


def test_connections_older_than_the_lifetime_are_aborted():
    now = [0.0]
    table = ConnTable(Limits(max_conn_s=60.0), clock=lambda: now[0])
    old, young = FakeTransport(), FakeTransport()
    table.add("a", old)
    now[0] = 30.0
    table.add("a", young)
    now[0] = 61.0
    assert table.expire() == 1 and old.aborted and not young.aborted and table.count("a") == 1


def test_unsent_bytes_past_the_budget_drop_the_heaviest_readers_first():
    table = ConnTable(Limits(max_buffered=1 << 20))
    light, heavy, heavier = FakeTransport(100), FakeTransport(700 << 10), FakeTransport(900 << 10)
    for t in (light, heavy, heavier):
        table.add("x", t)
    assert table.buffered() == 100 + (1600 << 10)
    assert table.shed() == 1 and heavier.aborted and not heavy.aborted and not light.aborted
    assert table.shed() == 0 and table.buffered() <= 1 << 20


def test_tally_logs_a_count_once_per_window_never_each_event():
    now, lines = [0.0], []
    t = Tally(lambda event, **kw: lines.append((event, kw)), "http.accept_failed", 10.0, clock=lambda: now[0])
    for i in range(2001):
        now[0] = i * 0.01  # 2001 failures in 20 s: three lines
        t.note(error="OSError: Too many open files")
    assert [kw["count"] for _, kw in lines] == [1, 1000, 1000] and t.total == 2001
    assert all("Traceback" not in str(kw) for _, kw in lines)


def test_limits_are_checked_fitted_to_the_fd_budget_and_read_from_the_environment():
    with pytest.raises(ValueError):
        Limits(max_conns=10, max_conns_per_ip=11)
    assert Limits(max_conns=512).fitted(1024).max_conns == 512
    assert Limits(max_conns=2048).fitted(1024).max_conns == 1024 - FD_RESERVE
    with pytest.raises(ValueError):
        Limits().fitted(FD_RESERVE)
    got = Limits.from_env("X_", Limits(), {"X_MAX_CONNS": "64", "X_HEADER_TIMEOUT_S": "2.5"})
    assert (got.max_conns, got.header_timeout_s, got.max_conns_per_ip) == (64, 2.5, 16)
    with pytest.raises(ValueError, match="X_MAX_CONNS"):
        Limits.from_env("X_", Limits(), {"X_MAX_CONNS": "lots"})
    args = Limits().handler_args()
    assert args["keepalive_timeout"] == 10.0 and args["max_field_size"] == 4096 and args["max_headers"] == 32
