"""Host side of the worker channel: start the sandboxed worker, talk to it with deadlines."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cacheon_subnet import sandbox
from cacheon_subnet.bundle import Bundle, Scratch
from cacheon_subnet.sandbox.logsink import LogSink, tail_of
from cacheon_subnet.verify import protocol as P
from cacheon_subnet.verify import wire


class WorkerTimeout(Exception):
    """The worker did not answer within the deadline (it has been killed)."""


class WorkerDied(Exception):
    """The worker exited or broke the protocol (it has been killed)."""


@dataclass(frozen=True)
class WorkerConfig:
    device: str = "cpu"
    policy: sandbox.SandboxPolicy = sandbox.SandboxPolicy()
    # bench: SGLang's kernels for these slots load before the audit guard is armed (its
    # libraries are dlopen'ed by SGLang's own frames, which the armed guard refuses)
    preload_stock: tuple[str, ...] = ()
    # bench: (slot, dtype, case) calls each stock kernel makes once before arming (JIT builds)
    preload_cases: tuple[tuple[str, str, dict[str, Any]], ...] = ()
    # CUDA ops: (op key, sealed artifact dir) the host compiled (verify/native_gate.py
    # worker_artifacts); copied read-only into the worker's view, re-digested by the worker
    native: tuple[tuple[str, str], ...] = ()


CPU_ADDRESS_SPACE = 8 << 30  # a CPU worker (torch + triton interpreter) maps about 1 GiB


def package_name(digest: str) -> str:
    """Sealed import namespace: contribution modules never shadow anything else."""
    return f"cacheon_c_{digest}"


def worker_policy(config: WorkerConfig, **overrides: object) -> sandbox.SandboxPolicy:
    """The configured sandbox policy plus the worker environment for the device."""
    env = dict(config.policy.extra_env)
    if config.device == "cpu":
        env.setdefault("TRITON_INTERPRET", "1")
        env.setdefault("CUDA_VISIBLE_DEVICES", "")
        # The interpreter runs one numpy op per program: BLAS thread pools only contend.
        for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(k, "1")
        # Fixed glibc thresholds: no mmap/munmap churn (page faults) on MB-sized temporaries,
        # which otherwise makes CPU timings depend on allocation history, not on the kernel.
        env.setdefault("MALLOC_MMAP_THRESHOLD_", str(1 << 30))
        env.setdefault("MALLOC_TRIM_THRESHOLD_", str(1 << 30))
    wall: dict[str, object] = {"gpu": config.device != "cpu"}  # NVIDIA device nodes in the view
    if config.device == "cpu" and config.policy.address_space_bytes is None:
        wall["address_space_bytes"] = CPU_ADDRESS_SPACE  # a memory balloon ends in MemoryError
    return sandbox.SandboxPolicy(**{**config.policy.__dict__, "extra_env": env, **wall, **overrides})


def write_natives(base: Path, native: tuple[tuple[str, str], ...]) -> tuple[Path | None, list[str]]:
    """The host-built artifacts, copied read-only under base/native/<digest> (only these, never
    the host's whole cache), and the worker's `--native OPKEY=DIGEST` arguments."""
    if not native:
        return None, []
    root = base / "native"
    root.mkdir()
    argv: list[str] = []
    for key, path in native:
        src = Path(path)
        dst = root / src.name
        if not dst.exists():
            dst.mkdir()
            for f in sorted(src.iterdir()):
                (dst / f.name).write_bytes(f.read_bytes())
                os.chmod(dst / f.name, 0o444)
            os.chmod(dst, 0o555)
        argv += ["--native", f"{key}={src.name}"]
    os.chmod(root, 0o555)
    return root, ["--native-root", str(root), *argv]


def write_namespace(base: Path, bundle: Bundle) -> tuple[Path, str]:
    """The bundle, read-only, as package `cacheon_c_<digest>` under base/ns (the import root)."""
    os.chmod(base, 0o755)
    pkg = package_name(bundle.digest)
    ns = base / "ns"
    ns.mkdir()
    bundle.write_to(ns / pkg, read_only=True)
    os.chmod(ns, 0o555)
    return ns, pkg


class WorkerClient:
    """One sandboxed worker process holding one bundle. Use as a context manager."""

    def __init__(self, bundle: Bundle, config: WorkerConfig) -> None:
        self.bundle = bundle
        self.config = config
        self.scratch = Scratch("cacheon-verify-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self.log_path = self.scratch.path / "worker.log"
        self._log: LogSink | None = None

    def __enter__(self) -> WorkerClient:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        base = self.scratch.path
        ns, pkg = write_namespace(base, self.bundle)
        work = base / "work"
        host_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        natives, native_argv = write_natives(base, self.config.native)
        ro = (str(ns),) + ((str(natives),) if natives is not None else ())
        policy = dataclasses.replace(worker_policy(self.config), ro_paths=ro)  # bundle (+ artifacts) visible, read-only
        # through a pipe the host drains (capped on disk): handed the file itself, the worker wrote up
        # to its RLIMIT_FSIZE (256 MiB) onto the validator's disk per verify (red team 2026-12-04)
        self._log = log = LogSink(self.log_path)
        try:
            self.proc = sandbox.launch(
                [
                    sys.executable,
                    "-m",
                    "cacheon_subnet.verify.worker",
                    "--fd",
                    str(child_sock.fileno()),
                    "--bundle-root",
                    str(ns),
                    "--package",
                    pkg,
                    "--device",
                    self.config.device,
                    *native_argv,
                    *(["--preload-stock", ",".join(self.config.preload_stock)] if self.config.preload_stock else []),
                    *(
                        [
                            "--preload-cases",
                            json.dumps([{"slot": s, "dtype": d, "case": c} for s, d, c in self.config.preload_cases]),
                        ]
                        if self.config.preload_cases
                        else []
                    ),
                ],
                scratch=work,
                policy=policy,
                pass_fds=[child_sock.fileno()],
                stdout=log.fileno(),
                stderr=log.fileno(),
            )
        except BaseException:
            log.close()
            raise
        finally:
            log.writer_passed()
        child_sock.close()
        self.sock = host_sock

    def request(
        self,
        msg: dict[str, Any],
        tensors: dict[str, torch.Tensor] | None,
        timeout_s: float,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """Send one request (a verify/protocol.py wire dict), return the reply as it came: its
        reader decodes it (protocol.read_reply) as the message it expects. `on_progress`: progress
        frames before the reply (bench's stock warm-up), decoded here, go to it within the same
        deadline; without it they are the reply. A malformed progress frame is a ProtocolError."""
        assert self.sock is not None
        deadline = time.monotonic() + timeout_s
        fd = self.sock.fileno()
        try:
            wire.send(fd, msg, tensors, deadline)
            while True:
                head, got = wire.recv(fd, deadline=deadline)
                if on_progress is None or P.WORKER.kind_of(head) is not P.Progress:
                    return head, got
                on_progress(P.reply(P.read_reply(head, P.Progress)))
        except TimeoutError:
            self.close()
            raise WorkerTimeout(f"no answer within {timeout_s:.0f} s") from None
        except (EOFError, OSError, wire.WireError) as e:
            code = self.proc.poll() if self.proc else None
            self.close()
            raise WorkerDied(f"worker exited (code {code}): {e}; log tail: {self.log_tail()}") from None

    def log_tail(self, limit: int = 1200) -> str:
        if self._log is not None and not self._log._file.closed:
            return self._log.tail(limit)  # still running: the drain's in-memory tail
        return tail_of(self.log_path, limit)  # from the end, never the whole file

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.sock is not None

    def close(self) -> None:
        if self.sock is not None:
            try:
                if self.proc is not None and self.proc.poll() is None:
                    wire.send(self.sock.fileno(), P.request(P.Exit()), None, time.monotonic() + 1)
            except (OSError, TimeoutError):
                pass
            self.sock.close()
            self.sock = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=3)
            except Exception:  # noqa: BLE001
                pass
            sandbox.stop(self.proc)
        if self._log is not None:
            self._log.close()  # the child is gone: the file gets the tail

    def cleanup(self) -> None:
        self.close()
        sandbox.remove_tree(self.scratch.path)  # never raises on what the child left (links, fifos, 000 dirs)
        self.scratch.cleanup()
