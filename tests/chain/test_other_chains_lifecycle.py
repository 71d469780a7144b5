"""The market walk-through against a second node reached only through standard JSON-RPC (issue 16).

A second anvil (its own chain, a block a second) is started by the test and reached only through
``StandardRpcProxy``, which answers ``-32601`` to every development method: the deploy and the
whole lifecycle (post, bonds, enrollment, four rounds with an idempotent re-finalize, a dissent, a
refused conflicting finalize, a carry-forward with eviction and slash, seal, withdrawals) must run
on the real clock. Any use of ``evm_*``/``anvil_*`` would fail the run and is also asserted absent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _standard_rpc import StandardRpcProxy

from syncline.chain.deployment import Deployment
from syncline.chain.devnet import Devnet, dev_rpc, start_anvil
from syncline.chain.keys import from_private_key
from syncline.chain.market import MarketClient
from syncline.chain.rpc import http_web3
from syncline.demo.lifecycle import derived_cast, wait_for_chain_time
from syncline.errors import ChainError
from syncline.paths import repo_root
from syncline.protocol.spec import MIN_CHALLENGE_WINDOW_S

pytestmark = [pytest.mark.chain, pytest.mark.slow]

ROUND_S = 60
BLOCK_S = 10
"""Chain seconds between the second node's blocks (one a wall second): its clock runs 10 times the
wall's, so the contract's minimum challenge window (600 s) passes in a minute of waiting on it."""
KEY_ENV = "SYNCLINE_TEST_OTHER_CHAIN_KEY"


@pytest.fixture
def second_node(tmp_path: Path) -> Iterator[Devnet]:
    with start_anvil(tmp_path / "second-anvil", block_time=1) as net:
        dev_rpc(net.web3(), "anvil_setBlockTimestampInterval", [BLOCK_S])  # set here, not through the proxy
        yield net


def _cli(*args: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "syncline.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _env(state: Path, key: str) -> dict[str, str]:
    """A private state dir seeded with the compiled-artifact cache, and the operator's key."""
    cache = repo_root() / ".syncline" / "artifacts"
    if cache.is_dir() and not (state / "artifacts").exists():
        shutil.copytree(cache, state / "artifacts")
    return {**os.environ, "SYNCLINE_STATE_DIR": str(state), KEY_ENV: key}


def test_lifecycle_walkthrough_on_a_node_without_dev_rpcs(second_node: Devnet, tmp_path: Path) -> None:
    operator_key = second_node.private_keys()[0]
    env = _env(tmp_path / "state", operator_key)
    with StandardRpcProxy(second_node.rpc_url) as proxy:
        deploy = _cli(
            "deploy", "--rpc-url", proxy.url, "--key-env", KEY_ENV, "--out", str(tmp_path / "dep"), env=env, timeout=300
        )
        assert deploy.returncode == 0, deploy.stderr[-3000:]
        started = time.monotonic()
        demo = _cli(
            "demo",
            "--scenario",
            "lifecycle",
            "--rpc-url",
            proxy.url,
            "--deployment",
            str(tmp_path / "dep" / "deployment.json"),
            "--key-env",
            KEY_ENV,
            "--round-duration",
            str(ROUND_S),
            env=env,
            timeout=300,
        )
        elapsed = time.monotonic() - started
        refused = list(proxy.refused)
    assert demo.returncode == 0, demo.stderr[-4000:]
    assert refused == []  # not one development RPC was even tried
    assert "time.travel" not in demo.stderr and "time.wait" in demo.stderr
    # four round deadlines, a grace window and a challenge window waited on the chain's own clock
    assert elapsed >= (5 * ROUND_S + MIN_CHALLENGE_WINDOW_S) / BLOCK_S, elapsed

    extras = json.loads(demo.stdout)  # the receipt, its extras at the top level
    assert extras["status"] == "sealed", extras["status"]
    assert (
        extras["chain_id"] == 31337
        and extras["market"] == json.loads((tmp_path / "dep" / "deployment.json").read_text())["market"]
    )
    assert [r["status"] for r in extras["rounds"]] == ["finalized", "finalized", "carried_forward", "finalized"]
    cast = derived_cast(from_private_key(operator_key))
    withdrawn = {k.lower(): v for k, v in extras["withdrawn_wei"].items()}
    for signer in [cast.sponsor, *cast.trainers[:2], *cast.witnesses]:
        assert withdrawn.get(signer.address.lower(), 0) > 0, signer.address
    market = MarketClient.from_deployment(Deployment.read(tmp_path / "dep" / "deployment.json"), second_node.web3())
    assert market.task_count() == 1 and market.escrow_of(1) == 0


def test_real_clock_wait_fails_in_one_line_on_a_chain_that_mines_no_blocks(devnet: Devnet) -> None:
    """The session's anvil mines only on demand: nothing moves its clock, so waiting for a deadline
    reports the stall instead of hanging."""
    with StandardRpcProxy(devnet.rpc_url) as proxy:
        w3 = http_web3(proxy.url)
        far = int(w3.eth.get_block("latest")["timestamp"]) + 3600
        started = time.monotonic()
        with pytest.raises(ChainError, match="mined no block for 2 s") as info:
            wait_for_chain_time(w3, far, stall_timeout_s=2, poll_s=0.2)
        assert time.monotonic() - started < 10
        assert "\n" not in str(info.value)
        assert proxy.refused == []


def test_lifecycle_walkthrough_on_the_local_anvil_still_time_travels(tmp_path: Path) -> None:
    env = _env(tmp_path / "state", "0x" + "11" * 32)
    demo = _cli("demo", "--scenario", "lifecycle", env=env, timeout=180)
    assert demo.returncode == 0, demo.stderr[-3000:]
    out = json.loads(demo.stdout)
    assert out["status"] == "sealed"
    assert [r["status"] for r in out["rounds"]] == ["finalized", "finalized", "carried_forward", "finalized"]
    assert "time.travel" in demo.stderr and "time.wait" not in demo.stderr
