"""structlog setup: human console on a TTY, JSON lines otherwise (pm2, CI, files)."""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

import structlog

_configured = False


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

    def render(self, logger: object, name: str, event: dict) -> str:
        return (_JSON if self.json else _CONSOLE)(logger, name, event)


_SINK = _Sink()
_JSON = structlog.processors.JSONRenderer()
_CONSOLE = structlog.dev.ConsoleRenderer()


def configure(level: str | None = None, json: bool | None = None, file: TextIO | None = None,
              force: bool = False) -> None:
    """Configure once per process (force: again). Logs go to stderr so stdout stays for results;
    `file` sends them (as JSON lines) elsewhere, e.g. the demo's log file, away from its summary."""
    global _configured
    if _configured and not force:
        return
    level_name = (level or os.environ.get("CACHEON_LOG_LEVEL", "info")).upper()
    lvl = getattr(logging, level_name, logging.INFO)
    _SINK.target = file
    _SINK.json = (not _SINK.isatty()) if json is None else json
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            _SINK.render,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(file=_SINK),
        cache_logger_on_first_use=True,
    )
    _configured = True


def get_logger(name: str = "cacheon", **bind: object) -> structlog.stdlib.BoundLogger:
    configure()
    return structlog.get_logger(name).bind(**bind)
