"""A guarded site alone in a process, for tests that measure its fds and log: the leaderboard app
over a state dir (`board`) or the miner's archive server (`miner`). Prints `PORT <n>`, serves
until SIGTERM. `--ballast` fills every free fd but two after start (something else took the
process's fds: the accept loop then meets EMFILE); SIGUSR1 gives them back."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys

from cacheon_subnet import httpsite
from cacheon_subnet.connguard import Limits
from cacheon_subnet.log import configure, get_logger


async def main(args: argparse.Namespace) -> None:
    log = get_logger("test.site")
    limits = Limits(**json.loads(args.limits))
    if args.kind == "board":
        from cacheon_subnet.validator.web.server import make_app

        app = make_app(args.dir)
    else:
        from cacheon_subnet.miner.serve import make_app

        app = make_app(args.dir)
    site = await httpsite.bind(app, "127.0.0.1", 0, limits, log)
    ballast: list[int] = []
    if args.ballast:
        try:
            while True:
                ballast.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            for _ in range(2):
                os.close(ballast.pop())
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, lambda: ([os.close(fd) for fd in ballast] and None) or ballast.clear())
    print(f"PORT {site.port}", flush=True)
    await stop.wait()
    await site.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--kind", choices=("board", "miner"), required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--limits", default="{}")
    p.add_argument("--ballast", action="store_true")
    configure(json=True)
    asyncio.run(main(p.parse_args()))
    sys.exit(0)
