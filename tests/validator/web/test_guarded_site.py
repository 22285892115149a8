"""The connection bounds (cacheon_subnet.connguard) against real sockets: the leaderboard's app in
this process (head timeout, keep-alive, caps, header limits) or alone in a child process when
its fds and log are what is measured (accept errors, slow readers)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import floods
import pytest
from board_fixtures import make_state

from cacheon_subnet.connguard import Limits
from cacheon_subnet.validator.state import StateDB
from cacheon_subnet.validator.web.server import Leaderboard

HERE = Path(__file__).resolve().parent
FAST = Limits(max_conns=32, max_conns_per_ip=8, header_timeout_s=1.5, max_conn_s=30.0)


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> Path:
    return make_state(tmp_path_factory.mktemp("guarded"))


def _gone_within(socks: list[socket.socket], seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if floods.alive(socks, 0.2) == 0:
            return True
    return False


@pytest.mark.slow
def test_a_request_head_that_never_ends_is_closed_after_the_header_timeout(state):
    with Leaderboard(state, "127.0.0.1", 0, limits=FAST) as board:
        socks = floods.open_many(board.port, 4, "127.0.0.3")
        trickle = floods.open_many(board.port, 1, "127.0.0.3", first=floods.HEAD + b"X-Slow: ")
        try:
            assert floods.alive(socks + trickle, 0.3) == 5
            for _ in range(4):  # a byte now and then does not reset the timer
                time.sleep(0.25)
                trickle[0].send(b"a")
            assert _gone_within(socks + trickle, 3.0)  # 1.5 s from the connect, with slack
        finally:
            floods.close_all(socks + trickle)


@pytest.mark.slow
def test_an_idle_keep_alive_connection_is_closed(state):
    with Leaderboard(state, "127.0.0.1", 0, limits=FAST) as board:
        idle = floods.idle_keepalive(board.port, 3, "127.0.0.4")
        try:
            assert len(idle) == 3 and floods.alive(idle, 0.2) == 3
            assert _gone_within(idle, 3.0)
        finally:
            floods.close_all(idle)


def test_one_client_gets_its_cap_and_others_still_get_in(state):
    with Leaderboard(state, "127.0.0.1", 0, limits=FAST) as board:
        socks = floods.open_many(board.port, 20, "127.0.0.5")
        try:
            assert floods.alive(socks) == FAST.max_conns_per_ip
            assert floods.get(board.port, src="127.0.0.6") == 200
        finally:
            floods.close_all(socks)


def test_past_the_total_cap_the_oldest_connection_makes_room(state):
    with Leaderboard(state, "127.0.0.1", 0, limits=FAST) as board:
        socks = [s for i in range(6) for s in floods.open_many(board.port, 8, f"127.0.7.{i + 1}")]
        try:
            assert len(socks) == 48 and floods.alive(socks) == FAST.max_conns
            assert floods.get(board.port, src="127.0.8.1") == 200  # a newcomer is served
        finally:
            floods.close_all(socks)


def _evict_scenario(family: int, tmp_path: Path) -> dict:
    script = [sys.executable, str(HERE / "evict_scenario.py"), "--family", str(family), "--dir", str(tmp_path)]
    if family == 6:  # a network namespace of its own, where two /48s are routed to loopback (AnyIP)
        if shutil.which("unshare") is None or shutil.which("ip") is None:
            pytest.skip("needs unshare and ip (util-linux, iproute2)")
        setup = (
            "ip link set lo up && ip -6 route add local fd00:bad::/48 dev lo && "
            'ip -6 route add local fd00:600d::/48 dev lo && exec "$@"'
        )
        script = ["unshare", "--net", "sh", "-c", setup, "sh", *script]
    proc = subprocess.run(
        script, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": f"{HERE.parent.parent}:{HERE}"}
    )
    if family == 6 and proc.returncode != 0 and "Operation not permitted" in proc.stderr:
        pytest.skip(f"no network namespace here: {proc.stderr[-300:]}")
    lines = [x for x in proc.stdout.splitlines() if x.startswith('{"reader"')]
    assert proc.returncode == 0 and lines, (proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])
    return json.loads(lines[-1])


@pytest.mark.parametrize("family", [4, 6])
def test_a_flood_from_one_network_cannot_evict_a_reader_from_another(family, tmp_path):
    """Red team: past the total cap the oldest connection was dropped, so one attacker holding 8
    clients' worth of slow connections (8 IPv4 addresses of a /24; 8 /64s of one IPv6 /48, which a
    tunnel broker hands out for free) evicted a reader mid-request, and churning at the accept rate
    kept every reader out. Guard: connguard.ConnTable._victim (red with the oldest-first rule)."""
    got = _evict_scenario(family, tmp_path)
    assert got["flood"] == 128 and got["evicted"] >= 64, got
    assert got["reader"] == 200, got


def test_a_memory_error_in_the_accept_loop_does_not_end_accepting(state, monkeypatch):
    """Red team: a flood of pipelined header-heavy requests (512 connections from 32 addresses, each
    queueing aiohttp's 32 parsed messages behind a response it never reads) took the web process to
    its 1 GiB address-space cap: reads failed with MemoryError. The accept task caught only
    OSError, so one MemoryError there would end it while the process lived on (the supervisor
    restarts only a dead one): no reader served again. Not seen in three runs of the flood; shown
    here by injecting it. Guard: GuardedListener._accept_loop's broad except (red: status 0)."""
    from cacheon_subnet import connguard

    real, fail = connguard.client_key, [MemoryError()]

    def flaky(addr):
        if fail:
            raise fail.pop()
        return real(addr)

    monkeypatch.setattr(connguard, "client_key", flaky)
    with Leaderboard(state, "127.0.0.1", 0, limits=FAST) as board:
        assert floods.get(board.port, src="127.0.0.5", timeout=3) == 0  # the one that met the MemoryError
        assert floods.get(board.port, src="127.0.0.5", timeout=5) == 200
        assert board._site is not None and board._site.listener.accept_errors.total == 1


def _raw(port: int, head: bytes) -> bytes:
    s = floods.connect(port, "127.0.0.9")
    assert s is not None
    try:
        s.sendall(head)
        s.settimeout(10)
        return s.recv(200)
    finally:
        s.close()


def test_request_line_header_size_and_count_are_bounded(state):
    base = b"GET /api/health HTTP/1.1\r\nHost: board\r\n"
    with Leaderboard(state, "127.0.0.1", 0, limits=FAST) as board:
        assert _raw(board.port, base + b"X-Ok: " + b"a" * 3000 + b"\r\n\r\n").startswith(b"HTTP/1.1 200")
        assert _raw(board.port, base + b"X-Big: " + b"a" * 5000 + b"\r\n\r\n").startswith(b"HTTP/1.0 400")
        many = b"".join(b"X-%d: 1\r\n" % i for i in range(40))
        assert _raw(board.port, base + many + b"\r\n").startswith(b"HTTP/1.0 400")
        assert _raw(board.port, b"GET /?" + b"q" * 5000 + b" HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.0 400")
        assert floods.huge_line(board.port, "127.0.0.10").startswith(b"HTTP/1.0 400")  # 1 MiB, no newline


# -- alone in a process: its fds and its log -------------------------------------------------


class Site:
    def __init__(self, tmp: Path, kind: str, directory: Path, limits: Limits, ballast: bool = False) -> None:
        self.log = tmp / f"site-{kind}.log"
        argv = [
            sys.executable,
            str(HERE / "site_server.py"),
            "--kind",
            kind,
            "--dir",
            str(directory),
            "--limits",
            json.dumps(limits.to_json()),
        ] + (["--ballast"] if ballast else [])
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=open(self.log, "wb"),
            text=True,
            env={**os.environ, "PYTHONPATH": str(HERE.parent.parent)},
        )
        line = self.proc.stdout.readline()
        assert line.startswith("PORT "), (line, self.log.read_text()[-2000:])
        self.port = int(line.split()[1])

    def sockets(self) -> int:
        n = 0
        for fd in Path(f"/proc/{self.proc.pid}/fd").iterdir():
            try:
                n += os.readlink(fd).startswith("socket:")
            except OSError:
                pass
        return n

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        return self.log.read_text()


@pytest.mark.slow
def test_accept_errors_are_counted_and_backed_off_never_a_traceback_each(state, tmp_path):
    site = Site(tmp_path, "board", state, Limits(log_every_s=5.0), ballast=True)
    try:
        t0 = time.monotonic()
        floods.accept_flood(site.port, 300, "127.0.0.11")  # each accept meets EMFILE once the two spare fds go
        floods.close_all(floods.open_many(site.port, 20, "127.0.0.12"))
        time.sleep(1.0)
        site.proc.send_signal(signal.SIGUSR1)  # the fds come back: it serves again
        assert floods.get_until(site.port, src="127.0.0.13", within_s=30) == 200
        took = time.monotonic() - t0
    finally:
        log = site.stop()
    lines = [json.loads(x) for x in log.splitlines() if x.startswith("{")]
    failed = [x for x in lines if x.get("event") == "http.accept_failed"]
    assert failed and "Too many open files" in failed[0]["error"]  # it did meet EMFILE
    assert len(failed) <= took / 5.0 + 2 and failed[-1]["total"] >= len(failed)  # counted, a line per window
    assert "Traceback" not in log and len(log) < 20_000


def _big_state(root: Path, rows: int = 500, reason_kb: int = 16) -> Path:
    state = root / "big"
    db = StateDB(state)
    with db.tx() as con:
        for i in range(rows):
            db.insert(
                con,
                cid=f"{i:064x}",
                hotkey=f"hk{i}",
                uid=i,
                commit_block=i,
                reveal_block=i + 1,
                url=None,
                digest=None,
                state="failed",
                reason="r" * (reason_kb << 10),
            )
    db.close()
    return state


def _slow_readers(port: int, n: int, src: str) -> list[socket.socket]:
    """Ask for an ~8 MB page and never read it (a tiny receive window)."""
    out = []
    for _ in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.bind((src, 0))
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /api/contributions?limit=500 HTTP/1.1\r\nHost: board\r\n\r\n")
        out.append(s)
    return out


@pytest.mark.slow
def test_slow_readers_are_dropped_once_their_unsent_bytes_pass_the_budget(tmp_path):
    site = Site(
        tmp_path, "board", _big_state(tmp_path), Limits(max_conn_s=60.0, max_buffered=4 << 20, header_timeout_s=10.0)
    )
    base = site.sockets()
    socks = _slow_readers(site.port, 8, "127.0.0.14") + _slow_readers(site.port, 8, "127.0.0.15")
    try:
        time.sleep(1.0)
        end = time.monotonic() + 20  # each holds ~8 MB unsent: far past the 4 MiB budget
        while time.monotonic() < end and site.sockets() > base + 1:
            time.sleep(0.5)
        assert site.sockets() <= base + 1, "slow readers still held, past the unsent-bytes budget"
        assert floods.get(site.port, src="127.0.0.16") == 200
    finally:
        floods.close_all(socks)
        log = site.stop()
    assert '"http.dropped"' in log and "too_much_unsent" in log


@pytest.mark.slow
def test_a_connection_ends_after_its_lifetime_whatever_it_does(tmp_path):
    site = Site(
        tmp_path,
        "board",
        _big_state(tmp_path, rows=100),  # ~1.6 MB: under the budget
        Limits(max_conn_s=4.0, header_timeout_s=2.0),
    )
    base = site.sockets()
    socks = _slow_readers(site.port, 2, "127.0.0.17")
    try:
        time.sleep(1.0)
        assert site.sockets() == base + 2  # held: a response is being written to them
        end = time.monotonic() + 15
        while time.monotonic() < end and site.sockets() > base:
            time.sleep(0.5)
        assert site.sockets() == base, "a stalled reader outlived max_conn_s"
    finally:
        floods.close_all(socks)
        log = site.stop()
    assert "too_old" in log


def test_each_connection_gets_small_kernel_buffers(state):
    """No autotuning to megabytes of kernel memory per connection a slow reader holds."""
    with Leaderboard(state, "127.0.0.1", 0, limits=FAST) as board:
        with floods.holding(floods.open_many(board.port, 2, "127.0.0.18")):
            time.sleep(0.3)
            conns = list(board._site.listener.table._conns)
            sizes = [t.get_extra_info("socket").getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) for t in conns]
    assert len(sizes) == 2 and all(s <= 2 * FAST.sndbuf for s in sizes), sizes  # (the kernel doubles it)
