"""One eviction attack against the leaderboard's bounded listener, as one attacker runs it: a reader
from one network is mid-request when 8 clients of another network (8 IPv4 addresses of a /24, or
8 /64s of one IPv6 /48) open twice the total cap of slow connections. Prints one JSON line: the
reader's status (200 served, 0 its connection was dropped) and the listener's evictions.

IPv6 runs inside a network namespace of its own (test_guarded_site.py starts it under `unshare
-n`) where both /48s are routed to loopback ("AnyIP"), so one box plays many IPv6 networks.

    python evict_scenario.py --family 4|6 --dir TMP
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from pathlib import Path

from board_fixtures import make_state

from cacheon_subnet.connguard import Limits
from cacheon_subnet.validator.web.server import Leaderboard

LIMITS = Limits(max_conns=64, max_conns_per_ip=16, header_timeout_s=8.0, max_conn_s=30.0)
HEAD = b"GET /api/health HTTP/1.1\r\nHost: board\r\n"
IP_FREEBIND = 15  # bind an address the route table calls local (AnyIP) before it is configured
ADDRS = {
    4: ("127.0.0.1", "127.0.2.9", [f"127.0.1.{i}" for i in range(1, 9)]),
    6: ("::1", "fd00:600d:0:1::9", [f"fd00:bad:0:{i:x}::1" for i in range(1, 9)]),
}


def connect(family: int, server: str, port: int, src: str) -> socket.socket:
    s = socket.socket(socket.AF_INET if family == 4 else socket.AF_INET6)
    s.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
    s.settimeout(10)
    s.bind((src, 0))
    s.connect((server, port))
    return s


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--family", type=int, choices=(4, 6), required=True)
    p.add_argument("--dir", required=True)
    args = p.parse_args()
    server, reader_ip, attackers = ADDRS[args.family]
    with Leaderboard(make_state(Path(args.dir)), server, 0, limits=LIMITS) as board:
        reader = connect(args.family, server, board.port, reader_ip)
        reader.sendall(HEAD)  # mid-request: a slow link
        time.sleep(0.2)
        flood = []
        for src in attackers:
            for _ in range(LIMITS.max_conns_per_ip):
                s = connect(args.family, server, board.port, src)
                s.sendall(HEAD)
                flood.append(s)
        time.sleep(0.5)
        status = 0
        try:
            reader.sendall(b"\r\n")
            head = reader.recv(4096)
            status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/1.1 ") else 0
        except OSError:
            status = 0
        evicted = board._site.listener.table.evicted if board._site is not None else -1
        print(json.dumps({"reader": status, "evicted": evicted, "flood": len(flood)}), flush=True)
        for s in [reader, *flood]:
            s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
