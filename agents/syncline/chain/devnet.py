"""A local anvil devnet: the real binary on a free loopback port, plus time-travel helpers.

The binary is started directly (not through the npm node shim, which leaves anvil running when
it is killed). Development account keys are read from anvil's ``--config-out`` file, so no key
is written in the source tree.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from web3 import Web3

from syncline.chain.toolchain import foundry_binary
from syncline.errors import ToolchainError

DEVNET_CHAIN_ID = 31337


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Devnet:
    """A running anvil process."""

    rpc_url: str
    pid: int
    config_path: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def private_keys(self) -> list[str]:
        """The development accounts' keys, from anvil's ``--config-out`` file."""
        data = json.loads(self.config_path.read_text())
        return list(data["private_keys"])

    def web3(self) -> Web3:
        return Web3(Web3.HTTPProvider(self.rpc_url, request_kwargs={"timeout": 60}))

    def stop(self) -> None:
        """Terminate anvil and wait for it to exit."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=10)
            return
        stop_process(self.pid)

    def __enter__(self) -> Devnet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_anvil(
    workdir: Path,
    *,
    port: int | None = None,
    accounts: int = 12,
    balance_eth: int = 10_000,
    block_time: float | None = None,
    detach: bool = False,
    timeout_s: float = 30.0,
) -> Devnet:
    """Start anvil on 127.0.0.1 and wait until it answers JSON-RPC.

    Parameters
    ----------
    workdir
        Directory for the config-out (keys) file and the log.
    detach
        Start in a new session so the process outlives the caller (``syncline devnet up``).
    block_time
        Seconds between blocks; ``None`` mines a block per transaction.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    config_path = workdir / "anvil-config.json"
    log_path = workdir / "anvil.log"
    config_path.unlink(missing_ok=True)
    cmd = [
        str(foundry_binary("anvil")),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--chain-id",
        str(DEVNET_CHAIN_ID),
        "--accounts",
        str(accounts),
        "--balance",
        str(balance_eth),
        "--config-out",
        str(config_path),
        "--code-size-limit",
        "24576",
    ]
    if block_time is not None:
        cmd += ["--block-time", str(block_time)]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=detach
        )
    rpc_url = f"http://127.0.0.1:{port}"
    devnet = Devnet(rpc_url=rpc_url, pid=proc.pid, config_path=config_path, log_path=log_path, process=proc)
    deadline = time.monotonic() + timeout_s
    w3 = devnet.web3()
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ToolchainError(f"anvil exited with code {proc.returncode}; see {log_path}")
        try:
            if w3.is_connected() and config_path.exists() and config_path.stat().st_size > 0:
                json.loads(config_path.read_text())
                return devnet
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    devnet.stop()
    raise ToolchainError(f"anvil did not answer on {rpc_url} within {timeout_s:.0f}s; see {log_path}")


def stop_process(pid: int) -> None:
    """SIGTERM a process by pid, wait up to 5 s, then SIGKILL it (no error if it is already gone)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------------- time travel and snapshots


def increase_time(w3: Web3, seconds: int) -> None:
    """Move the chain clock forward and mine a block."""
    w3.provider.make_request("evm_increaseTime", [int(seconds)])  # type: ignore[arg-type]
    w3.provider.make_request("evm_mine", [])  # type: ignore[arg-type]


def set_next_timestamp(w3: Web3, timestamp: int) -> None:
    """Mine a block whose timestamp is exactly ``timestamp``."""
    w3.provider.make_request("evm_mine", [int(timestamp)])  # type: ignore[arg-type]


def snapshot(w3: Web3) -> str:
    resp: dict[str, Any] = w3.provider.make_request("evm_snapshot", [])  # type: ignore[arg-type,assignment]
    return str(resp["result"])


def revert(w3: Web3, snapshot_id: str) -> None:
    resp: dict[str, Any] = w3.provider.make_request("evm_revert", [snapshot_id])  # type: ignore[arg-type,assignment]
    if not resp.get("result"):
        raise ToolchainError(f"evm_revert({snapshot_id}) failed: {resp}")


def chain_time(w3: Web3) -> int:
    """Timestamp of the latest block."""
    return int(w3.eth.get_block("latest")["timestamp"])


def is_running(pid: int) -> bool:
    """Whether a process with this pid exists."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
