"""structlog setup: human console on a TTY, JSON lines otherwise (pm2, CI, files).

Third-party libraries log through the stdlib `logging` module (the bittensor SDK, SGLang,
urllib3, aiohttp, websockets...). `configure` puts one handler on the root logger that renders
their records with the same processors and renderer, so a pm2 log file is one JSON object per
line whoever wrote it (`logger` names the library). `warnings.warn` goes the same way.
"""

from __future__ import annotations

import logging
import os
import sys

import structlog

_configured = False
_HANDLER_NAME = "cacheon-structlog"
# Chatty at INFO and not ours: kept at WARNING unless CACHEON_LOG_LEVEL=debug.
_QUIET = ("urllib3", "websockets", "asyncio", "aiohttp.access", "filelock", "httpx", "httpcore")


def _shared() -> list:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
    ]


def configure(level: str | None = None, json: bool | None = None, force: bool = False) -> None:
    """Configure once per process (`force` re-configures). Logs go to stderr so stdout stays
    for results."""
    global _configured
    if _configured and not force:
        return
    level_name = (level or os.environ.get("CACHEON_LOG_LEVEL", "info")).upper()
    lvl = getattr(logging, level_name, logging.INFO)
    use_json = (not sys.stderr.isatty()) if json is None else json
    renderer = structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[*_shared(), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    _route_stdlib(lvl, renderer)
    _configured = True


def _route_stdlib(lvl: int, renderer: object) -> None:
    """One root handler rendering stdlib records like ours; other root handlers are removed
    (a library's basicConfig would print a second, non-JSON copy of each line)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name,
                           *(p for p in _shared() if p is not structlog.contextvars.merge_contextvars)],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer]))
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
