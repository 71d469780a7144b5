"""The ``syncline`` command line against real processes: devnet up/status/down and deploy to any RPC."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from web3 import Web3

from syncline.chain.deployment import Deployment
from syncline.chain.devnet import is_running, start_anvil
from syncline.chain.market import MarketClient
from syncline.paths import repo_root

pytestmark = [pytest.mark.chain]


def _syncline(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "syncline.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _env(state_dir: Path, **extra: str) -> dict[str, str]:
    """A private state dir for the CLI, seeded with the compiled-artifact cache (no recompilation)."""
    cache = repo_root() / ".syncline" / "artifacts"
    if cache.is_dir() and not (state_dir / "artifacts").exists():
        shutil.copytree(cache, state_dir / "artifacts")
    return {**os.environ, "SYNCLINE_STATE_DIR": str(state_dir), **extra}


def test_devnet_up_status_down(tmp_path: Path) -> None:
    env = _env(tmp_path)
    up = _syncline("devnet", "up", env=env)
    assert up.returncode == 0, up.stderr
    info = json.loads(up.stdout)
    anvil_pid = int((tmp_path / "devnet" / "anvil.pid").read_text())
    blob_pid = int((tmp_path / "devnet" / "blobstore.pid").read_text())
    try:
        w3 = Web3(Web3.HTTPProvider(info["rpc_url"]))
        assert w3.eth.chain_id == 31337
        market = MarketClient.from_deployment(Deployment.read(tmp_path / "devnet" / "deployment.json"), w3)
        assert market.task_count() == 0
        assert info["blob_store"].startswith("http://127.0.0.1:")
        status = _syncline("devnet", "status", env=env)
        assert json.loads(status.stdout)["running"] is True
        again = _syncline("devnet", "up", env=env)  # idempotent: reports the running devnet
        assert again.returncode == 0 and json.loads(again.stdout)["market"] == info["market"]
    finally:
        down = _syncline("devnet", "down", env=env)
    assert down.returncode == 0, down.stderr
    assert not is_running(anvil_pid) and not is_running(blob_pid)
    assert json.loads(_syncline("devnet", "status", env=env).stdout)["running"] is False


def test_deploy_to_another_rpc_with_an_env_key(tmp_path: Path) -> None:
    """`syncline deploy` works against any RPC with a key from the environment (here: a second anvil)."""
    with start_anvil(tmp_path / "other-chain") as other:
        key = other.private_keys()[3]
        out = tmp_path / "deployments" / "other"
        env = _env(tmp_path, DEPLOYER_KEY=key)
        done = _syncline("deploy", "--rpc-url", other.rpc_url, "--key-env", "DEPLOYER_KEY", "--out", str(out), env=env)
        assert done.returncode == 0, done.stderr
        assert key[2:] not in done.stdout + done.stderr, "the key must never be printed"
        deployment = Deployment.read(out / "deployment.json")
        assert deployment.rpc_url == other.rpc_url
        assert deployment.deployer == Web3().eth.account.from_key(key).address
        market = MarketClient.from_deployment(deployment, other.web3())
        assert market.task_count() == 0
        listed = _syncline("train", "list-runs", "--deployment", str(out / "deployment.json"), env=env)
        assert listed.returncode == 0 and json.loads(listed.stdout) == []


def test_missing_key_is_one_line_error(tmp_path: Path) -> None:
    with start_anvil(tmp_path / "chain") as chain:
        env = {k: v for k, v in _env(tmp_path).items() if k != "SYNCLINE_PRIVATE_KEY"}
        done = _syncline("deploy", "--rpc-url", chain.rpc_url, "--out", str(tmp_path / "d"), env=env)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["error: no key: set $SYNCLINE_PRIVATE_KEY or pass --keystore FILE"]
