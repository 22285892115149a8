"""Starts the rank workers of one collective verify run, inside one sandbox.

The host launches this module through `sandbox.launch` (fresh network namespace with only
loopback up, rlimits, own process group). It starts one worker per rank as its children, so
every rank inherits the same confinement and the *same* network namespace: the ranks can reach
each other over 127.0.0.1 (gloo / NCCL bootstrap) and nothing else. It never imports bundle
code. Killing this process group (the host's `sandbox.stop`) kills every rank with it.

    python -m cacheon_subnet.verify.rank_launch --fds 5,6 --work DIR -- <worker args...>
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from cacheon_subnet.env import SANDBOX_SCRATCH


def rank_env(base: dict[str, str], rank_dir: Path) -> dict[str, str]:
    """Each rank gets its own HOME / TMPDIR / compiler caches / writable scratch (no races on
    Triton's cache between ranks; the audit guard lets each write only under its own dir)."""
    env = dict(base)
    cache = rank_dir / "cache"
    env.update(
        HOME=str(rank_dir / "home"),
        TMPDIR=str(rank_dir / "tmp"),
        XDG_CACHE_HOME=str(cache),
        TRITON_CACHE_DIR=str(cache / "triton"),
        TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"),
        **{SANDBOX_SCRATCH.name: str(rank_dir)},
    )
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fds", required=True, help="comma list: the host channel of rank 0, 1, ...")
    ap.add_argument("--work", required=True, help="shared scratch: rank<r>/ dirs and the rendezvous file")
    ap.add_argument("worker_args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    fds = [int(x) for x in a.fds.split(",")]
    work = Path(a.work)
    extra = [x for x in a.worker_args if x != "--"]
    world = len(fds)
    procs = []
    for rank, fd in enumerate(fds):
        rank_dir = work / f"rank{rank}"
        for d in ("home", "tmp", "cache"):
            (rank_dir / d).mkdir(parents=True, exist_ok=True)
        argv_r = [
            sys.executable,
            "-m",
            "cacheon_subnet.verify.worker",
            "--fd",
            str(fd),
            *extra,
            "--rank",
            str(rank),
            "--world-size",
            str(world),
            "--init-file",
            str(work / "rendezvous"),
        ]
        with open(rank_dir / "worker.log", "wb") as log:
            procs.append(
                subprocess.Popen(
                    argv_r,
                    cwd=str(rank_dir),
                    env=rank_env(dict(os.environ), rank_dir),
                    stdin=subprocess.DEVNULL,
                    stdout=log.fileno(),
                    stderr=log.fileno(),
                    pass_fds=(fd,),
                    close_fds=True,
                )
            )
        os.close(fd)
    codes = [p.wait() for p in procs]
    return max(codes, key=abs)


if __name__ == "__main__":
    sys.exit(main())
