"""`cacheon miner serve` is public (validators fetch from anywhere): connection floods against the
real CLI process cost it a bounded number of fds, and a validator's fetch still gets the
archive, byte for byte."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import floods
import pytest
from conftest import EXAMPLES, REPO

from cacheon_subnet.bundle import pack
from cacheon_subnet.miner.serve import archive_name

PER_CLIENT, TOTAL = 16, 256  # the documented defaults (miner/serve.py, docs/operators.md)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sockets(pid: int) -> int:
    n = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            n += os.readlink(fd).startswith("socket:")
        except OSError:
            pass
    return n


def _settled_sockets(pid: int, within_s: float = 10.0) -> int:
    """The server's socket count once two reads 0.2 s apart agree: while it drains its accept
    backlog it holds, for an instant, the connection it is deciding on (accepted, not yet refused
    or admitted) beside its capped table; the cap is on what it keeps."""
    import time

    last, deadline = _sockets(pid), time.monotonic() + within_s
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = _sockets(pid)
        if now == last:
            return now
        last = now
    return last


def _download(port: int, name: str, src: str) -> tuple[int, bytes]:
    s = floods.connect(port, src)
    assert s is not None
    try:
        s.sendall(f"GET /{name} HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n".encode())
        s.settimeout(20)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


@pytest.mark.slow
def test_a_flood_of_silent_connections_leaves_the_archive_server_serving(tmp_path):
    serve = tmp_path / "srv"
    serve.mkdir()
    bundle = pack(EXAMPLES / "norm.rmsnorm", tmp_path / "x.tar.gz")
    name = archive_name(bundle.digest)
    (tmp_path / "x.tar.gz").rename(serve / name)
    want = hashlib.sha256((serve / name).read_bytes()).hexdigest()
    port = _free_port()
    log = tmp_path / "serve.log"
    proc = subprocess.Popen(
        [
            "prlimit",
            "--nofile=1024:1024",
            "--",
            sys.executable,
            "-m",
            "cacheon_subnet.cli",
            "miner",
            "serve",
            "--dir",
            str(serve),
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(log, "wb"),
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert floods.get_until(port, ok=404, src="127.0.0.2", within_s=60, path="/") == 404  # up
        base = _sockets(proc.pid)
        floods.raise_client_fds(2000)
        one = floods.open_many(port, 1100, "127.0.0.1")  # one address, heads never finished
        assert floods.alive(one) <= PER_CLIENT
        many = [s for i in range(20) for s in floods.open_many(port, 16, f"127.0.9.{i + 1}")]  # 320 more
        try:
            held = _settled_sockets(proc.pid) - base
            assert held <= TOTAL, f"{held} connections held past the cap of {TOTAL}"
            status, body = _download(port, name, "127.0.0.3")
            assert status == 200 and hashlib.sha256(body).hexdigest() == want
        finally:
            floods.close_all(one + many)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    text = log.read_text()
    assert '"serve.nofile"' in text and "Traceback" not in text and len(text) < 50_000
    assert proc.returncode == 0


def test_answers_are_logged_as_a_count_not_a_line_each(tmp_path, monkeypatch):
    """Red team: every archive answered wrote an info line, so 16 keep-alive connections pipelining
    HEADs of the one archive wrote ~13 000 lines (3 MB) a second into the miner's log: a rival
    fills the miner's disk from one address. Guard: serve.make_app's Tally (at most one
    `serve.sent` per SENT_LOG_EVERY_S, with the count); red with a line per answer."""
    import time

    from cacheon_subnet.miner import serve

    lines: list[tuple[str, dict]] = []

    class Rec:
        def __getattr__(self, level):
            return lambda event, **kw: lines.append((event, kw)) if level == "info" else None

    monkeypatch.setattr(serve, "log", Rec())
    digest = "ab" * 32
    (tmp_path / archive_name(digest)).write_bytes(b"x" * 1000)
    srv = serve.start_in_thread(tmp_path)
    try:
        socks = [socket.create_connection(("127.0.0.1", srv.server.port)) for _ in range(PER_CLIENT)]
        req = f"HEAD /{archive_name(digest)} HTTP/1.1\r\nHost: m\r\n\r\n".encode() * 50
        answered = 0
        for s in socks:
            s.sendall(req)
        for s in socks:
            s.settimeout(10)
            got = b""
            while got.count(b"HTTP/1.1 200") < 50:
                got += s.recv(1 << 16)
            answered += got.count(b"HTTP/1.1 200")
            s.close()
        time.sleep(0.2)
    finally:
        srv.stop()
    sent = [kw for event, kw in lines if event == "serve.sent"]
    assert answered == PER_CLIENT * 50
    assert 1 <= len(sent) <= 2 and sent[0]["count"] == 1, sent[:3]
