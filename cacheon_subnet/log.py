"""structlog setup: human console on a TTY, JSON lines otherwise (pm2, CI, files).

Third-party libraries log through the stdlib `logging` module (the bittensor SDK, SGLang,
urllib3, aiohttp, websockets...). `configure` puts one handler on the root logger that renders
their records with the same processors and renderer, so a pm2 log file is one JSON object per
line whoever wrote it (`logger` names the library). `warnings.warn` goes the same way.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO, cast

import structlog

from cacheon_subnet.env import LOG_LEVEL

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

    def _out(self) -> TextIO:
        return self.target or sys.stderr

    def write(self, text: str) -> int:
        return self._out().write(text)

    def flush(self) -> None:
        self._out().flush()

    def isatty(self) -> bool:
        return self._out().isatty()

    def render(self, logger: Any, name: str, event: MutableMapping[str, Any]) -> str | bytes:
        return (_JSON if self.json else _CONSOLE)(logger, name, event)


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
