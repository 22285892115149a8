"""Issue 30 item 5, as an attacker would run it, against the documented deployment:
`cacheon validator run --leaderboard 127.0.0.1:PORT --metrics-port PORT` on the local chain under
`prlimit --nofile=1024:1024` (the soft limit of systemd and pm2; the hard one too, so nothing
can be raised). Before: 1100 silent connections from one address took every fd of the validator
and every later pass crashed. Now each flood runs while passes keep completing and publishing
weights, a reader from another address is served, the validator's fds, threads and memory stay
where they were, the web process's stay bounded, and the log stays small.

The floods are sized for a 2-core CI box (seconds each); nothing here times anything. The head
timeout is 5 s (CACHEON_WEB_HEADER_TIMEOUT_S, documented) so the waits for it stay short."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import floods
import pytest
from conftest import REPO

from cacheon_subnet.chain import LocalChain

HEADER_TIMEOUT_S = 5.0
PER_CLIENT, TOTAL = 16, 512  # the documented defaults (docs/operators.md), not read from the code under test
pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the web process's own uid needs root (as in CI)"),
    pytest.mark.slow,
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ValidatorRun:
    """One `validator run` process with its leaderboard and metrics, and what its log says."""

    def __init__(self, tmp: Path) -> None:
        chain = tmp / "chain.sqlite"
        c = LocalChain.create(chain, netuid=1, seconds_per_block=0.005)  # weights re-sent every ~2 s
        c.register("v0", stake=1000.0, validator_permit=True)
        self.state = tmp / "state"
        self.port, self.metrics_port = _free_port(), _free_port()
        self.log = tmp / "validator.log"
        argv = [
            "prlimit",
            "--nofile=1024:1024",
            "--",
            sys.executable,
            "-m",
            "cacheon_subnet.cli",
            "validator",
            "run",
            "--chain",
            "local",
            "--local-chain",
            str(chain),
            "--netuid",
            "1",
            "--wallet.hotkey",
            "v0",
            "--state-dir",
            str(self.state),
            "--interval",
            "1",
            "--leaderboard",
            f"127.0.0.1:{self.port}",
            "--metrics-port",
            str(self.metrics_port),
        ]
        env = {**os.environ, "PYTHONPATH": str(REPO), "CACHEON_WEB_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S)}
        env.pop("CACHEON_SANDBOX", None)
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(self.log, "wb"), env=env)
        status = floods.get_until(self.port, src="127.0.0.2", within_s=180)
        assert status == 200, f"the page never came up ({status}): {self.log.read_text()[-3000:]}"

    def events(self, name: str | None = None) -> list[dict]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue
                if name is None or doc.get("event") == name:
                    out.append(doc)
        return out

    def child(self) -> int:
        started = self.events("web.child_started")
        assert started, "no web.child_started in the log"
        end = time.monotonic() + 30
        while time.monotonic() < end:
            pid = floods.web_child(started[-1]["snapshot_dir"])
            if pid:
                return pid
            time.sleep(0.2)
        raise AssertionError("no web process found")

    def mark(self) -> int:
        return len(self.events("pass.done"))

    def expect_passes(self, mark: int, what: str, n: int = 3, within_s: float = 120.0) -> None:
        """`n` more passes, none crashed, at least one of them published (and read back) weights."""
        end = time.monotonic() + within_s
        while time.monotonic() < end and self.mark() < mark + n:
            time.sleep(0.5)
        passes = self.events("pass.done")[mark:]
        assert len(passes) >= n, f"{what}: {len(passes)} passes completed, expected {n}"
        assert not self.events("pass.crashed"), f"{what}: a pass crashed: {self.events('pass.crashed')[-1]}"
        assert all(not p.get("problems") for p in passes), f"{what}: {[p['problems'] for p in passes]}"
        assert any(p.get("weights") in ("verified", "published") for p in passes), (
            f"{what}: no weights published in {[p.get('weights') for p in passes]}"
        )

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


@pytest.fixture
def run(tmp_path):
    floods.raise_client_fds(3000)
    r = ValidatorRun(tmp_path)
    yield r
    r.stop()


def _gone_within(socks: list, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if floods.alive(socks, 0.3) == 0:
            return True
    return False


def test_floods_on_the_page_and_the_metrics_port_never_reach_the_validator(run):
    vpid = run.proc.pid
    base_fds, base_threads, base_rss = floods.fd_count(vpid), floods.threads(vpid), floods.rss_mib(vpid)
    base_log = run.log.stat().st_size

    def validator_untouched(what: str) -> None:
        assert floods.fd_count(vpid) <= base_fds + 6, f"{what}: validator fds {floods.fd_count(vpid)} (was {base_fds})"
        assert floods.threads(vpid) <= base_threads + 6, f"{what}: validator threads {floods.threads(vpid)}"
        assert floods.rss_mib(vpid) <= base_rss + 64, f"{what}: validator RSS {floods.rss_mib(vpid):.0f} MiB"

    # 1. slowloris from one address: 1100 request heads that never end
    mark = run.mark()
    with floods.holding(floods.open_many(run.port, 1100, "127.0.0.1")) as socks:
        assert floods.alive(socks) <= PER_CLIENT
        assert floods.get(run.port, src="127.0.0.2") == 200
        validator_untouched("slowloris, one address")
        run.expect_passes(mark, "slowloris, one address")
        assert _gone_within(socks, HEADER_TIMEOUT_S + 10), "heads that never end outlived the header timeout"

    # 2. slowloris from 40 addresses, 16 each: past the total cap the heaviest network makes room
    child = run.child()  # (the validator's side was checked first: it holds whatever it serves in process)
    child_rss = floods.rss_mib(child)
    mark = run.mark()
    socks = [s for i in range(40) for s in floods.open_many(run.port, 16, f"127.0.10.{i + 1}")]
    with floods.holding(socks):
        assert floods.alive(socks) <= TOTAL
        assert floods.fd_count(child) <= TOTAL + 64, f"web process fds {floods.fd_count(child)}"
        assert floods.get(run.port, src="127.0.0.2") == 200
        validator_untouched("slowloris, many addresses")
        run.expect_passes(mark, "slowloris, many addresses")

    # 3. header bombs: 400 heads of 127 lines of 8 KB (the measured 841 MiB), a 1 MiB line, 40 headers
    mark = run.mark()
    bombs = [b for i in range(25) for b in (floods.header_bomb(run.port, f"127.0.11.{i + 1}") for _ in range(16)) if b]
    with floods.holding(bombs):
        assert floods.huge_line(run.port, "127.0.12.1").startswith(b"HTTP/1.0 400")
        s = floods.connect(run.port, "127.0.12.2")
        s.sendall(floods.HEAD + b"".join(b"X-%d: 1\r\n" % i for i in range(40)) + b"\r\n")
        s.settimeout(10)
        assert s.recv(100).startswith(b"HTTP/1.0 400")
        s.close()
        assert floods.alive(bombs, 1.0) == 0  # each answered 400 and closed
        assert floods.rss_mib(child) <= child_rss + 100, f"web process RSS {floods.rss_mib(child):.0f} MiB"
        assert floods.get(run.port, src="127.0.0.2") == 200
        validator_untouched("header bombs")
        run.expect_passes(mark, "header bombs")

    # 4. idle keep-alive connections: closed after the idle timeout, and they count against the cap
    mark = run.mark()
    with floods.holding(floods.idle_keepalive(run.port, PER_CLIENT, "127.0.0.3")) as idle:
        assert len(idle) == PER_CLIENT and floods.alive(idle, 0.2) == len(idle)
        extra = floods.open_many(run.port, 1, "127.0.0.3")
        assert floods.alive(extra) == 0  # the 17th from that address is refused
        assert _gone_within(idle, HEADER_TIMEOUT_S + 10)
        run.expect_passes(mark, "idle keep-alive")

    # 5. a flood of accepts: connect and reset, 1000 times
    mark = run.mark()
    floods.accept_flood(run.port, 1000, "127.0.0.4")
    assert floods.get(run.port, src="127.0.0.2") == 200
    validator_untouched("accept flood")
    run.expect_passes(mark, "accept flood")

    # 6. the metrics port, inside the validator's process: a slowloris costs at most its cap
    mark = run.mark()
    with floods.holding(floods.open_many(run.metrics_port, 300, "127.0.0.1", first=b"GET /metrics HTTP/1.1\r\n")) as socks:
        time.sleep(0.5)
        validator_untouched("metrics slowloris")
        run.expect_passes(mark, "metrics slowloris")
    # once the flood has closed, a scrape is served again within the head timeout: its slots
    # (4, no per-client share) free as their threads read the EOFs, and until then a connection
    # is closed at accept (a reset on a loaded CI box, twice). A scraper retries; so does this.
    body, deadline = b"", time.monotonic() + 15
    while not body and time.monotonic() < deadline:
        scrape = http.client.HTTPConnection("127.0.0.1", run.metrics_port, timeout=20)
        try:
            scrape.request("GET", "/metrics")
            body = scrape.getresponse().read()
        except (ConnectionError, http.client.HTTPException):
            time.sleep(0.2)
        finally:
            scrape.close()
    assert b"cacheon_validator_passes_total" in body

    assert floods.rss_mib(child) <= child_rss + 100 and run.child() == child  # never restarted
    grown = run.log.read_text(errors="replace")[base_log:]
    assert "Traceback" not in grown and len(grown) < 256_000, f"log grew {len(grown)} bytes during the floods"
    noisy = [
        e
        for e in run.events()
        if e.get("event") not in ("pass.done", "weights.unchanged", "weights.verified", "weights.published", "weights.sent")
    ]
    assert len(noisy) < 60, f"{len(noisy)} log lines other than passes, e.g. {noisy[-3:]}"


def test_the_page_runs_as_its_own_uid_restarts_when_killed_and_stops_with_the_validator(run):
    vpid, child = run.proc.pid, run.child()
    snap = run.events("web.child_started")[-1]["snapshot_dir"]
    status = Path(f"/proc/{child}/status").read_text()
    uid = int(next(x for x in status.splitlines() if x.startswith("Uid:")).split()[1])
    assert child != vpid and 64000 <= uid < 64064, f"the page is served by pid {child} as uid {uid}"
    assert os.readlink(f"/proc/{child}/ns/net") != os.readlink(f"/proc/{vpid}/ns/net")  # reaches nothing itself
    view = Path(f"/proc/{child}/root")
    assert (view / snap.lstrip("/") / "leaderboard.sqlite").is_file()
    assert not (view / str(run.state).lstrip("/")).exists()  # neither the state dir ...
    assert not (view / "root" / ".bittensor").exists()  # ... nor a wallet is in its view
    mounts = Path(f"/proc/{child}/mountinfo").read_text().splitlines()
    assert any(m.split()[4] == snap and m.split()[5].startswith("ro") for m in mounts)  # the snapshot: read-only
    limits = Path(f"/proc/{child}/limits").read_text()
    assert any(x.startswith("Max open files") and x.split()[3] == "1024" for x in limits.splitlines())
    [budget] = run.events("validator.nofile")  # under prlimit 1024:1024 nothing can be raised: said, with the fix
    assert budget["level"] == "warning" and budget["hard"] == 1024 and "LimitNOFILE" in budget["fix"]

    mark = run.mark()
    os.kill(child, signal.SIGKILL)
    end = time.monotonic() + 60
    while time.monotonic() < end and not run.events("web.child_exited"):
        time.sleep(0.2)
    assert floods.get_until(run.port, src="127.0.0.2", within_s=60) == 200
    assert run.child() != child and run.events("web.child_exited")
    run.expect_passes(mark, "web process killed")

    new_child = run.child()
    assert run.stop() == 0
    time.sleep(0.5)
    assert not Path(f"/proc/{new_child}").exists(), "the web process outlived the validator"
    assert not Path(snap).exists(), "the snapshot dir outlived the validator"
