"""Syncline on chains other than the local anvil devnet (issue 16).

A node that offers only the standard methods is simulated by a real JSON-RPC proxy in front of
anvil (``_standard_rpc.StandardRpcProxy``) that answers ``-32601 method not found`` to every
development method (``evm_*``, ``anvil_*``): nothing in the client is mocked.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _standard_rpc import StandardRpcProxy
from web3 import Web3

from conftest import build_spec
from syncline.chain import devnet as devnet_mod
from syncline.chain.deployment import check_cancun, client_abi, deploy_contract, deploy_market
from syncline.chain.devnet import Devnet, chain_time, start_anvil
from syncline.chain.keys import from_private_key
from syncline.chain.market import MarketClient
from syncline.chain.rpc import http_web3
from syncline.chain.toolchain import compile_contracts
from syncline.chain.transactions import gas_with_headroom
from syncline.errors import ChainError, ToolchainError
from syncline.paths import state_dir as repo_state_dir

pytestmark = pytest.mark.chain


@pytest.fixture
def proxy(devnet: Devnet) -> Iterator[StandardRpcProxy]:
    with StandardRpcProxy(devnet.rpc_url) as p:
        yield p


DEV_CALLS: dict[str, tuple[str, Callable[[Web3], object]]] = {
    "increase_time": ("evm_increaseTime", lambda w3: devnet_mod.increase_time(w3, 115)),
    "set_next_timestamp": ("evm_mine", lambda w3: devnet_mod.set_next_timestamp(w3, chain_time(w3) + 100)),
    "snapshot": ("evm_snapshot", devnet_mod.snapshot),
    "revert": ("evm_revert", lambda w3: devnet_mod.revert(w3, "0x1")),
}


@pytest.mark.parametrize("helper", sorted(DEV_CALLS))
def test_dev_rpc_refused_by_the_node_fails_with_one_line_naming_the_method(
    proxy: StandardRpcProxy, helper: str
) -> None:
    method, call = DEV_CALLS[helper]
    w3 = http_web3(proxy.url)
    before = chain_time(w3)
    with pytest.raises(ChainError) as info:
        call(w3)
    text = str(info.value)
    assert method in text and "\n" not in text, text
    assert "refused" in text and "-32601" in text, text
    assert proxy.refused == [method]  # the first refused call stops the helper
    assert chain_time(w3) == before  # nothing moved


def test_dev_rpc_through_anvil_itself_still_works(devnet: Devnet) -> None:
    w3 = devnet.web3()
    snap = devnet_mod.snapshot(w3)
    before = chain_time(w3)
    devnet_mod.increase_time(w3, 1000)
    assert chain_time(w3) >= before + 1000
    devnet_mod.revert(w3, snap)
    assert chain_time(w3) == before
    with pytest.raises(ToolchainError, match="evm_revert"):
        devnet_mod.revert(w3, snap)  # a snapshot is used up by its revert


# ---------------------------------------------------------------------- pre-Cancun chains (item 4)


def _cli(*args: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "syncline.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def shanghai(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Devnet]:
    with start_anvil(tmp_path_factory.mktemp("shanghai"), hardfork="shanghai") as net:
        yield net


def test_deploy_refuses_a_pre_cancun_chain_with_one_line(shanghai: Devnet, tmp_path: Path) -> None:
    key = shanghai.private_keys()[0]
    deployer = from_private_key(key).address
    env = {**os.environ, "SYNCLINE_STATE_DIR": str(repo_state_dir()), "SYNCLINE_TEST_DEPLOY_KEY": key}
    out = _cli(
        "deploy",
        "--rpc-url",
        shanghai.rpc_url,
        "--key-env",
        "SYNCLINE_TEST_DEPLOY_KEY",
        "--out",
        str(tmp_path),
        env=env,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Cancun-enabled EVM chain" in lines[0], out.stderr
    assert "Traceback" not in out.stderr
    assert shanghai.web3().eth.get_transaction_count(deployer) == 0  # refused before sending anything
    assert not (tmp_path / "deployment.json").exists()


def test_cancun_probe_passes_on_a_cancun_chain(w3: Web3) -> None:
    check_cancun(w3)  # the session's anvil runs its latest hardfork


def test_undecodable_errors_from_a_pre_cancun_chain_are_one_line(shanghai: Devnet) -> None:
    """Deployed anyway (bypassing the check), the market's views hit MCOPY: ``invalid opcode`` /
    ``NotActivated`` from the node becomes one ``ChainError`` line naming the call."""
    w3 = shanghai.web3()
    signers = [from_private_key(k) for k in shanghai.private_keys()]
    artifacts = compile_contracts()
    market_art, court_art = artifacts["SynclineMarket"], artifacts["SynclineCourt"]
    court, _ = deploy_contract(w3, signers[0], court_art)
    address, _ = deploy_contract(w3, signers[0], market_art, court)
    market = MarketClient(w3, address, client_abi(artifacts))
    spec = build_spec(enrollment_deadline=chain_time(w3) + 600, witnesses=tuple(s.address for s in signers[4:7]))
    task_id, _ = market.post_task(signers[0], spec, "ipfs://pre-cancun")
    with pytest.raises(ChainError) as info:
        market.spec_tuple(task_id)
    text = str(info.value)
    assert text.startswith("getSpec failed on chain:") and "\n" not in text, text
    with pytest.raises(ChainError) as info:
        market.enroll(signers[1], task_id)  # its estimate reads the spec too
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------------- gas headroom (item 5)


def test_gas_with_headroom_adds_a_margin_and_respects_the_block_limit() -> None:
    assert gas_with_headroom(1_000_000, 30_000_000) == 1_220_000
    assert gas_with_headroom(1_000_000, 30_000_000, min_gas=2_000_000) == 2_000_000
    assert gas_with_headroom(28_000_000, 30_000_000) == 30_000_000  # capped
    assert gas_with_headroom(100_000, 30_000_000, min_gas=40_000_000) == 30_000_000


def test_deploys_carry_gas_headroom(devnet: Devnet, w3: Web3, chain_snapshot: str, tmp_path: Path) -> None:
    deployer = from_private_key(devnet.private_keys()[0])
    first = w3.eth.block_number + 1
    deployment = deploy_market(w3, deployer, devnet.rpc_url, tmp_path)
    sent = 0
    for number in range(first, deployment.deployed_at_block + 1):
        block = w3.eth.get_block(number, full_transactions=True)
        for tx in block["transactions"]:
            assert not isinstance(tx, bytes)
            receipt = w3.eth.get_transaction_receipt(tx["hash"])
            assert receipt["contractAddress"] is not None
            assert receipt["gasUsed"] < tx["gas"] <= block["gasLimit"], (receipt["gasUsed"], tx["gas"])
            assert tx["gas"] >= receipt["gasUsed"] * 115 // 100  # a real margin, not a rounding
            sent += 1
    assert sent == 2  # the court, then the market
