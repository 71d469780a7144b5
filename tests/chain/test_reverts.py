"""Every user-facing revert surfaces as a one-line ``ChainError`` naming the custom error and its values.

Reverts are caught at gas estimation, so no transaction is sent (the nonce does not move).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest
from web3 import Web3

from conftest import SPEC_URI, check_error, checkpoint_root, commit, h32, start_task
from syncline.chain.devnet import chain_time, dev_rpc, revert, set_next_timestamp, snapshot
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.errors import ChainError
from syncline.protocol.signed_messages import recover
from syncline.protocol.spot_checks import MIN_CHALLENGE_BLOCKS

pytestmark = pytest.mark.chain


@contextmanager
def reverts(w3: Web3, signer: Signer, name: str, args: dict[str, Any]) -> Iterator[pytest.ExceptionInfo[ChainError]]:
    """Expect a ChainError for custom error ``name`` with exactly ``args``, sent by nobody."""
    nonce = w3.eth.get_transaction_count(signer.address)
    with pytest.raises(ChainError) as info:
        yield info
    check_error(info.value, name, args)
    for value in args.values():
        assert str(value).lower() in str(info.value).lower()
    assert w3.eth.get_transaction_count(signer.address) == nonce


def test_wrong_stake(
    market: MarketClient, w3: Web3, sponsor: Signer, trainers: list[Signer], spec_factory: Callable[..., Any]
) -> None:
    spec = spec_factory()
    task_id, _ = market.post_task(sponsor, spec, SPEC_URI)
    stake = spec.trainer_stake_wei
    for sent in (stake - 1, stake + 1, 0):
        with reverts(w3, trainers[0], "SynclineWrongStake", {"sent": sent, "required": stake}) as info:
            market.sender.send(trainers[0], market.contract.functions.enroll(task_id), value=sent)
        assert "send exactly the task's trainerStake" in str(info.value)
        assert str(info.value).startswith("enroll reverted: SynclineWrongStake(")
    assert market.task(task_id).enrolled == 0


def test_late_submission(market: MarketClient, w3: Web3, trainers: list[Signer], running_task: int) -> None:
    deadline = market.round_deadline(running_task)
    commit(market, trainers[1], running_task, 0, 1)  # on time: the round does not extend
    set_next_timestamp(w3, deadline + 1)
    assert chain_time(w3) > deadline
    with reverts(w3, trainers[0], "SynclineSubmissionLate", {"taskId": running_task, "round": 0, "deadline": deadline}):
        commit(market, trainers[0], running_task, 0, 0)
    assert market.round(running_task, 0).committed_mask == 0b10


def test_submission_exactly_at_the_deadline_is_on_time(
    market: MarketClient, w3: Web3, trainers: list[Signer], running_task: int
) -> None:
    deadline = market.round_deadline(running_task)
    w3.provider.make_request("evm_setNextBlockTimestamp", [deadline])
    commit(market, trainers[0], running_task, 0, 0)
    assert market.submission(running_task, 0, 0).committed_at == deadline
    assert market.round(running_task, 0).committed_mask == 0b1


def test_duplicate_submission(market: MarketClient, w3: Web3, trainers: list[Signer], running_task: int) -> None:
    commit(market, trainers[1], running_task, 0, 1)
    first = market.submission(running_task, 0, 1)
    with reverts(w3, trainers[1], "SynclineDuplicateSubmission", {"taskId": running_task, "round": 0, "fragment": 1}):
        commit(market, trainers[1], running_task, 0, 1, tag="again")
    assert market.submission(running_task, 0, 1) == first


def test_unassigned_fragment(market: MarketClient, w3: Web3, trainers: list[Signer], running_task: int) -> None:
    # a fragment no trainer holds
    with reverts(
        w3,
        trainers[0],
        "SynclineUnassignedFragment",
        {"taskId": running_task, "fragment": 3, "caller": trainers[0].address},
    ):
        commit(market, trainers[0], running_task, 0, 3)
    # another trainer's fragment: the signature does not recover to the trainer holding it
    with reverts(
        w3,
        trainers[0],
        "SynclineWrongSigner",
        {"signer": trainers[0].address, "expected": trainers[1].address},
    ):
        commit(market, trainers[0], running_task, 0, 1)
    assert market.submission(running_task, 0, 1).trainer == "0x" + "00" * 20


def test_relayed_commitment_counts_for_the_signer(
    market: MarketClient, w3: Web3, trainers: list[Signer], outsider: Signer, running_task: int
) -> None:
    """Anyone may relay a signed commitment; the submission is the signer's, not the sender's."""
    receipt = market.commit_submission(
        trainers[2],
        running_task,
        0,
        2,
        h32("p"),
        h32("c"),
        "ipfs://relayed",
        checkpoint_root=checkpoint_root("relayed"),
        relayer=outsider,
    )
    assert receipt["from"] == outsider.address
    sub = market.submission(running_task, 0, 2)
    assert (sub.trainer, sub.checkpoint_root, sub.uri) == (
        trainers[2].address,
        checkpoint_root("relayed"),
        "ipfs://relayed",
    )
    (event,) = market.events(receipt, "SubmissionCommitted")
    message, signature = market.sign_commitment(
        trainers[2], running_task, 0, 2, h32("p"), h32("c"), checkpoint_root("relayed"), "ipfs://relayed"
    )
    assert bytes(event["args"]["signature"]) == signature
    # a tampered message recovers to someone else; a truncated signature recovers to nobody
    tampered = replace(message, payload_hash=bytes.fromhex(h32("other payload")[2:]))
    stranger = recover(market.domain(), tampered, signature)
    assert stranger != trainers[2].address
    with reverts(w3, outsider, "SynclineWrongSigner", {"signer": stranger, "expected": trainers[2].address}):
        market.send_commitment(outsider, tampered, signature)
    with reverts(w3, outsider, "SynclineBadSignature", {}):
        market.send_commitment(outsider, message, signature[:64])


def test_empty_checkpoint_root(market: MarketClient, w3: Web3, trainers: list[Signer], running_task: int) -> None:
    with reverts(w3, trainers[0], "SynclineEmptyCommitment", {}):
        market.commit_submission(
            trainers[0], running_task, 0, 0, h32("p"), h32("c"), "ipfs://g", checkpoint_root=b"\0" * 32
        )


def test_witness_bond_rules(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., Any],
) -> None:
    spec = spec_factory()
    bond = spec.witness_bond_wei
    task_id, _ = market.post_task(sponsor, spec, SPEC_URI)
    assert market.witness_bond(task_id) == bond and market.challenge_bond(task_id) == spec.challenge_bond_wei
    bond_fn = market.contract.functions.bondWitness(task_id)
    for sent in (bond - 1, bond + 1, 0):
        with reverts(w3, witnesses[0], "SynclineWrongBond", {"sent": sent, "required": bond}):
            market.sender.send(witnesses[0], bond_fn, value=sent)
    with reverts(w3, outsider, "SynclineNotWitness", {"taskId": task_id, "caller": outsider.address}):
        market.sender.send(outsider, bond_fn, value=bond)
    receipt = market.bond_witness(witnesses[0], task_id)
    (bonded,) = market.events(receipt, "WitnessBonded")
    assert (bonded["args"]["witness"], bonded["args"]["bond"]) == (witnesses[0].address, bond)
    view = market.witness(task_id, witnesses[0].address)
    assert (view.bonded, view.bond_wei, view.slashed_wei) == (True, bond, 0)
    assert market.task(task_id).bonds_held_wei == bond
    assert market.escrow_of(task_id) == spec.escrow_wei + bond
    with reverts(
        w3, witnesses[0], "SynclineWitnessAlreadyBonded", {"taskId": task_id, "witness": witnesses[0].address}
    ):
        market.sender.send(witnesses[0], bond_fn, value=bond)
    assert market.ensure_witness_bonded(witnesses[0], task_id) is None  # already bonded: nothing sent
    # an unbonded witness cannot vote
    for trainer in trainers:
        market.enroll(trainer, task_id)
    commit(market, trainers[0], task_id, 0, 0)
    set_next_timestamp(w3, market.round_deadline(task_id) + 1)
    with reverts(w3, witnesses[1], "SynclineWitnessUnbonded", {"taskId": task_id, "witness": witnesses[1].address}):
        market.finalize_round(witnesses[1], task_id, 0, h32("s"), h32("a"), 0b1)
    assert market.ensure_witness_bonded(witnesses[1], task_id) is not None
    market.finalize_round(witnesses[1], task_id, 0, h32("s"), h32("a"), 0b1)
    assert market.witness(task_id, witnesses[1].address).votes == 1


def test_not_a_witness(
    market: MarketClient, w3: Web3, outsider: Signer, trainers: list[Signer], running_task: int
) -> None:
    set_next_timestamp(w3, market.round_deadline(running_task) + 1)
    for caller in (outsider, trainers[0]):
        with reverts(w3, caller, "SynclineNotWitness", {"taskId": running_task, "caller": caller.address}):
            market.finalize_round(caller, running_task, 0, h32("s"), h32("a"), 0)
    assert market.round(running_task, 0).vote_count == 0


def test_round_still_open(
    market: MarketClient, w3: Web3, witnesses: list[Signer], trainers: list[Signer], running_task: int
) -> None:
    commit(market, trainers[0], running_task, 0, 0)
    deadline = market.round_deadline(running_task)
    with reverts(
        w3, witnesses[0], "SynclineRoundStillOpen", {"taskId": running_task, "round": 0, "deadline": deadline}
    ) as info:
        market.finalize_round(witnesses[0], running_task, 0, h32("s"), h32("a"), 0b1)
    assert "wait until the round deadline has passed" in str(info.value)
    assert market.vote_of(running_task, 0, witnesses[0].address) == "0x" + "00" * 32


def test_unknown_task_id(market: MarketClient, w3: Web3, outsider: Signer, trainers: list[Signer]) -> None:
    missing = market.task_count() + 1
    # a view call
    with pytest.raises(ChainError) as info:
        market.task(missing)
    assert info.value.error_name == "SynclineUnknownTask"
    assert info.value.error_args == {"taskId": missing}
    assert "\n" not in str(info.value) and f"SynclineUnknownTask(taskId={missing})" in str(info.value)
    # transactions
    with reverts(w3, outsider, "SynclineUnknownTask", {"taskId": missing}):
        market.cancel_underfilled(outsider, missing)
    with reverts(w3, trainers[0], "SynclineUnknownTask", {"taskId": missing}):
        market.sender.send(trainers[0], market.contract.functions.enroll(missing), value=10**18)
    with reverts(w3, outsider, "SynclineUnknownTask", {"taskId": 0}):
        market.seal(outsider, 0)


def test_nothing_to_withdraw(market: MarketClient, w3: Web3, outsider: Signer) -> None:
    assert market.credit_of(outsider.address) == 0
    with reverts(w3, outsider, "SynclineNothingToWithdraw", {"account": outsider.address}) as info:
        market.withdraw(outsider)
    assert "nothing is owed to this account yet" in str(info.value)


def test_withdraw_twice(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., Any],
) -> None:
    spec = spec_factory()
    task_id, _ = market.post_task(sponsor, spec, SPEC_URI)
    market.enroll(trainers[0], task_id)
    set_next_timestamp(w3, spec.enrollment_deadline + 1)
    market.cancel_underfilled(outsider, task_id)
    amount, _ = market.withdraw(trainers[0])
    assert amount == spec.trainer_stake_wei
    with reverts(w3, trainers[0], "SynclineNothingToWithdraw", {"account": trainers[0].address}):
        market.withdraw(trainers[0])


def test_witness_cannot_train_and_trainer_cannot_enroll_twice(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    spec_factory: Callable[..., Any],
) -> None:
    task_id, _ = market.post_task(sponsor, spec_factory(), SPEC_URI)
    market.enroll(trainers[0], task_id)
    with reverts(w3, trainers[0], "SynclineAlreadyEnrolled", {"taskId": task_id, "trainer": trainers[0].address}):
        market.enroll(trainers[0], task_id)
    with reverts(w3, witnesses[0], "SynclineWitnessCannotTrain", {"taskId": task_id, "witness": witnesses[0].address}):
        market.enroll(witnesses[0], task_id)


def test_wrong_round_and_witness_cannot_change_vote(
    market: MarketClient, w3: Web3, trainers: list[Signer], witnesses: list[Signer], running_task: int
) -> None:
    with reverts(w3, trainers[0], "SynclineWrongRound", {"taskId": running_task, "round": 1, "currentRound": 0}):
        commit(market, trainers[0], running_task, 1, 0)
    commit(market, trainers[0], running_task, 0, 0)
    set_next_timestamp(w3, market.round_deadline(running_task) + 1)
    market.finalize_round(witnesses[0], running_task, 0, h32("s"), h32("a"), 0b1)
    previous = market.vote_of(running_task, 0, witnesses[0].address)
    with reverts(
        w3,
        witnesses[0],
        "SynclineAlreadyVoted",
        {"taskId": running_task, "round": 0, "witness": witnesses[0].address, "previous": previous},
    ):
        market.finalize_round(witnesses[0], running_task, 0, h32("other"), h32("a"), 0b1)
    with reverts(
        w3, witnesses[1], "SynclineAcceptedNotCommitted", {"taskId": running_task, "round": 0, "strayMask": 0b110}
    ):
        market.finalize_round(witnesses[1], running_task, 0, h32("s"), h32("a"), 0b111)


# ---------------------------------------------------------------------- time boundaries, to the second
#
# The contract's own boundaries are checked by simulating on the *pending* block, whose timestamp
# is pinned with evm_setNextBlockTimestamp, so they do not depend on how the client estimates.


def _pin_next_block(w3: Web3, timestamp: int) -> None:
    """The next block (and the pending block that calls simulate on) has exactly ``timestamp``."""
    assert w3.provider.make_request("evm_setNextBlockTimestamp", [timestamp]).get("error") is None


def _simulate_at(
    market: MarketClient, w3: Web3, timestamp: int, signer: Signer, fn: Any, value: int = 0
) -> tuple[str, dict[str, object]] | None:
    """Run ``fn`` on the pending block at ``timestamp``: None if it succeeds, else the decoded error."""
    _pin_next_block(w3, timestamp)
    assert w3.eth.get_block("pending")["timestamp"] == timestamp
    try:
        fn.call({"from": signer.address, "value": value}, block_identifier="pending")
    except Exception as exc:
        decoded = market.decoder.decode(getattr(exc, "data", None))
        assert decoded is not None, repr(exc)
        return decoded
    return None


def test_enrollment_and_cancel_boundaries(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., Any],
) -> None:
    spec = spec_factory()
    task_id, _ = market.post_task(sponsor, spec, SPEC_URI)
    d = spec.enrollment_deadline
    stake = spec.trainer_stake_wei
    enroll = market.contract.functions.enroll(task_id)
    cancel = market.contract.functions.cancelUnderfilled(task_id)
    assert _simulate_at(market, w3, d, trainers[0], enroll, stake) is None
    assert _simulate_at(market, w3, d + 1, trainers[0], enroll, stake) == (
        "SynclineEnrollmentClosed",
        {"taskId": task_id, "deadline": d},
    )
    assert _simulate_at(market, w3, d, outsider, cancel) == (
        "SynclineEnrollmentStillOpen",
        {"taskId": task_id, "deadline": d},
    )
    assert _simulate_at(market, w3, d + 1, outsider, cancel) is None


def test_finalize_boundary(
    market: MarketClient, w3: Web3, trainers: list[Signer], witnesses: list[Signer], running_task: int
) -> None:
    commit(market, trainers[0], running_task, 0, 0)
    d = market.round_deadline(running_task)
    vote, signature = market.sign_vote(witnesses[0], running_task, 0, h32("s"), h32("a"), 1)
    fn = market.contract.functions.finalizeRound(vote.as_tuple(), signature)
    assert _simulate_at(market, w3, d, witnesses[0], fn) == (
        "SynclineRoundStillOpen",
        {"taskId": running_task, "round": 0, "deadline": d},
    )
    assert _simulate_at(market, w3, d + 1, witnesses[0], fn) is None


def test_carry_forward_is_possible_strictly_after_the_reported_earliest_time(
    market: MarketClient, w3: Web3, outsider: Signer, trainers: list[Signer], running_task: int
) -> None:
    """NatSpec: carry-forward of a round with commitments is possible strictly after ``earliest``
    (deadline + grace window), mirroring finalize, which is possible strictly after the deadline
    (an empty round: after its extended deadline, tests/chain/test_round_deadline.py)."""
    commit(market, trainers[0], running_task, 0, 0)
    d = market.round_deadline(running_task)
    fn = market.contract.functions.carryForward(running_task, 0)
    refused = _simulate_at(market, w3, d + 1, outsider, fn)
    assert refused is not None and refused[0] == "SynclineGraceWindowOpen"
    earliest = int(refused[1]["earliest"])  # type: ignore[call-overload]
    assert earliest == d + 120
    assert _simulate_at(market, w3, earliest, outsider, fn) == (
        "SynclineGraceWindowOpen",
        {"taskId": running_task, "round": 0, "earliest": earliest},
    )
    assert _simulate_at(market, w3, earliest + 1, outsider, fn) is None


def test_seal_boundary(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., Any],
) -> None:
    spec = spec_factory(rounds=1)
    task_id, _ = start_task(market, sponsor, spec, witnesses, trainers)
    commit(market, trainers[0], task_id, 0, 0)
    set_next_timestamp(w3, market.round_deadline(task_id) + 1)
    market.finalize_round(witnesses[0], task_id, 0, h32("s"), h32("a"), 0b1)
    receipt = market.finalize_round(witnesses[1], task_id, 0, h32("s"), h32("a"), 0b1)
    (completed,) = market.events(receipt, "RunCompleted")
    until = completed["args"]["challengeWindowEnds"]
    assert until == int(w3.eth.get_block(receipt["blockNumber"])["timestamp"]) + spec.challenge_window_s
    fn = market.contract.functions.seal(task_id)
    refused = ("SynclineChallengeWindowOpen", {"taskId": task_id, "until": until})
    assert market.task(task_id).last_closed_block == receipt["blockNumber"]
    # time long past but one block short of MIN_CHALLENGE_BLOCKS since the close: refused
    snap = snapshot(w3)
    dev_rpc(w3, "anvil_mine", [hex(MIN_CHALLENGE_BLOCKS - 2), hex(1)])  # pending: close + 49
    assert _simulate_at(market, w3, until + 3600, outsider, fn) == refused
    revert(w3, snap)
    dev_rpc(w3, "anvil_mine", [hex(MIN_CHALLENGE_BLOCKS - 1), hex(1)])  # pending: close + 50
    assert _simulate_at(market, w3, until - 1, outsider, fn) == refused
    assert _simulate_at(market, w3, until, outsider, fn) is None


# ---------------------------------------------------------------------- the client and the clock
#
# With anvil mining one block per transaction (start_anvil's default), the latest block can be
# much older than "now". These tests let time pass without mining (evm_increaseTime alone) and
# check that MarketClient judges a call by the block the transaction will land in.


def _let_time_pass_without_mining(w3: Web3, seconds: int) -> None:
    assert w3.provider.make_request("evm_increaseTime", [seconds]).get("error") is None


def test_witness_can_finalize_once_the_deadline_has_passed_even_if_no_block_was_mined(
    market: MarketClient, w3: Web3, trainers: list[Signer], witnesses: list[Signer], running_task: int
) -> None:
    commit(market, trainers[0], running_task, 0, 0)
    d = market.round_deadline(running_task)
    _let_time_pass_without_mining(w3, d - chain_time(w3) + 5)
    assert chain_time(w3) < d < int(w3.eth.get_block("pending")["timestamp"])
    receipt = market.finalize_round(witnesses[0], running_task, 0, h32("s"), h32("a"), 0b1)
    assert int(w3.eth.get_block(receipt["blockNumber"])["timestamp"]) > d
    assert market.round(running_task, 0).vote_count == 1


def test_commit_that_lands_after_the_deadline_names_the_error(
    market: MarketClient, w3: Web3, trainers: list[Signer], running_task: int
) -> None:
    d = market.round_deadline(running_task)
    commit(market, trainers[1], running_task, 0, 1)  # on time: the round does not extend
    _let_time_pass_without_mining(w3, d - chain_time(w3) + 5)
    with pytest.raises(ChainError) as info:
        commit(market, trainers[0], running_task, 0, 0)
    assert info.value.error_name == "SynclineSubmissionLate", str(info.value)
    assert info.value.error_args == {"taskId": running_task, "round": 0, "deadline": d}
