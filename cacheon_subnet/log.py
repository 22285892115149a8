"""structlog setup: human console on a TTY, JSON lines otherwise (pm2, CI, files)."""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

import structlog

_configured = False


def configure(level: str | None = None, json: bool | None = None, file: TextIO | None = None,
              force: bool = False) -> None:
    """Configure once per process (force: again). Logs go to stderr so stdout stays for results;
    `file` sends them (as JSON lines) elsewhere, e.g. the demo's log file, away from its summary."""
    global _configured
    if _configured and not force:
        return
    level_name = (level or os.environ.get("CACHEON_LOG_LEVEL", "info")).upper()
    lvl = getattr(logging, level_name, logging.INFO)
    sink = file or sys.stderr
    use_json = (not sink.isatty()) if json is None else json
    renderer = structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(file=sink),
        cache_logger_on_first_use=True,
    )
    _configured = True


def get_logger(name: str = "cacheon", **bind: object) -> structlog.stdlib.BoundLogger:
    configure()
    return structlog.get_logger(name).bind(**bind)
