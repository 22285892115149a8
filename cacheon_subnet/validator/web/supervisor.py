"""The leaderboard in a process of its own, watched by the validator (or by `cacheon leaderboard`).

Why: the page is public (its address is on chain) and was served from a thread of the
validator, so a connection flood that needed no stake took the validator's fds and every later
pass crashed. Now the validator only
* binds the listening socket (as root: any port; a bind error is a usage error before anything
  starts; restarts of the web process reuse it) and hands it over;
* writes a snapshot of what the page shows (snapshot.py) into a fresh dir under the run dir
  (`CACHEON_WEB_RUN_DIR`, default /run/cacheon-web), within a few seconds of any change of the
  state DB (at most ~5 % of a core: the interval grows with the copy's cost);
* starts the web process (child.py) behind the sandbox wall (cacheon_subnet.sandbox): a uid
  leased from the sandbox range for as long as it runs (no contribution child shares it), no
  network namespace of its own (it can accept on the handed socket and reach nothing), a view
  with the snapshot dir read-only and neither the state dir nor the wallet, seccomp, and rlimits
  (fds above the connection cap, address space, processes, no CPU-time limit: it runs for days);
* restarts it when it dies (backoff 1 s doubling to 30 s), forwards a bounded share of its log,
  and stops it on exit (it also dies with the validator: bwrap --die-with-parent).
Where the wall cannot start it fails closed with the sandbox's reason, unless weak mode was asked
for (CACHEON_SANDBOX=weak, local chains only), which is said on stderr and in the log.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cacheon_subnet import httpsite, lifecycle, sandbox
from cacheon_subnet.connguard import FD_RESERVE, Limits, Tally, listen_socket
from cacheon_subnet.env import SANDBOX, WEB_MEMORY_MIB, WEB_RUN_DIR
from cacheon_subnet.errors import SandboxError
from cacheon_subnet.log import get_logger
from cacheon_subnet.validator.web import snapshot
from cacheon_subnet.validator.web.server import ENV_PREFIX, LIMITS, LeaderboardError

POLL_S = 1.0  # how often the supervisor looks at the child and the state DB
SNAPSHOT_EVERY_S = 3.0  # at most one snapshot per this many seconds (a busy pass writes often) ...
SNAPSHOT_SHARE = 20  # ... and per 20x the last one's cost: at most ~5 % of a core (0.7 s for 5000 contributions)
BACKOFF_S = (1.0, 30.0)  # restart delay: first, cap (doubling between)
HEALTHY_S = 60.0  # a child that ran this long resets the backoff
LOG_LINES = 30  # child log lines forwarded per LOG_WINDOW_S; the rest are counted
LOG_WINDOW_S = 60.0
LINE_MAX = 2000


@dataclass(frozen=True)
class WebConfig:
    """What the web process may use. Memory: Python + aiohttp + jinja2 take ~60 MiB resident and
    ~0.5 GiB of address space; the connection bounds keep a flood's share to tens of MiB."""

    limits: Limits = LIMITS
    memory_mib: int = WEB_MEMORY_MIB.default
    run_dir: str = ""  # empty: CACHEON_WEB_RUN_DIR, else /run/cacheon-web, else /var/tmp/cacheon-web

    @property
    def nofile(self) -> int:
        return max(1024, self.limits.max_conns + 2 * FD_RESERVE)

    @classmethod
    def from_env(cls) -> WebConfig:
        return cls(Limits.from_env(ENV_PREFIX, LIMITS), WEB_MEMORY_MIB.get(), WEB_RUN_DIR.get() or "")


def run_dir(config: WebConfig) -> Path:
    """The root-owned base of snapshot dirs: searchable by every uid (the web uid reaches its
    snapshot through it), writable by no other (nothing can swap a snapshot in)."""
    if config.run_dir:
        base = Path(config.run_dir)
    elif os.access("/run", os.W_OK):
        base = Path("/run/cacheon-web")
    else:
        base = Path("/var/tmp/cacheon-web")
    base.mkdir(mode=0o755, parents=True, exist_ok=True)
    st = os.lstat(base)
    if base.is_symlink() or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise LeaderboardError(
            f"leaderboard: run dir {base} must be a real dir owned by uid {os.geteuid()} that no "
            f"one else can write (set {WEB_RUN_DIR.name})"
        )
    from cacheon_subnet.sandbox import fsview

    why = fsview.unreachable_by(sandbox.DEFAULT_UID, sandbox.DEFAULT_UID, str(base))
    if why and os.geteuid() == 0:
        raise LeaderboardError(
            f"leaderboard: the web uid could not reach run dir {base}: {why} "
            f"(set {WEB_RUN_DIR.name} to a dir every uid can search)"
        )
    for old in base.glob("board-*"):  # a crashed run's dirs (its pid is gone)
        pid = (old / "pid").read_text().strip() if (old / "pid").is_file() else ""
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(old, ignore_errors=True)
    return base


def web_policy(config: WebConfig, snap_dir: Path) -> sandbox.SandboxPolicy:
    return sandbox.SandboxPolicy(
        cpu_seconds=None,
        address_space_bytes=config.memory_mib << 20,
        file_bytes=1 << 20,
        open_files=config.nofile,
        max_processes=32,
        scratch_bytes=16 << 20,
        tmp_bytes=16 << 20,
        inodes=4096,
        isolate_network=True,
        ro_paths=(str(snap_dir),),
        extra_env={"MALLOC_ARENA_MAX": "2"},
    )


class WebSupervisor:
    """Binds host:port, keeps the snapshot fresh and the web process running (`start`/`stop`)."""

    def __init__(self, state_dir: str | Path, host: str, port: int, config: WebConfig | None = None) -> None:
        self.state_dir, self.host = Path(state_dir), host
        self.config = config or WebConfig.from_env()
        self.log = get_logger("cacheon.validator.web")
        self.sock: socket.socket | None = None
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._started = 0.0
        self._dir: Path | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sig: tuple[int, ...] | None = None
        self._snap_at = 0.0
        self._snap_cost = 0.0
        self._snap_errors = Tally(self.log.warning, "web.snapshot_failed", 60.0)

    @property
    def url(self) -> str:
        return httpsite.http_url(self.host, self.port)

    @property
    def snapshot_dir(self) -> Path | None:
        return self._dir

    def start(self) -> WebSupervisor:
        """Listening and the web process started, or LeaderboardError saying why not."""
        try:
            self.sock = listen_socket(self.host, self.port, self.config.limits.backlog)
        except OSError as exc:
            raise LeaderboardError(f"leaderboard: cannot listen on {self.host}:{self.port}: {exc}") from exc
        self.port = int(self.sock.getsockname()[1])
        try:
            self._dir = Path(tempfile.mkdtemp(prefix="board-", dir=run_dir(self.config)))
            os.chmod(self._dir, 0o755)
            (self._dir / "pid").write_text(str(os.getpid()))
            (self._dir / "scratch").mkdir()
            self._snapshot(force=True)
            self._launch()
        except BaseException:
            self._cleanup()
            raise
        self._thread = threading.Thread(target=self._watch, name="cacheon-web-supervisor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(15)
        self._cleanup()

    def _cleanup(self) -> None:
        if self.proc is not None:
            sandbox.stop(self.proc)
            self.proc = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> WebSupervisor:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- the web process --------------------------------------------------------------------

    def _launch(self) -> None:
        assert self.sock is not None and self._dir is not None
        argv = [
            sys.executable,
            "-m",
            "cacheon_subnet.validator.web.child",
            "--fd",
            str(self.sock.fileno()),
            "--snapshot-dir",
            str(self._dir),
            "--limits",
            json.dumps(self.config.limits.to_json()),
        ]
        policy = web_policy(self.config, self._dir)
        weak = sandbox.weak_requested(policy)
        try:
            proc = sandbox.launch(
                argv,
                scratch=self._dir / "scratch",
                policy=policy,
                pass_fds=[self.sock.fileno()],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        except (SandboxError, OSError) as exc:  # OSError: no fork, pipe or mount now (EAGAIN, EMFILE, ENOMEM):
            # a LeaderboardError, so the watch thread tries again after its backoff instead of dying with it
            raise LeaderboardError(
                f"leaderboard: the web process cannot start behind the sandbox wall, and it never "
                f"serves without it unless {SANDBOX.name}=weak is set: {exc}"
            ) from None
        self.proc, self._started = proc, time.monotonic()
        uid = getattr(proc, "cacheon_uid", os.getuid())
        if weak:
            msg = (
                f"leaderboard: WEAK MODE ({weak}): the web process runs as uid {uid}, the validator's own, without "
                "its own filesystem view or seccomp filter"
            )
            print(msg, file=sys.stderr, flush=True)
            self.log.warning("web.unwalled", reason=weak, uid=uid)
        self.log.info(
            "web.child_started",
            pid=proc.pid,
            uid=uid,
            walled=not weak,
            url=self.url,
            snapshot_dir=str(self._dir),
            restarts=self.restarts,
            nofile=self.config.nofile,
            memory_mib=self.config.memory_mib,
            **self.config.limits.to_json(),
        )
        threading.Thread(target=self._drain, args=(proc,), name="cacheon-web-log", daemon=True).start()

    def _drain(self, proc: subprocess.Popen[bytes]) -> None:
        """Forward the child's log lines, at most LOG_LINES per LOG_WINDOW_S, each cut to LINE_MAX."""
        assert proc.stdout is not None
        window, sent, dropped = time.monotonic(), 0, 0
        for raw in iter(lambda: proc.stdout.readline(LINE_MAX), b""):  # type: ignore[union-attr]
            now = time.monotonic()
            if now - window >= LOG_WINDOW_S:
                if dropped:
                    self.log.warning("web.child_log_dropped", lines=dropped, window_s=LOG_WINDOW_S)
                window, sent, dropped = now, 0, 0
            if sent >= LOG_LINES:
                dropped += 1
                continue
            sent += 1
            line = raw.decode("utf-8", "replace").strip()
            try:
                doc = json.loads(line)
            except ValueError:
                doc = None
            if isinstance(doc, dict):
                level = str(doc.get("level")) if doc.get("level") in ("warning", "error") else "info"
                fields = {
                    f"c_{k}": str(v)[:300] for k, v in list(doc.items())[:16] if k not in ("event", "timestamp", "level")
                }
                getattr(self.log, level)("web.child", child_event=str(doc.get("event", ""))[:100], **fields)
            elif line:
                self.log.info("web.child", line=line[:LINE_MAX])

    def _watch(self) -> None:
        """Every POLL_S: refresh the snapshot; when the web process is gone (or its restart
        failed), start it again after the backoff."""
        delay = BACKOFF_S[0]
        while not self._stop.wait(POLL_S):
            self._snapshot()
            proc = self.proc
            if lifecycle.SHUTDOWN.is_set() or (proc is not None and proc.poll() is None):
                continue
            if proc is not None:
                ran = time.monotonic() - self._started
                self.log.warning(
                    "web.child_exited", pid=proc.pid, rc=proc.returncode, ran_s=round(ran, 1), restart_in_s=delay
                )
                sandbox.stop(proc)
                self.proc = None
                if ran >= HEALTHY_S:
                    delay = BACKOFF_S[0]
            if self._stop.wait(delay):
                return
            delay = min(delay * 2, BACKOFF_S[1])
            self.restarts += 1
            try:
                self._launch()
            except LeaderboardError as exc:  # e.g. every sandbox uid in use: tried again after the backoff
                self.log.error("web.restart_failed", error=str(exc)[:1000], retry_in_s=delay)

    # -- the snapshot -----------------------------------------------------------------------

    def _snapshot(self, force: bool = False) -> None:
        try:
            sig = snapshot.signature(self.state_dir)
        except OSError as exc:  # the watch thread must outlive whatever the state dir does
            self._snap_errors.note(error=f"{type(exc).__name__}: {exc}"[:500])
            return
        now = time.monotonic()
        wait = max(SNAPSHOT_EVERY_S, SNAPSHOT_SHARE * self._snap_cost)
        if sig is None or self._dir is None or (not force and (sig == self._sig or now - self._snap_at < wait)):
            return
        try:
            snapshot.write(self.state_dir, self._dir)
        except Exception as exc:  # noqa: BLE001 - the page shows the last good snapshot; retried next tick
            self._snap_errors.note(error=f"{type(exc).__name__}: {exc}"[:500])
            return
        self._sig, self._snap_at, self._snap_cost = sig, now, time.monotonic() - now


def serve_forever(state_dir: str | Path, host: str, port: int) -> None:
    """`cacheon leaderboard`: the same web process over an existing state dir, until SIGINT/SIGTERM."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    board = WebSupervisor(state_dir, host, port).start()
    try:
        print(f"leaderboard: {board.url}/ (state {state_dir}, read-only)", flush=True)
        while not stop.wait(3600):
            pass
    finally:
        board.stop()
