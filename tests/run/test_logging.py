"""Logging survives the stream it was configured with being closed: an in-process CLI call
(``main([...])`` in a test, an agent whose stderr is swapped) configures logging while
``sys.stderr`` is a capture that is closed afterwards; every later log line must still print
instead of raising ``ValueError: I/O operation on closed file`` (CI failed 33 tests on this)."""

from __future__ import annotations

import io
import sys

import pytest
import structlog

from syncline.observability import configure_logging, get_logger


def test_a_closed_stderr_at_configure_time_does_not_break_later_logs(capsys: pytest.CaptureFixture[str]) -> None:
    saved = structlog.get_config()
    old = sys.stderr
    temporary = io.StringIO()
    try:
        sys.stderr = temporary
        configure_logging("info", "json")
        get_logger("t").info("first", n=1)
        sys.stderr = old
        temporary.close()  # the capture a test or a supervisor replaced
        get_logger("t").info("second", n=2)  # raised ValueError before
    finally:
        sys.stderr = old
        structlog.configure(**saved)
    assert '"event": "second"' in capsys.readouterr().err
