"""Early close on a real anvil: a round whose every active trainer committed can be finalized
before its deadline (``RoundWorkComplete``, ``roundWorkComplete``); one still waiting for an active
trainer cannot (``SynclineRoundStillOpen``), and the slow trainer keeps its full round."""

from __future__ import annotations

import pytest
from web3 import Web3

from conftest import commit, h32
from syncline.chain.devnet import chain_time
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.errors import ChainError
from syncline.protocol.enums import RoundStatus

pytestmark = pytest.mark.chain


def test_a_complete_round_finalizes_before_its_deadline(
    market: MarketClient, w3: Web3, trainers: list[Signer], witnesses: list[Signer], running_task: int
) -> None:
    task_id = running_task
    assert market.active_mask(task_id) == 0b111
    deadline = market.round_deadline(task_id)
    receipts = [commit(market, t, task_id, 0, f) for f, t in enumerate(trainers)]
    assert [len(market.events(r, "RoundWorkComplete")) for r in receipts] == [0, 0, 1]
    (complete,) = market.events(receipts[-1], "RoundWorkComplete")
    assert (complete["args"]["round"], complete["args"]["committedMask"]) == (0, 0b111)
    assert market.round_work_complete(task_id, 0)
    assert not market.round_work_complete(task_id, 1)

    state, aggregate = h32("early/state"), h32("early/aggregate")
    for w in witnesses[:2]:
        market.finalize_round(w, task_id, 0, state, aggregate, 0b111)
    closed = market.round(task_id, 0)
    assert closed.status == RoundStatus.FINALIZED
    assert closed.closed_at < deadline
    t = market.task(task_id)
    assert (t.current_round, t.state_root) == (1, state)
    assert t.round_opened_at == closed.closed_at  # the next round opened at once
    assert not market.round_work_complete(task_id, 0)


def test_a_round_waiting_for_an_active_trainer_stays_open(
    market: MarketClient, w3: Web3, trainers: list[Signer], witnesses: list[Signer], running_task: int
) -> None:
    task_id = running_task
    for f, t in enumerate(trainers[:2]):
        commit(market, t, task_id, 0, f)
    assert not market.round_work_complete(task_id, 0)
    deadline = market.round_deadline(task_id)
    with pytest.raises(ChainError) as err:
        market.finalize_round(witnesses[0], task_id, 0, h32("s"), h32("a"), 0b11)
    assert err.value.error_name == "SynclineRoundStillOpen"
    assert err.value.error_args == {"taskId": task_id, "round": 0, "deadline": deadline}
    assert chain_time(w3) < deadline
    # The slow trainer still commits inside its round; then the work is complete.
    commit(market, trainers[2], task_id, 0, 2)
    assert market.round_work_complete(task_id, 0)
    market.finalize_round(witnesses[0], task_id, 0, h32("s"), h32("a"), 0b111)
    assert market.vote_of(task_id, 0, witnesses[0].address) != "0x" + "00" * 32
