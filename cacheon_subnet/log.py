"""structlog setup: human console on a TTY, JSON lines otherwise (pm2, CI, files).

Third-party libraries log through the stdlib `logging` module (the bittensor SDK, SGLang,
urllib3, aiohttp, websockets...). `configure` puts one handler on the root logger that renders
their records with the same processors and renderer, so a pm2 log file is one JSON object per
line whoever wrote it (`logger` names the library). `warnings.warn` goes the same way.

The `cacheon` CLI (`route_cli`) keeps its log lines out of its human output: when stdout and
stderr are one terminal or one pipe, they go to a file (CACHEON_LOG_FILE) and only warnings and
errors reach stderr, as one short line each (a new user saw JSON lines between verify's, submit's
and `validator run`'s own words). CACHEON_LOG_TO / --log-to pick stderr or the file outright.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO, cast

import structlog

from cacheon_subnet.env import HOME, LOG_FILE, LOG_LEVEL, LOG_TO

_configured = False
_HANDLER_NAME = "cacheon-structlog"
# Chatty at INFO and not ours: kept at WARNING unless CACHEON_LOG_LEVEL=debug.
_QUIET = ("urllib3", "websockets", "asyncio", "aiohttp.access", "filelock", "httpx", "httpcore")


class _Sink:
    """Where every logger writes, switchable later: structlog caches a logger (its file and
    processors) on first use, so `configure(file=..., force=True)` must redirect, not rebuild."""

    def __init__(self) -> None:
        self.target: TextIO | None = None  # None: the current sys.stderr
        self.json = True
        self.echo = ""  # set (the log file's path): warnings and errors also get a plain stderr line

    def _out(self) -> TextIO:
        return self.target or sys.stderr

    def write(self, text: str) -> int:
        return self._out().write(text)

    def flush(self) -> None:
        self._out().flush()

    def isatty(self) -> bool:
        return self._out().isatty()

    def render(self, logger: Any, name: str, event: MutableMapping[str, Any]) -> str | bytes:
        if self.echo and event.get("level") in _ECHOED:
            _echo(event, self.echo)
        return (_JSON if self.json else _CONSOLE)(logger, name, event)


_ECHOED = ("warning", "error", "critical", "exception")
_HIDDEN = {"level", "timestamp", "event", "logger", "_record", "_from_structlog"}


def _echo(event: MutableMapping[str, Any], path: str) -> None:
    fields = ", ".join(f"{k}={v}" for k, v in event.items() if k not in _HIDDEN)
    try:
        print(
            f"cacheon: {event.get('level')}: {event.get('event')}{f' ({fields})' if fields else ''} [log: {path}]",
            file=sys.stderr,
            flush=True,
        )
    except (ValueError, OSError):  # a closed stderr must not turn a log line into a crash
        pass


class _LazyFile:
    """The CLI's log file, opened (appending, its dir made) on the first line: a verb that logs
    nothing creates nothing. If it cannot be opened, lines go to stderr after all."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._f: TextIO | None = None

    def _out(self) -> TextIO:
        if self._f is None:
            try:
                os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
                self._f = open(self.path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - the process's log
            except OSError:
                return sys.stderr
        return self._f

    def write(self, text: str) -> int:
        return self._out().write(text)

    def flush(self) -> None:
        self._out().flush()

    def isatty(self) -> bool:
        return False


def cli_log_file() -> str:
    return os.path.expanduser(LOG_FILE.get() or os.path.join(HOME.get(), "logs", "cacheon.log"))


def _shared_screen() -> bool:
    """stdout and stderr are one terminal or one pipe, where log lines would land between the
    verb's own output. A shared regular file (`>run.log 2>&1`) is a capture asked for: kept."""
    try:
        out, err = os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):  # replaced streams (pytest's capture): not a screen
        return False
    same = (out.st_dev, out.st_ino) == (err.st_dev, err.st_ino)
    return same and (stat.S_ISCHR(err.st_mode) or stat.S_ISFIFO(err.st_mode))


def route_cli(level: str | None = None, to: str | None = None) -> str:
    """configure() for the `cacheon` CLI and the neurons' entry points: `to` (--log-to) or
    CACHEON_LOG_TO. Returns where the lines go: "stderr" or the log file's path."""
    choice = to or LOG_TO.get()
    if choice == "stderr" or (choice == "auto" and not _shared_screen()):
        configure(level=level)  # as before: a process that already logs keeps its set-up (tests capture it)
        return "stderr"
    path = cli_log_file()
    configure(level=level, json=True, file=cast(TextIO, _LazyFile(path)), force=True)
    _SINK.echo = path
    return path


_SINK = _Sink()
_JSON = structlog.processors.JSONRenderer()
_CONSOLE = structlog.dev.ConsoleRenderer()


def _shared() -> list:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
    ]


def configure(level: str | None = None, json: bool | None = None, file: TextIO | None = None, force: bool = False) -> None:
    """Configure once per process (force: again). Logs go to stderr so stdout stays for results;
    `file` sends them (as JSON lines) elsewhere, e.g. the demo's log file, away from its summary."""
    global _configured
    if _configured and not force:
        return
    level_name = (level or LOG_LEVEL.get()).upper()
    lvl = getattr(logging, level_name, logging.INFO)
    _SINK.target = file
    _SINK.echo = ""
    _SINK.json = (not _SINK.isatty()) if json is None else json
    structlog.configure(
        processors=[*_shared(), _SINK.render],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        # cast: the sink is a TextIO by duck typing (write/flush/isatty), all PrintLogger uses
        logger_factory=structlog.PrintLoggerFactory(file=cast(TextIO, _SINK)),
        cache_logger_on_first_use=True,
    )
    _route_stdlib(lvl)
    _configured = True


def _route_stdlib(lvl: int) -> None:
    """One root handler rendering stdlib records like ours, into the same sink; other root
    handlers are removed (a library's basicConfig would print a second, non-JSON copy of each line)."""
    handler = logging.StreamHandler(_SINK)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.stdlib.add_logger_name,
                *(p for p in _shared() if p is not structlog.contextvars.merge_contextvars),
            ],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, _SINK.render],
        )
    )
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(lvl)
    for name in _QUIET:
        logging.getLogger(name).setLevel(max(lvl, logging.WARNING) if lvl > logging.DEBUG else lvl)
    logging.captureWarnings(True)


def adopt(name: str) -> None:
    """Make a library logger that installed its own handlers (the bittensor SDK does) propagate
    to our root handler instead. Call after importing that library."""
    lg = logging.getLogger(name)
    for h in list(lg.handlers):
        lg.removeHandler(h)
    lg.propagate = True


def get_logger(name: str = "cacheon", **bind: object) -> structlog.stdlib.BoundLogger:
    configure()
    return structlog.get_logger(name).bind(**bind)
