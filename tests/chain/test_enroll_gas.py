"""Enrollment gas on a real anvil: the enrollment that fills ``max_trainers`` starts the run
(shard assignment for every trainer, round 0 opens) and costs far more than one that does not.
An enrollment estimated while it was not the last, but mined after another one that landed
first, must still carry enough gas to start the run."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from web3 import Web3

from conftest import ETH, build_spec
from syncline.chain.deployment import deploy_market
from syncline.chain.devnet import chain_time, start_anvil
from syncline.chain.keys import Signer, from_private_key
from syncline.chain.market import SPEC_TRAINER_STAKE, MarketClient, enroll_gas_floor
from syncline.protocol.enums import TaskStatus

pytestmark = pytest.mark.chain


def _pool_size(w3: Web3) -> int:
    status = w3.provider.make_request("txpool_status", [])  # type: ignore[arg-type]
    return int(status["result"]["pending"], 16)


def test_an_enrollment_estimated_early_but_mined_last_starts_the_run(
    market: MarketClient, w3: Web3, sponsor: Signer, trainers: list[Signer], witnesses: list[Signer]
) -> None:
    spec = build_spec(
        witnesses=tuple(w.address for w in witnesses), enrollment_deadline=chain_time(w3) + 600, max_trainers=3
    )
    task_id, _ = market.post_task(sponsor, spec, "ipfs://enroll-race")
    market.enroll(trainers[0], task_id)
    # Automine off: the third trainer's enroll is estimated now, while it is not the last ...
    outcome: dict[str, Any] = {}

    def late_enroll() -> None:
        try:
            outcome["fragment"] = market.enroll(trainers[2], task_id)[0]
        except Exception as exc:  # what the trainer agent would see
            outcome["error"] = exc

    w3.provider.make_request("evm_setAutomine", [False])  # type: ignore[arg-type]
    try:
        thread = threading.Thread(target=late_enroll)
        thread.start()
        deadline = time.monotonic() + 30
        while _pool_size(w3) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _pool_size(w3) == 1, "the late enrollment never reached the pool"
        # ... then another trainer's enroll, with a higher tip, is mined before it in the same block.
        other = trainers[1]
        fn = market.contract.functions.enroll(task_id)
        tx = fn.build_transaction(
            {
                "from": other.address,
                "value": int(market.spec_tuple(task_id)[SPEC_TRAINER_STAKE]),
                "nonce": w3.eth.get_transaction_count(other.address),
                "gas": 1_000_000,
                "maxPriorityFeePerGas": 100 * 10**9,
                "maxFeePerGas": 200 * 10**9,
            }
        )
        w3.eth.send_raw_transaction(other.account.sign_transaction(tx).raw_transaction)
        w3.provider.make_request("evm_mine", [])  # type: ignore[arg-type]
        thread.join(timeout=60)
    finally:
        w3.provider.make_request("evm_setAutomine", [True])  # type: ignore[arg-type]
    assert "error" not in outcome, f"the run-starting enrollment failed: {outcome.get('error')}"
    assert outcome["fragment"] == 2
    t = market.task(task_id)
    assert t.status == TaskStatus.RUNNING and t.enrolled == 3


@pytest.mark.slow
def test_the_gas_floor_covers_the_run_starting_enrollment_up_to_64_trainers(tmp_path: Path) -> None:
    """What the last enrollment really costs, against the floor every enrollment is sent with."""
    with start_anvil(tmp_path / "anvil", accounts=72) as net:
        keys = [from_private_key(k) for k in net.private_keys()]
        w3 = net.web3()
        market = MarketClient.from_deployment(deploy_market(w3, keys[0], net.rpc_url, tmp_path), w3)
        for n in (1, 3, 16, 64):
            spec = build_spec(
                witnesses=tuple(k.address for k in keys[1:4]),
                enrollment_deadline=chain_time(w3) + 600,
                min_trainers=1,
                max_trainers=n,
                shards=max(n, 6),
                trainer_stake_wei=ETH // 100,
                reward_pool_wei=ETH // 1000,  # postTask's deterrence rule: stake >= 2 x pool / 4 rounds
            )
            task_id, _ = market.post_task(keys[0], spec, "ipfs://enroll-gas")
            used = [int(market.enroll(t, task_id)[1]["gasUsed"]) for t in keys[4 : 4 + n]]
            assert market.task(task_id).status == TaskStatus.RUNNING
            assert max(used) == used[-1], used
            assert used[-1] <= enroll_gas_floor(n), (n, used[-1], enroll_gas_floor(n))
            assert enroll_gas_floor(n) < 1.3 * used[-1] + 100_000, "the floor should stay close to the cost"
