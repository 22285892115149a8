"""The connection bounds' bookkeeping, without sockets: who is admitted, who is dropped, what is
logged. The same rules under real floods: test_guarded_site.py and test_validator_flood.py."""

from __future__ import annotations

import pytest

from cacheon_subnet.connguard import FD_RESERVE, ConnTable, Limits, Tally, client_group, client_key


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


def test_client_group_is_the_ipv4_24_or_the_ipv6_48():
    assert client_group("203.0.113.7") == "203.0.113.0/24"
    assert client_group(client_key(("2001:db8:1:2::1", 1, 0, 0))) == "2001:db8:1::/48"
    assert client_group(client_key(("2001:db8:1:ffff::1", 1, 0, 0))) == "2001:db8:1::/48"
    assert client_group("?") == "?"


def _flood(table: ConnTable, keys: list[str]) -> list[FakeTransport]:
    out = []
    for key in keys:
        assert table.admit(key)
        t = FakeTransport()
        table.add(key, t)
        out.append(t)
    return out


@pytest.mark.parametrize(
    "attacker",
    [
        [f"2001:db8:bad:{i:x}::/64" for i in range(512) for _ in range(2)],  # one tunnel's /48, 2 per /64
        [f"2001:db8:bad:{i:x}::/64" for i in range(64) for _ in range(16)],  # 16 per /64, the per-client cap
        [f"198.51.100.{i}" for i in range(1, 65) for _ in range(16)],  # 64 IPv4 addresses of one /24
    ],
)
def test_a_flood_from_one_network_evicts_itself_not_the_readers(attacker):
    """Red team: at the total cap the oldest connection was dropped, so one attacker's churn (any
    32 clients' worth: 32 IPv4 addresses or 32 /64s of one free tunnel-broker /48) aborted every
    reader's connection before its response was out. Guard: ConnTable._victim (heaviest network,
    its heaviest client, oldest): with `oldest` instead the readers are the first dropped."""
    table = ConnTable(Limits(max_conns=512, max_conns_per_ip=16))
    readers = _flood(table, ["203.0.113.7", "2001:db8:600d:1::/64", "192.0.2.1", "192.0.2.1"])
    churn = _flood(table, attacker)
    assert not any(t.aborted for t in readers)
    assert len(table) == 512 and table.evicted == len(attacker) + len(readers) - 512
    assert sum(t.aborted for t in churn) == table.evicted


def test_when_every_network_holds_one_the_oldest_goes_first():
    """A botnet of many networks (the documented residual) still meets the old rule: ties go to
    the network whose connection is oldest."""
    table = ConnTable(Limits(max_conns=4, max_conns_per_ip=1))
    first, *rest = _flood(table, [f"10.0.{i}.1" for i in range(4)])
    assert table.admit("10.0.9.1") and first.aborted and not any(t.aborted for t in rest)
