"""An agent stopped by a signal says so: one ``agent.stopped`` line naming the signal and the
role, for SIGTERM (``kill``, a supervisor) as for Ctrl-C; SIGTERM exits with status 143."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from structlog.testing import capture_logs

from syncline.run import loop

AGENT = """
import sys, time
from syncline.observability import configure_logging
from syncline.run.loop import run_forever
configure_logging("info", "json")
def step():
    print("ticking", flush=True)
    time.sleep(0.05)
    return False
run_forever(step, poll_interval_s=0.05, role="trainer")
"""


def test_sigterm_logs_one_line_and_exits_143() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", AGENT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ticking"  # the loop runs
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert [(e["event"], e["role"], e["signal"]) for e in lines] == [("agent.stopped", "trainer", "SIGTERM")], err
    assert proc.returncode == 143, err


def test_ctrl_c_logs_one_line_and_still_interrupts() -> None:
    def step() -> bool:
        raise KeyboardInterrupt

    with capture_logs() as logs, pytest.raises(KeyboardInterrupt):
        loop.run_forever(step, poll_interval_s=0.01, role="witness")
    assert [(e["event"], e["role"], e["signal"]) for e in logs] == [("agent.stopped", "witness", "SIGINT")]
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handler is the loop's only while it runs
