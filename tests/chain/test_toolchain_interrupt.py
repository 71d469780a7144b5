"""The first compile of the contracts (minutes): a progress line before it starts, and Ctrl-C
during it reported as an interruption, not as a compiler failure (the terminal's SIGINT reaches the
compiler process too, and it may die before Python sees the signal)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from syncline.chain.devnet import Devnet

pytestmark = [pytest.mark.chain]


def test_ctrl_c_during_the_first_compile_says_interrupted(tmp_path: Path, devnet: Devnet) -> None:
    env = {**os.environ, "SYNCLINE_STATE_DIR": str(tmp_path / "state"), "DEPLOYER_KEY": devnet.private_keys()[0]}
    cmd = [sys.executable, "-m", "syncline.cli", "deploy", "--rpc-url", devnet.rpc_url, "--key-env", "DEPLOYER_KEY"]
    cmd += ["--out", str(tmp_path / "out")]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        compiler = None
        deadline = time.monotonic() + 60
        while compiler is None and time.monotonic() < deadline and proc.poll() is None:
            for child in psutil.Process(proc.pid).children(recursive=True):
                try:
                    if "--standard-json" in child.cmdline():
                        compiler = child
                except psutil.NoSuchProcess:
                    continue
            time.sleep(0.05)
        assert compiler is not None, "the compiler never started"
        time.sleep(0.5)
        compiler.send_signal(signal.SIGINT)  # the compiler dies first; Python sees no signal at all
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "contracts.compiling" in err and "first run" in err, err
    assert proc.returncode == 130, err
    assert "error: interrupted" in err and "solc failed" not in err, err
