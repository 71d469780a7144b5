"""Structured logging for agents and the demo: readable key=value lines on a terminal, JSON lines
with ``SYNCLINE_LOG_FORMAT=json``. Never pass a key to a logger; ``Signer`` prints its address only."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import structlog


class StderrLogger:
    """Prints each line to whatever ``sys.stderr`` is *now*: a logger that kept the stream it was
    configured with would write to a closed file once that stream is replaced (a test's capture,
    a daemonised agent), and every later log call would raise."""

    def msg(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    log = debug = info = warn = warning = error = critical = exception = fatal = failure = err = msg


def _stderr_logger_factory(*_args: Any) -> StderrLogger:
    return StderrLogger()


def configure_logging(level: str | None = None, fmt: str | None = None) -> None:
    level_name = (level or os.environ.get("SYNCLINE_LOG_LEVEL", "info")).upper()
    fmt = fmt or os.environ.get("SYNCLINE_LOG_FORMAT", "console")
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty(), pad_event_to=28)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="%H:%M:%S", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level_name, logging.INFO)),
        logger_factory=_stderr_logger_factory,
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> Any:
    return structlog.get_logger(name)
