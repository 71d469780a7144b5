"""Keys (keystore round trip, no key in any rendering), the devnet process (start/stop, snapshots)
and the managed devnet (`syncline devnet status` reports each service, `up` restarts dead ones)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from eth_account import Account
from web3 import Web3

from syncline.blobstore import HttpBlobStore
from syncline.chain import keys
from syncline.chain.devnet import (
    DEVNET_CHAIN_ID,
    STATE_DUMP_INTERVAL_S,
    Devnet,
    DevnetClock,
    chain_time,
    increase_time,
    is_running,
    revert,
    snapshot,
    start_anvil,
)
from syncline.chain.keys import Signer, from_keystore, from_private_key, write_keystore
from syncline.errors import KeyConfigError, ToolchainError
from syncline.paths import repo_root

# a fixed, throwaway key (not an anvil account)
KEY = "0x" + "4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318"
PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="module")
def signer() -> Signer:
    return from_private_key(KEY)


@pytest.fixture(scope="module")
def keystore(signer: Signer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # eth-account's default scrypt KDF is slow: encrypt once per module
    return write_keystore(signer, tmp_path_factory.mktemp("keys") / "nested" / "trainer.json", PASSWORD)


# ---------------------------------------------------------------------- keys


def test_keystore_round_trip(signer: Signer, keystore: Path) -> None:
    assert keystore.is_file()
    assert stat.S_IMODE(keystore.stat().st_mode) == 0o600
    text = keystore.read_text()
    assert KEY[2:] not in text.lower()
    loaded = from_keystore(keystore, password=PASSWORD)
    assert loaded.address == signer.address == Account.from_key(KEY).address
    assert loaded.account.key == signer.account.key


def test_keystore_password_from_environment(signer: Signer, keystore: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNCLINE_TEST_PW", PASSWORD)
    assert from_keystore(keystore, password_env="SYNCLINE_TEST_PW").address == signer.address
    monkeypatch.setenv(keys.DEFAULT_PASSWORD_ENV, PASSWORD)
    assert keys.resolve(keystore).address == signer.address


def test_keystore_wrong_password(keystore: Path) -> None:
    with pytest.raises(KeyConfigError) as info:
        from_keystore(keystore, password="wrong horse")
    message = str(info.value)
    assert "wrong password" in message and str(keystore) in message
    assert "\n" not in message
    assert PASSWORD not in message


def test_keystore_without_password(keystore: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(keys.DEFAULT_PASSWORD_ENV, raising=False)
    with pytest.raises(KeyConfigError, match=keys.DEFAULT_PASSWORD_ENV):
        from_keystore(keystore)


def test_keystore_missing_or_not_json(tmp_path: Path) -> None:
    with pytest.raises(KeyConfigError, match="cannot read keystore"):
        from_keystore(tmp_path / "absent.json", password=PASSWORD)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(KeyConfigError, match="cannot read keystore"):
        from_keystore(broken, password=PASSWORD)


@pytest.mark.parametrize("content", ["{}", '{"version": 3}', "[]", '{"version": 3, "crypto": {}}'])
def test_keystore_with_the_wrong_shape_is_a_key_config_error(tmp_path: Path, content: str) -> None:
    """Valid JSON that is not a keystore must be reported like a corrupt file, not crash."""
    path = tmp_path / "not-a-keystore.json"
    path.write_text(content)
    with pytest.raises(KeyConfigError):
        from_keystore(path, password=PASSWORD)


def test_signer_never_renders_its_key(signer: Signer) -> None:
    secret_forms = {KEY.lower(), KEY[2:].lower(), KEY[2:].upper()}
    renderings = [repr(signer), str(signer), f"{signer}", f"{signer!r}", repr([signer]), repr({"s": signer})]
    for text in renderings:
        assert signer.address in text
        for secret in secret_forms:
            assert secret not in text and secret not in text.lower()
    assert repr(signer) == f"Signer({signer.address})"


@pytest.mark.parametrize("bad", ["", "0x1234", "not hex at all", "0x" + "zz" * 32])
def test_bad_private_key(bad: str) -> None:
    with pytest.raises(KeyConfigError) as info:
        from_private_key(bad)
    assert "32-byte hex" in str(info.value)
    assert bad == "" or bad not in str(info.value)


def test_key_from_environment(signer: Signer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNCLINE_TEST_KEY", KEY)
    assert keys.from_env("SYNCLINE_TEST_KEY").address == signer.address
    monkeypatch.delenv("SYNCLINE_TEST_KEY")
    with pytest.raises(KeyConfigError, match=r"\$SYNCLINE_TEST_KEY"):
        keys.from_env("SYNCLINE_TEST_KEY")


# ---------------------------------------------------------------------- devnet


def _port_is_free(port: int) -> bool:
    """Nothing listens on the port and a server could bind it now.

    SO_REUSEADDR is what servers (anvil included) set: it ignores the TIME_WAIT entries left by
    connections anvil closed on exit, but still fails while a socket listens on the port.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(2)
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen(1)
        except OSError:
            return False
        return True


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.chain
def test_devnet_start_stop_frees_the_port(tmp_path: Path) -> None:
    net = start_anvil(tmp_path / "net")
    port = int(net.rpc_url.rsplit(":", 1)[1])
    try:
        w3 = net.web3()
        assert w3.is_connected()
        assert w3.eth.chain_id == DEVNET_CHAIN_ID
        assert not _port_is_free(port)
        keys_ = net.private_keys()
        assert len(keys_) == 12
        first = from_private_key(keys_[0])
        assert w3.eth.get_balance(first.address) == 10_000 * 10**18
        assert net.config_path.is_file() and net.log_path.is_file()
    finally:
        net.stop()
    assert net.process is not None and net.process.poll() is not None
    assert not _pid_alive(net.pid)
    assert _port_is_free(port)
    net.stop()  # stopping twice is harmless
    # the same port can be used again right away
    again = start_anvil(tmp_path / "again", port=port)
    try:
        assert again.rpc_url == net.rpc_url
        assert again.web3().is_connected()
    finally:
        again.stop()
    assert _port_is_free(port)


@pytest.mark.chain
def test_devnet_context_manager_and_stop_by_pid(tmp_path: Path) -> None:
    with start_anvil(tmp_path / "ctx", accounts=3, balance_eth=5) as net:
        port = int(net.rpc_url.rsplit(":", 1)[1])
        assert len(net.private_keys()) == 3
        address = from_private_key(net.private_keys()[2]).address
        assert net.web3().eth.get_balance(address) == 5 * 10**18
    assert _port_is_free(port)

    # a Devnet known only by pid (as `syncline devnet down` sees it) is stopped too
    other = start_anvil(tmp_path / "pid")
    port = int(other.rpc_url.rsplit(":", 1)[1])
    by_pid = Devnet(rpc_url=other.rpc_url, pid=other.pid, config_path=other.config_path, log_path=other.log_path)
    assert other.process is not None
    # anvil is this process's child here: reap it as soon as it exits (a detached devnet is
    # reaped by init), otherwise the zombie would look alive to the pid probe
    reaper = threading.Thread(target=other.process.wait, daemon=True)
    reaper.start()
    by_pid.stop()
    reaper.join(timeout=10)
    assert other.process.poll() is not None
    assert not _pid_alive(other.pid)
    assert _port_is_free(port)


@pytest.mark.chain
def test_devnet_refuses_a_busy_port(tmp_path: Path, devnet: Devnet) -> None:
    port = int(devnet.rpc_url.rsplit(":", 1)[1])
    with pytest.raises(ToolchainError, match="anvil"):
        start_anvil(tmp_path / "busy", port=port, timeout_s=10)
    assert devnet.web3().is_connected()  # the session devnet is untouched


@pytest.mark.chain
def test_snapshot_revert_restores_state_and_clock(w3: Web3, accounts: list[Signer]) -> None:
    sender, receiver = accounts[8], accounts[9]
    t0, balance0 = chain_time(w3), w3.eth.get_balance(receiver.address)
    snap = snapshot(w3)
    increase_time(w3, 3_600)
    assert chain_time(w3) >= t0 + 3_600
    tx = {
        "to": receiver.address,
        "value": 12345,
        "nonce": w3.eth.get_transaction_count(sender.address),
        "chainId": w3.eth.chain_id,
        "gas": 21_000,
        "maxFeePerGas": 10**10,
        "maxPriorityFeePerGas": 1,
    }
    w3.eth.wait_for_transaction_receipt(
        w3.eth.send_raw_transaction(sender.account.sign_transaction(tx).raw_transaction)
    )
    assert w3.eth.get_balance(receiver.address) == balance0 + 12345
    revert(w3, snap)
    assert w3.eth.get_balance(receiver.address) == balance0
    assert chain_time(w3) < t0 + 3_600
    with pytest.raises(ToolchainError):
        revert(w3, snap)  # a snapshot is consumed by reverting to it


# ---------------------------------------------------------------------- `syncline devnet` keeps its services up


def _devnet_cli(action: str, env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """Run ``syncline devnet ACTION``; returns its exit code and the JSON it printed ({} if none)."""
    done = subprocess.run(
        [sys.executable, "-m", "syncline.cli", "devnet", action],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode in (0, 1, 3), done.stderr
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}


@pytest.fixture
def devnet_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A private state dir for the CLI (seeded with the compiled artifacts); ``devnet down`` after."""
    cache = repo_root() / ".syncline" / "artifacts"
    if cache.is_dir():
        shutil.copytree(cache, tmp_path / "artifacts")
    env = {**os.environ, "SYNCLINE_STATE_DIR": str(tmp_path)}
    try:
        yield env
    finally:
        _devnet_cli("down", env)


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while is_running(pid):
        assert time.monotonic() < deadline, f"process {pid} survived SIGKILL"
        time.sleep(0.05)


@pytest.mark.chain
def test_devnet_status_reports_a_dead_blob_service_and_up_restarts_it(devnet_env: dict[str, str]) -> None:
    assert _devnet_cli("status", devnet_env)[0] == 3  # nothing running yet: down
    code, first = _devnet_cli("up", devnet_env)
    assert code == 0 and first["started"] == ["anvil", "blob_service", "clock"]
    code, status = _devnet_cli("status", devnet_env)
    assert code == 0 and status["state"] == "up" and status["running"] is True
    services = status["services"]
    assert services["anvil"] == {
        "pid": services["anvil"]["pid"],
        "url": first["rpc_url"],
        "alive": True,
        "answers": True,
        "problem": None,
    }
    blob = services["blob_service"]
    assert (blob["url"], blob["alive"], blob["answers"]) == (first["blob_store"], True, True)
    stored = HttpBlobStore(first["blob_store"]).put(b"survives the restart")

    _kill(blob["pid"])
    code, status = _devnet_cli("status", devnet_env)
    assert code == 1 and status["state"] == "degraded"
    dead = status["services"]["blob_service"]
    assert (dead["pid"], dead["alive"], dead["answers"]) == (blob["pid"], False, False)
    assert dead["problem"] == f"process {blob['pid']} is not running"
    assert status["services"]["anvil"]["answers"] is True

    code, again = _devnet_cli("up", devnet_env)
    assert code == 0 and again["started"] == ["blob_service"]  # anvil and the contracts untouched
    assert (again["blob_store"], again["market"], again["rpc_url"]) == (
        first["blob_store"],
        first["market"],
        first["rpc_url"],
    )
    code, status = _devnet_cli("status", devnet_env)
    assert code == 0 and status["services"]["blob_service"]["pid"] != blob["pid"]
    assert HttpBlobStore(first["blob_store"]).get(stored.digest) == b"survives the restart"  # same store
    assert _devnet_cli("up", devnet_env) == (0, {**again, "started": []})  # all up: nothing to do

    # a hung service (alive, not answering its probe) is degraded too, and `up` replaces it
    hung = status["services"]["blob_service"]["pid"]
    os.kill(hung, signal.SIGSTOP)
    try:
        code, status = _devnet_cli("status", devnet_env)
        assert code == 1 and status["state"] == "degraded"
        stuck = status["services"]["blob_service"]
        assert (stuck["pid"], stuck["alive"], stuck["answers"]) == (hung, True, False)
        assert stuck["problem"].startswith(f"no answer from {first['blob_store']}/healthz")
        code, again = _devnet_cli("up", devnet_env)
        assert code == 0 and again["started"] == ["blob_service"] and again["blob_store"] == first["blob_store"]
        assert not is_running(hung)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(hung, signal.SIGCONT)
    assert _devnet_cli("status", devnet_env)[0] == 0


@pytest.mark.chain
def test_devnet_up_restarts_a_dead_anvil_from_its_last_state(devnet_env: dict[str, str]) -> None:
    code, first = _devnet_cli("up", devnet_env)
    assert code == 0
    keys_ = json.loads((Path(devnet_env["SYNCLINE_STATE_DIR"]) / "devnet" / "anvil-config.json").read_text())
    sender, receiver = from_private_key(keys_["private_keys"][8]), from_private_key(keys_["private_keys"][9])
    w3 = Web3(Web3.HTTPProvider(first["rpc_url"]))
    balance0 = w3.eth.get_balance(receiver.address)
    tx = {
        "to": receiver.address,
        "value": 12345,
        "nonce": 0,
        "chainId": DEVNET_CHAIN_ID,
        "gas": 21_000,
        "maxFeePerGas": 10**10,
        "maxPriorityFeePerGas": 1,
    }
    w3.eth.wait_for_transaction_receipt(
        w3.eth.send_raw_transaction(sender.account.sign_transaction(tx).raw_transaction)
    )
    deployer = from_private_key(keys_["private_keys"][0]).address
    deployer_nonce = w3.eth.get_transaction_count(deployer)
    time.sleep(STATE_DUMP_INTERVAL_S + 1.5)  # let anvil dump its state once more

    _, status = _devnet_cli("status", devnet_env)
    _kill(status["services"]["anvil"]["pid"])
    code, status = _devnet_cli("status", devnet_env)
    assert code == 1 and status["state"] == "degraded" and status["running"] is False
    assert status["services"]["anvil"]["alive"] is False and status["services"]["blob_service"]["answers"] is True

    code, again = _devnet_cli("up", devnet_env)
    assert code == 0 and again["started"] == ["anvil", "clock"]
    assert (again["rpc_url"], again["market"], again["blob_store"]) == (
        first["rpc_url"],
        first["market"],
        first["blob_store"],
    )
    assert w3.eth.get_balance(receiver.address) == balance0 + 12345  # the chain resumed from its dump
    assert w3.eth.get_code(Web3.to_checksum_address(first["market"]))  # the contracts with it ...
    assert w3.eth.get_transaction_count(deployer) == deployer_nonce  # ... not deployed again
    assert _devnet_cli("status", devnet_env)[0] == 0

    # `down` stops both and forgets the chain: the next `up` is a fresh devnet
    _devnet_cli("down", devnet_env)
    code, status = _devnet_cli("status", devnet_env)
    assert code == 3 and status["state"] == "down" and status["running"] is False
    code, fresh = _devnet_cli("up", devnet_env)
    assert code == 0 and fresh["started"] == ["anvil", "blob_service", "clock"]
    w3 = Web3(Web3.HTTPProvider(fresh["rpc_url"]))
    assert w3.eth.get_balance(receiver.address) == balance0


@pytest.mark.chain
def test_devnet_clock_runs_chain_time_faster_than_the_wall(tmp_path: Path) -> None:
    """Issue 27 item 5: production windows (minutes) pass in seconds of wall time on a devnet
    because its clock runs faster, never because the windows are short."""
    with start_anvil(tmp_path / "anvil") as net:
        w3 = net.web3()
        t0, wall0 = chain_time(w3), time.monotonic()
        with DevnetClock(w3, 40.0, tick_s=0.1) as clock:
            time.sleep(1.5)
        wall = time.monotonic() - wall0
        advanced = chain_time(w3) - t0
        assert clock.advanced_s > 0 and not clock.running
        # 39 chain seconds a wall second on top of the wall's own (ticks lost to the 0.1 s rounding aside)
        assert 0.6 * 39 * 1.5 <= advanced <= 40 * wall + 2, (advanced, wall)
    with pytest.raises(ValueError, match="speed"):
        DevnetClock(w3, 0.5)
