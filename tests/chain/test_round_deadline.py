"""A machine too slow for the round (issue 26 item 10), on a real anvil: when nobody committed by
a round's deadline it extends once (``commitDeadline``, three more round durations); commits in
the extension are recorded, counted late (``SubmissionLate``, ``lateMask``, the receipt's
``late``) and paid like any other; a round nobody committed to by then closes empty
(``SynclineRoundEmpty``) by anyone's ``carryForward``: no vote (``SynclineNothingToVote``), no
witness fee, no miss; a run of only empty rounds says in its
receipt that it trained nothing."""

from __future__ import annotations

import pytest
from web3 import Web3

from conftest import commit, h32
from syncline.chain.devnet import increase_time
from syncline.chain.keys import Signer
from syncline.chain.market import SPEC_ROUNDS, MarketClient
from syncline.errors import ChainError
from syncline.protocol.enums import RoundStatus, TaskStatus
from syncline.protocol.round_clock import commit_deadline
from syncline.run.loop import pending_time

pytestmark = pytest.mark.chain

ROUND_S = 300  # conftest's default spec


def _advance_to(w3: Web3, when: int) -> None:
    """Mine a block at or after ``when``."""
    now = pending_time(w3)
    if when > now:
        increase_time(w3, when - now)


def test_nobody_in_time_extends_once_and_late_commits_are_recorded_and_paid(
    market: MarketClient, w3: Web3, trainers: list[Signer], witnesses: list[Signer], running_task: int
) -> None:
    task_id = running_task
    first = market.round_deadline(task_id)
    assert market.commit_deadline(task_id) == first
    _advance_to(w3, first + 1)
    extended = first + 3 * ROUND_S
    assert market.commit_deadline(task_id) == extended  # nobody committed: extended, once

    receipts = [commit(market, t, task_id, 0, f) for f, t in enumerate(trainers)]
    assert all(len(market.events(r, "SubmissionLate")) == 1 for r in receipts)
    assert market.round(task_id, 0).late_mask == 0b111
    assert market.commit_deadline(task_id) == extended  # a late commit does not extend it again
    for w in witnesses[:2]:  # complete: early close, paid like any round
        market.finalize_round(w, task_id, 0, h32("late/state"), h32("late/aggregate"), 0b111)
    assert market.round(task_id, 0).status == RoundStatus.FINALIZED
    assert market.task(task_id).fees_earned_wei == 2 * market.witness(task_id, witnesses[0].address).fees_wei
    lines = market.receipt(task_id).trainers
    assert [(line.late, line.accepted, line.missed) for line in lines] == [(1, 1, 0)] * 3


def test_a_commit_after_an_on_time_one_is_still_refused(
    market: MarketClient, w3: Web3, trainers: list[Signer], running_task: int
) -> None:
    task_id = running_task
    first = market.round_deadline(task_id)
    commit(market, trainers[0], task_id, 0, 0)  # on time: no extension
    _advance_to(w3, first + 1)
    assert market.commit_deadline(task_id) == first
    on_time = market.submission(task_id, 0, 0).committed_at
    assert commit_deadline(first, ROUND_S, [on_time], pending_time(w3)) == first  # the API's rule agrees
    with pytest.raises(ChainError) as err:
        commit(market, trainers[1], task_id, 0, 1)
    assert err.value.error_name == "SynclineSubmissionLate"


def test_empty_rounds_pay_no_fee_and_the_receipt_says_it_trained_nothing(
    market: MarketClient, w3: Web3, sponsor: Signer, witnesses: list[Signer], running_task: int
) -> None:
    task_id = running_task
    initial = market.task(task_id).state_root
    rounds = int(market.spec_tuple(task_id)[SPEC_ROUNDS])
    for round_ in range(rounds):
        first = market.round_deadline(task_id)
        _advance_to(w3, first + 1)
        with pytest.raises(ChainError) as err:  # the extension is open: no vote counts yet
            market.finalize_round(witnesses[0], task_id, round_, h32("s"), h32("a"), 0)
        assert err.value.error_name == "SynclineRoundStillOpen"
        _advance_to(w3, first + 3 * ROUND_S + 1)
        with pytest.raises(ChainError) as err:  # nothing to vote on: no vote, no fee
            market.finalize_round(witnesses[0], task_id, round_, h32("s"), h32("a"), 0)
        assert err.value.error_name == "SynclineNothingToVote"
        closer = witnesses[1] if round_ % 2 == 0 else sponsor  # anyone, without the grace window
        receipt = market.carry_forward(closer, task_id, round_)
        assert len(market.events(receipt, "SynclineRoundEmpty")) == 1
        assert market.events(receipt, "VoteCast") == []
        assert market.events(receipt, "RoundMissed") == []
        assert market.round(task_id, round_).status == RoundStatus.CARRIED_FORWARD
    t = market.task(task_id)
    assert t.status == TaskStatus.AWAITING_SEAL
    assert (t.fees_earned_wei, t.state_root, t.rounds_finalized) == (0, initial, 0)
    r = market.receipt(task_id)
    assert r.trained_nothing and r.late_commits == 0
    assert all(w.fees_wei == 0 and w.votes == 0 for w in r.witnesses)
    assert all(line.missed == 0 for line in r.trainers)
    assert r.verdict().startswith("trained nothing")
    assert r.to_mapping()["trained_nothing"] is True


def test_the_api_s_deadline_rule_is_the_contract_s(
    market: MarketClient, w3: Web3, trainers: list[Signer], running_task: int
) -> None:
    """``protocol/round_clock.commit_deadline`` (the API's round deadline, from the indexed commit
    times) equals the contract's ``commitDeadline`` before the deadline, once it passed with nobody
    committed (extended), and after a late commit (still extended, not again); the on-time case is
    checked in ``test_a_commit_after_an_on_time_one_is_still_refused``."""
    task_id = running_task

    def agree(round_: int) -> int:
        now = pending_time(w3)
        times = [market.submission(task_id, round_, f).committed_at for f in range(len(trainers))]
        ours = commit_deadline(market.round_deadline(task_id), ROUND_S, [t for t in times if t], now)
        assert ours == market.commit_deadline(task_id), (round_, now, times)
        return ours

    first = agree(0)
    _advance_to(w3, first + 1)
    assert agree(0) == first + 3 * ROUND_S
    commit(market, trainers[0], task_id, 0, 0)
    assert agree(0) == first + 3 * ROUND_S
    for f, t in enumerate(trainers[1:], start=1):
        commit(market, t, task_id, 0, f)
    assert market.round(task_id, 0).late_mask == 0b111
