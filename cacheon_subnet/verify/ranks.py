"""Host side of a collective verify run: one sandboxed worker per rank, driven in lock step.

All ranks start under one `sandbox.launch` (rank_launch.py), so they share one fresh network
namespace in which only loopback is up: the process group forms over 127.0.0.1 (gloo on CPU,
NCCL on CUDA) with a file:// rendezvous in the scratch dir, and no rank can reach anything
outside. Every request goes to every rank before any answer is awaited (a collective completes
only when all ranks are inside it); one deadline covers the whole step. A rank that does not
answer in time, dies or breaks the protocol ends the run: the whole process group is killed.
"""

from __future__ import annotations

import dataclasses
import select
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch

from cacheon_subnet import sandbox
from cacheon_subnet.bundle import Bundle, Scratch
from cacheon_subnet.sandbox.logsink import tail_of
from cacheon_subnet.verify import protocol as P
from cacheon_subnet.verify import wire
from cacheon_subnet.verify.client import WorkerConfig, WorkerDied, WorkerTimeout, worker_policy, write_namespace

Reply = tuple[dict[str, Any], dict[str, torch.Tensor]]


class RankTimeout(WorkerTimeout):
    """Some rank did not answer within the deadline; every rank process has been killed."""

    def __init__(self, message: str, ranks: Sequence[int], answered: dict[int, Reply] | None = None) -> None:
        super().__init__(message)
        self.ranks = tuple(ranks)
        self.answered = dict(answered or {})  # what the other ranks said (often the root cause)


class RankDied(WorkerDied):
    """A rank exited or broke the protocol; every rank process has been killed."""

    def __init__(self, message: str, rank: int) -> None:
        super().__init__(message)
        self.rank = rank


class RankGroup:
    """`world_size` sandboxed workers holding one bundle, forming one process group."""

    def __init__(self, bundle: Bundle, config: WorkerConfig, world_size: int, pg_timeout_s: float = 600.0) -> None:
        if world_size < 2:
            raise ValueError("a rank group needs at least 2 ranks")
        self.bundle = bundle
        self.config = config
        self.world_size = world_size
        self.pg_timeout_s = pg_timeout_s
        self.scratch = Scratch("cacheon-verify-ranks-")
        self.work = self.scratch.path / "work"
        self.proc: subprocess.Popen[bytes] | None = None
        self.socks: list[socket.socket] = []

    def start(self) -> None:
        base = self.scratch.path
        ns, pkg = write_namespace(base, self.bundle)
        logs = []
        for r in range(self.world_size):  # inside, work/ is a private tmpfs: only the rank logs reach the host
            (self.work / f"rank{r}").mkdir(parents=True)
            logs.append(self.work / f"rank{r}" / "worker.log")
            logs[-1].touch()
        pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(self.world_size)]
        env = {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo", **self.config.policy.extra_env}
        policy = worker_policy(
            WorkerConfig(self.config.device, sandbox.SandboxPolicy(**{**self.config.policy.__dict__, "extra_env": env})),
            loopback=True,
        )
        policy = dataclasses.replace(policy, ro_paths=(str(ns),), rw_paths=tuple(map(str, logs)))
        child_fds = [child.fileno() for _, child in pairs]
        argv = [
            sys.executable,
            "-m",
            "cacheon_subnet.verify.rank_launch",
            "--fds",
            ",".join(map(str, child_fds)),
            "--work",
            str(self.work),
            "--",
            "--bundle-root",
            str(ns),
            "--package",
            pkg,
            "--device",
            self.config.device,
            "--pg-timeout",
            str(self.pg_timeout_s),
        ]
        with open(base / "launcher.log", "wb") as log:
            self.proc = sandbox.launch(
                argv, scratch=self.work, policy=policy, pass_fds=child_fds, stdout=log.fileno(), stderr=log.fileno()
            )
        for host, child in pairs:
            child.close()
            self.socks.append(host)

    # -- requests ---------------------------------------------------------------------------
    def request_all(
        self, msgs: Sequence[dict[str, Any]], tensors: Sequence[dict[str, torch.Tensor] | None], timeout_s: float
    ) -> list[Reply]:
        """Send msgs[r] (verify/protocol.py wire dicts) to rank r for every rank, then collect
        every answer (one deadline), as it came: the caller decodes each (protocol.read_reply)."""
        deadline = time.monotonic() + timeout_s
        rank = 0
        pending = dict(enumerate(self.socks))
        replies: dict[int, Reply] = {}
        try:
            for rank, sock in enumerate(self.socks):
                wire.send(sock.fileno(), msgs[rank], tensors[rank], deadline)
            while pending:  # in the order answers arrive: a dead rank is named before a stuck one
                left = deadline - time.monotonic()
                ready = select.select(list(pending.values()), [], [], max(0.0, left))[0] if left > 0 else []
                if not ready:
                    raise TimeoutError
                for sock in ready:
                    rank = self.socks.index(sock)
                    replies[rank] = wire.recv(sock.fileno(), deadline=deadline)
                    del pending[rank]
            return [replies[r] for r in range(self.world_size)]
        except TimeoutError:
            late = sorted(pending)
            done = [r for r in range(self.world_size) if r not in late]
            self.close()
            raise RankTimeout(
                f"rank(s) {late} gave no answer within {timeout_s:.0f} s"
                + (f" while rank(s) {done} did: a rank is stuck (e.g. in a collective another rank skipped)" if done else "")
                + f"; all {self.world_size} rank processes were killed",
                late,
                replies,
            ) from None
        except (EOFError, OSError, wire.WireError) as e:
            self.close()
            raise RankDied(
                f"rank {rank} exited or broke the protocol: {e}; all {self.world_size} rank processes "
                f"were killed; rank {rank} log tail: {self.log_tail(rank)}",
                rank,
            ) from None

    def log_tail(self, rank: int, limit: int = 1200) -> str:
        return tail_of(self.work / f"rank{rank}" / "worker.log", limit)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and bool(self.socks)

    @property
    def pid(self) -> int | None:
        """The launcher's pid, which is also the process-group id of every rank."""
        return self.proc.pid if self.proc is not None else None

    def close(self) -> None:
        for sock in self.socks:
            try:
                if self.proc is not None and self.proc.poll() is None:
                    wire.send(sock.fileno(), P.request(P.Exit()), None, time.monotonic() + 1)
            except (OSError, TimeoutError):
                pass
            sock.close()
        self.socks = []
        if self.proc is not None:
            sandbox.stop(self.proc)  # TERM then KILL to the whole group: every rank, even a stuck one

    def cleanup(self) -> None:
        self.close()
        sandbox.remove_tree(self.scratch.path)  # never raises on what the child left (links, fifos, 000 dirs)
        self.scratch.cleanup()
