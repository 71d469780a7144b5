"""Structured logging for agents and the demo: readable key=value lines on a terminal, JSON lines
with ``SYNCLINE_LOG_FORMAT=json``. Never pass a key to a logger; ``Signer`` prints its address only."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import structlog


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
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> Any:
    return structlog.get_logger(name)
