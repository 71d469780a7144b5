"""The fraud court through ``MarketClient`` on a real anvil: every challenge call, against the real
``SynclineMarket`` + ``SynclineCourt`` pair (the court runs by delegatecall on the market's address).

* trainer equivocation: two conflicting signed commitments -> whole stake slashed, the trainer
  evicted, the challenger paid its bond back plus half the slash (checked to the wei, gas included);
* witness equivocation: two conflicting signed votes -> the witness's bond slashed;
* a signature replayed from another chain or another task is refused with one decoded error line;
* a duplicate challenge is refused (``SynclineDuplicateChallenge`` names the first one);
* censorship: unanswered -> resolved after the defence period: the voters' bonds slashed, the round
  and the round after it invalidated, the state root rolled back; answered with a malformed chunk
  by a voter of the round -> rejected, the bond paid to that voter;
* training fraud: referees vote guilty (upheld), innocent (rejected, bond to the innocent voters), or
  nobody decides (expired, bond back); an open challenge holds the seal.

(Aggregation-fraud proofs are exercised by the integration tests.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest
from eth_abi import encode
from eth_utils import keccak
from web3 import Web3

from conftest import GasMeter, check_error, checkpoint_root, commit, finalize, h32, start_task, travel_past
from syncline.chain.deployment import Deployment, merged_abi
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.chain.toolchain import compile_contracts
from syncline.court.findings import Censorship, TrainingFraud
from syncline.errors import ChainError
from syncline.protocol import merkle
from syncline.protocol.enums import ChallengeKind, ChallengeStatus, RoundStatus, TaskStatus
from syncline.protocol.signed_messages import Domain, recover, sign
from syncline.protocol.spec import TrainingTaskSpec

pytestmark = pytest.mark.chain

SHARE_BPS = 5_000  # SynclineStorage.CHALLENGER_SHARE_BPS


# ---------------------------------------------------------------------- helpers


@dataclass
class Run:
    """A running task: witnesses bonded, three trainers enrolled (fragments 0, 1, 2)."""

    task_id: int
    spec: TrainingTaskSpec


def start_run(
    market: MarketClient,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    spec_factory: Callable[..., TrainingTaskSpec],
    **overrides: Any,
) -> Run:
    spec = spec_factory(**overrides)
    task_id, _ = start_task(market, sponsor, spec, witnesses, trainers)
    assert market.task(task_id).status == TaskStatus.RUNNING
    return Run(task_id, spec)


def credited(market: MarketClient, receipt: Any) -> dict[tuple[str, bytes], int]:
    out: dict[tuple[str, bytes], int] = {}
    for e in market.events(receipt, "Credited"):
        key = (str(e["args"]["account"]), bytes(e["args"]["reason"]).rstrip(b"\0"))
        out[key] = out.get(key, 0) + int(e["args"]["amount"])
    return out


def fault_key(*parts: tuple[str, int]) -> str:
    """``keccak256(abi.encode(...))`` of a challenge's fault, as ``SynclineDuplicateChallenge`` reports it."""
    types, values = zip(*parts, strict=True)
    return "0x" + keccak(encode(list(types), list(values))).hex()


def money_invariant(
    market: MarketClient, w3: Web3, contract_start: int, tasks: list[int], accounts: list[Signer]
) -> None:
    held = int(w3.eth.get_balance(market.address)) - contract_start
    assert held == sum(market.escrow_of(t) for t in tasks) + sum(market.credit_of(a.address) for a in accounts)


# ---------------------------------------------------------------------- equivocation


def test_trainer_equivocation_slashes_evicts_and_pays_the_challenger_to_the_wei(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
    gas: GasMeter,
) -> None:
    everyone = [sponsor, *trainers, *witnesses, outsider]
    contract_start = int(w3.eth.get_balance(market.address))
    run = start_run(market, sponsor, trainers, witnesses, spec_factory)
    task_id, spec = run.task_id, run.spec
    t0 = trainers[0]
    stake, bond = spec.trainer_stake_wei, spec.challenge_bond_wei

    # t0 commits A on chain, and signs a conflicting B that it never sends (e.g. gossips to others).
    a, sig_a = market.sign_commitment(t0, task_id, 0, 0, h32("A"), h32("A chunks"), checkpoint_root("A"), "ipfs://a")
    market.send_commitment(t0, a, sig_a)
    b, sig_b = market.sign_commitment(t0, task_id, 0, 0, h32("B"), h32("B chunks"), checkpoint_root("B"), "ipfs://b")
    assert a.conflicts_with(b)
    submitted = market.get_logs("SubmissionCommitted", taskId=task_id)[0]["args"]
    assert bytes(submitted["signature"]) == sig_a  # anyone watching the chain holds A's signature

    # identical messages are no equivocation; the wrong bond is refused
    with pytest.raises(ChainError) as err:
        market.prove_trainer_equivocation(outsider, a, sig_a, a, sig_a)
    check_error(err.value, "SynclineNotEquivocation", {})
    with pytest.raises(ChainError) as err:
        fn = market.contract.functions.proveTrainerEquivocation(a.as_tuple(), sig_a, b.as_tuple(), sig_b)
        market.sender.send(outsider, fn, value=bond - 1)
    check_error(err.value, "SynclineWrongBond", {"sent": bond - 1, "required": bond})

    start = int(w3.eth.get_balance(outsider.address))
    pool_before = market.task(task_id).reward_pool_wei
    count_before = market.challenge_count()
    challenge_id = market.prove_trainer_equivocation(outsider, a, sig_a, b, sig_b)
    receipt = gas.add(market.challenge_receipt(challenge_id))
    assert challenge_id == count_before + 1 == market.challenge_count()

    bounty = stake * SHARE_BPS // 10_000
    c = market.challenge(challenge_id)
    assert (c.kind, c.status, c.task_id, c.round, c.fragment) == (
        ChallengeKind.TRAINER_EQUIVOCATION,
        ChallengeStatus.UPHELD,
        task_id,
        0,
        0,
    )
    assert (c.challenger, c.accused, c.bond_wei, c.slashed_wei) == (outsider.address, t0.address, bond, stake)
    (opened,) = market.events(receipt, "ChallengeOpened")
    assert (opened["args"]["challengeId"], opened["args"]["accused"]) == (challenge_id, t0.address)
    (resolved,) = market.events(receipt, "ChallengeResolved")
    assert (resolved["args"]["slashed"], resolved["args"]["bounty"]) == (stake, bounty)
    assert credited(market, receipt) == {
        (outsider.address, b"bond-refund"): bond,
        (outsider.address, b"challenge-bounty"): bounty,
    }

    rec = market.trainer(task_id, t0.address)
    assert (rec.evicted, rec.stake_wei, rec.slashed_wei, rec.shard_mask) == (True, 0, stake, 0)
    task = market.task(task_id)
    assert task.active == 2
    assert task.reward_pool_wei == pool_before + stake - bounty
    assert task.bonds_held_wei == 3 * spec.witness_bond_wei  # the challenge bond went back out
    assert task.open_challenges == 0
    assert market.credit_of(outsider.address) == bond + bounty
    money_invariant(market, w3, contract_start, [task_id], everyone)

    # the evicted trainer cannot commit again (its round-0 slot holds the commitment on record)
    with pytest.raises(ChainError) as err:
        commit(market, t0, task_id, 0, 0, tag="again")
    check_error(err.value, "SynclineDuplicateSubmission", {"taskId": task_id, "round": 0, "fragment": 0})

    # nothing left to slash: a second proof of the same fault is refused before any bond moves
    with pytest.raises(ChainError) as err:
        market.prove_trainer_equivocation(outsider, b, sig_b, a, sig_a)
    check_error(err.value, "SynclineNothingToSlash", {"taskId": task_id, "accused": t0.address})

    amount, receipt = market.withdraw(outsider)
    gas.add(receipt)
    assert amount == bond + bounty
    assert int(w3.eth.get_balance(outsider.address)) == start + bounty - gas.of(outsider)
    money_invariant(market, w3, contract_start, [task_id], everyone)


def test_witness_equivocation_slashes_the_bond(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
) -> None:
    everyone = [sponsor, *trainers, *witnesses, outsider]
    contract_start = int(w3.eth.get_balance(market.address))
    run = start_run(market, sponsor, trainers, witnesses, spec_factory)
    task_id, spec = run.task_id, run.spec
    w0 = witnesses[0]
    for f, t in enumerate(trainers):
        commit(market, t, task_id, 0, f)
    travel_past(w3, market.round_deadline(task_id))

    # w0 votes X on chain, and signs a conflicting Y (say, for another audience)
    market.finalize_round(w0, task_id, 0, h32("X"), h32("aX"), 0b111)
    vote_x = market.get_logs("VoteCast", taskId=task_id)[0]["args"]
    x, sig_x = market.sign_vote(w0, task_id, 0, h32("X"), h32("aX"), 0b111)
    assert bytes(vote_x["signature"]) == sig_x
    y, sig_y = market.sign_vote(w0, task_id, 0, h32("Y"), h32("aY"), 0b011)
    assert x.conflicts_with(y)

    # a vote signed by another witness is not this witness's equivocation
    other, sig_other = market.sign_vote(witnesses[1], task_id, 0, h32("Y"), h32("aY"), 0b011)
    with pytest.raises(ChainError) as err:
        market.prove_witness_equivocation(outsider, x, sig_x, other, sig_other)
    check_error(err.value, "SynclineWrongSigner", {"signer": witnesses[1].address, "expected": w0.address})

    bond = spec.witness_bond_wei
    pool_before = market.task(task_id).reward_pool_wei
    challenge_id = market.prove_witness_equivocation(outsider, x, sig_x, y, sig_y)
    receipt = market.challenge_receipt(challenge_id)
    bounty = bond * SHARE_BPS // 10_000
    c = market.challenge(challenge_id)
    assert (c.kind, c.status, c.accused, c.slashed_wei) == (
        ChallengeKind.WITNESS_EQUIVOCATION,
        ChallengeStatus.UPHELD,
        w0.address,
        bond,
    )
    (slashed,) = market.events(receipt, "WitnessSlashed")
    assert (slashed["args"]["witness"], slashed["args"]["amount"]) == (w0.address, bond)
    view = market.witness(task_id, w0.address)
    assert (view.bonded, view.bond_wei, view.slashed_wei) == (True, 0, bond)
    task = market.task(task_id)
    assert task.bonds_held_wei == 2 * bond
    assert task.reward_pool_wei == pool_before + bond - bounty
    assert market.credit_of(outsider.address) == spec.challenge_bond_wei + bounty
    money_invariant(market, w3, contract_start, [task_id], everyone)

    # the slashed witness's bond is gone: the same fault cannot be claimed twice
    with pytest.raises(ChainError) as err:
        market.prove_witness_equivocation(outsider, y, sig_y, x, sig_x)
    check_error(err.value, "SynclineNothingToSlash", {"taskId": task_id, "accused": w0.address})


# ---------------------------------------------------------------------- replay and duplicates


def test_a_signature_replayed_from_another_chain_or_task_is_refused(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
) -> None:
    first = start_run(market, sponsor, trainers, witnesses, spec_factory)
    second = start_run(market, sponsor, trainers, witnesses, spec_factory)
    t0 = trainers[0]
    assert market.trainer(second.task_id, t0.address).fragment == 0

    # 1. a commitment signed for another chain (same market address)
    message, _ = market.sign_commitment(t0, first.task_id, 0, 0, h32("p"), h32("c"), checkpoint_root("x"), "ipfs://p")
    other_chain = Domain(market.domain().chain_id + 1, market.address)
    foreign = sign(t0.account, other_chain, message)
    stranger = recover(market.domain(), message, foreign)
    nonce = w3.eth.get_transaction_count(outsider.address)
    with pytest.raises(ChainError) as err:
        market.send_commitment(outsider, message, foreign)
    check_error(err.value, "SynclineWrongSigner", {"signer": stranger, "expected": t0.address})
    assert str(err.value).startswith("commitSubmission reverted: SynclineWrongSigner(")

    # 2. a commitment signed for task 1, replayed for task 2
    committed = market.commit_submission(
        t0, first.task_id, 0, 0, h32("p"), h32("c"), "ipfs://p", checkpoint_root=checkpoint_root("x")
    )
    signature = bytes(market.events(committed, "SubmissionCommitted")[0]["args"]["signature"])
    replayed = replace(message, task_id=second.task_id)
    with pytest.raises(ChainError) as err:
        market.send_commitment(outsider, replayed, signature)
    check_error(
        err.value,
        "SynclineWrongSigner",
        {"signer": recover(market.domain(), replayed, signature), "expected": t0.address},
    )
    assert market.round(second.task_id, 0).committed_mask == 0

    # 3. the same replays cannot prove an equivocation either
    b, _ = market.sign_commitment(t0, first.task_id, 0, 0, h32("q"), h32("c"), checkpoint_root("x"), "ipfs://x")
    foreign_b = sign(t0.account, other_chain, b)
    with pytest.raises(ChainError) as err:
        market.prove_trainer_equivocation(outsider, message, signature, b, foreign_b)
    check_error(
        err.value, "SynclineWrongSigner", {"signer": recover(market.domain(), b, foreign_b), "expected": t0.address}
    )
    travel_past(w3, market.round_deadline(first.task_id))
    vote, vote_sig = market.sign_vote(witnesses[0], first.task_id, 0, h32("s"), h32("a"), 0b1)
    with pytest.raises(ChainError) as err:
        market.send_vote(outsider, replace(vote, task_id=second.task_id), vote_sig)
    assert err.value.error_name == "SynclineNotWitness" and "\n" not in str(err.value)
    assert w3.eth.get_transaction_count(outsider.address) == nonce  # nothing was ever sent
    assert market.trainer(first.task_id, t0.address).stake_wei == first.spec.trainer_stake_wei


def test_a_duplicate_challenge_is_refused(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
) -> None:
    run = start_run(market, sponsor, trainers, witnesses, spec_factory)
    task_id = run.task_id
    for f, t in enumerate(trainers):
        commit(market, t, task_id, 0, f)
    finalize(market, w3, witnesses[:2], task_id, 0, 0b011)
    first = market.challenge_censorship(outsider, task_id, 0, 2)
    for challenger in (outsider, sponsor):
        with pytest.raises(ChainError) as err:
            market.challenge_censorship(challenger, task_id, 0, 2)
        key = fault_key(("uint8", int(ChallengeKind.CENSORSHIP)), ("uint256", task_id), ("uint32", 0), ("uint16", 2))
        check_error(err.value, "SynclineDuplicateChallenge", {"faultKey": key, "challengeId": first})
    # an accepted fragment was not censored
    with pytest.raises(ChainError) as err:
        market.challenge_censorship(outsider, task_id, 0, 1)
    check_error(err.value, "SynclineNotCensored", {"taskId": task_id, "round": 0, "fragment": 1})
    # training challenges are keyed by segment: the same segment twice is a duplicate, another is not
    second = market.challenge_training(outsider, task_id, 0, 0, 1)
    with pytest.raises(ChainError) as err:
        market.challenge_training(sponsor, task_id, 0, 0, 1)
    key = fault_key(
        ("uint8", int(ChallengeKind.TRAINING_FRAUD)), ("uint256", task_id), ("uint32", 0), ("uint16", 0), ("uint32", 1)
    )
    check_error(err.value, "SynclineDuplicateChallenge", {"faultKey": key, "challengeId": second})
    market.challenge_training(sponsor, task_id, 0, 0, 2)
    assert market.task(task_id).open_challenges == 3


# ---------------------------------------------------------------------- censorship


def test_unanswered_censorship_slashes_the_voters_and_rolls_the_state_back(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
) -> None:
    everyone = [sponsor, *trainers, *witnesses, outsider]
    contract_start = int(w3.eth.get_balance(market.address))
    run = start_run(market, sponsor, trainers, witnesses, spec_factory)
    task_id, spec = run.task_id, run.spec
    w0, w1, w2 = witnesses
    initial = spec.initial_state_root

    # round 0: everyone commits; w0 + w1 leave fragment 2 out; w2 votes the honest result (dissent)
    for f, t in enumerate(trainers):
        commit(market, t, task_id, 0, f)
    travel_past(w3, market.round_deadline(task_id))
    market.finalize_round(w2, task_id, 0, h32("honest"), h32("honest-agg"), 0b111)
    s0, _ = finalize(market, w3, [w0, w1], task_id, 0, 0b011)
    # round 1 builds on it
    for f, t in enumerate(trainers):
        commit(market, t, task_id, 1, f)
    s1, _ = finalize(market, w3, [w0, w1], task_id, 1, 0b111)
    assert market.round(task_id, 1).prev_state_root == s0
    assert market.round(task_id, 0).prev_state_root == initial
    assert market.witness(task_id, w0.address).fees_wei == 2 * spec.witness_fee_wei

    challenge_id = market.challenge_censorship(outsider, task_id, 0, 2)
    receipt = market.challenge_receipt(challenge_id)
    c = market.challenge(challenge_id)
    opened_at = int(w3.eth.get_block(receipt["blockNumber"])["timestamp"])
    assert (c.kind, c.status, c.fragment, c.accused) == (
        ChallengeKind.CENSORSHIP,
        ChallengeStatus.OPEN,
        2,
        "0x" + "00" * 20,
    )
    assert (c.opened_at, c.deadline) == (opened_at, opened_at + spec.challenge_window_s)
    task = market.task(task_id)
    assert (task.open_challenges, task.bonds_held_wei) == (1, 3 * spec.witness_bond_wei + spec.challenge_bond_wei)
    money_invariant(market, w3, contract_start, [task_id], everyone)

    with pytest.raises(ChainError) as err:
        market.resolve_censorship(outsider, challenge_id)
    check_error(err.value, "SynclineChallengeDeadline", {"challengeId": challenge_id, "deadline": c.deadline})
    with pytest.raises(ChainError) as err:
        market.expire_challenge(outsider, challenge_id)  # expiry is for training challenges
    check_error(err.value, "SynclineWrongChallengeKind", {"challengeId": challenge_id, "kind": "censorship"})

    travel_past(w3, c.deadline)
    receipt = market.resolve_censorship(sponsor, challenge_id)  # anyone may resolve
    bond = spec.witness_bond_wei
    slashed, bounty = 2 * bond, 2 * bond * SHARE_BPS // 10_000
    c = market.challenge(challenge_id)
    assert (c.status, c.slashed_wei) == (ChallengeStatus.UPHELD, slashed)
    assert sorted(e["args"]["witness"] for e in market.events(receipt, "WitnessSlashed")) == sorted(
        [w0.address, w1.address]
    )
    (invalidated,) = market.events(receipt, "RoundsInvalidated")
    assert (invalidated["args"]["fromRound"], invalidated["args"]["throughRound"]) == (0, 1)
    assert "0x" + bytes(invalidated["args"]["restoredRoot"]).hex() == initial
    assert credited(market, receipt) == {
        (outsider.address, b"bond-refund"): spec.challenge_bond_wei,
        (outsider.address, b"challenge-bounty"): bounty,
    }

    for rnd, root in ((0, s0), (1, s1)):
        r = market.round(task_id, rnd)
        assert (r.status, r.state_root) == (RoundStatus.INVALIDATED, root)
    task = market.task(task_id)
    assert (task.state_root, task.current_round) == (initial, 2)  # the run carries on from the old root
    assert (task.rounds_finalized, task.rounds_invalidated, task.open_challenges) == (0, 2, 0)
    assert task.total_weight == 0  # every accepted submission of the voided rounds is reversed
    assert task.bonds_held_wei == bond  # w2's
    for w, slash in ((w0, bond), (w1, bond), (w2, 0)):
        view = market.witness(task_id, w.address)
        assert (view.slashed_wei, view.bond_wei, view.fees_wei) == (slash, bond - slash, 0)
    assert [market.trainer(task_id, t.address).accepted for t in trainers] == [0, 0, 0]
    money_invariant(market, w3, contract_start, [task_id], everyone)

    # an invalidated round takes no more votes and no more challenges
    with pytest.raises(ChainError) as err:
        market.finalize_round(w2, task_id, 0, h32("honest"), h32("honest-agg"), 0b111)
    check_error(err.value, "SynclineRoundCarriedForward", {"taskId": task_id, "round": 0})
    with pytest.raises(ChainError) as err:
        market.challenge_training(outsider, task_id, 1, 0, 0)
    check_error(err.value, "SynclineRoundNotFinalized", {"taskId": task_id, "round": 1})
    with pytest.raises(ChainError) as err:
        market.resolve_censorship(outsider, challenge_id)
    check_error(err.value, "SynclineChallengeNotOpen", {"challengeId": challenge_id, "status": "upheld"})


def _gradient_chunks(spec: TrainingTaskSpec, malformed: int | None) -> list[bytes]:
    """A payload's chunks (8-bit, 256 coordinates each); chunk ``malformed`` has the wrong bit width."""
    count = spec.param_count // 256
    chunks = [bytes((8, 0)) + bytes(range(128)) * 2 for _ in range(count)]  # int8 values 0..127
    if malformed is not None:
        chunks[malformed] = bytes((16, 0)) + chunks[malformed][2:]
    return chunks


def test_answered_censorship_is_rejected_and_pays_the_answerer(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
) -> None:
    run = start_run(market, sponsor, trainers, witnesses, spec_factory)
    task_id, spec = run.task_id, run.spec
    chunks = _gradient_chunks(spec, malformed=1)
    hashes = [keccak(c) for c in chunks]
    root = merkle.root(hashes)
    for f, t in enumerate(trainers):
        chunk_root = root if f == 2 else h32(f"chunks/{f}")
        market.commit_submission(
            t, task_id, 0, f, h32(f"payload/{f}"), chunk_root, "ipfs://g", checkpoint_root=checkpoint_root(str(f))
        )
    finalize(market, w3, witnesses[:2], task_id, 0, 0b011)  # fragment 2 rightly left out
    challenge_id = market.challenge_censorship(outsider, task_id, 0, 2)

    w2 = witnesses[0]  # a voter of the finalized result defends it (the claimant never can)
    with pytest.raises(ChainError) as err:  # a well-formed chunk justifies nothing
        market.answer_censorship(w2, challenge_id, 0, chunks[0], merkle.proof(hashes, 0))
    check_error(err.value, "SynclineChunkWellFormed", {"challengeId": challenge_id, "chunkIndex": 0})
    with pytest.raises(ChainError) as err:  # the opening must be against the committed root
        market.answer_censorship(w2, challenge_id, 1, chunks[1], merkle.proof(hashes, 0))
    check_error(err.value, "SynclineBadMerkleProof", {"which": 0, "root": "0x" + root.hex()})

    receipt = market.answer_censorship(w2, challenge_id, 1, chunks[1], merkle.proof(hashes, 1))
    c = market.challenge(challenge_id)
    assert (c.status, c.slashed_wei) == (ChallengeStatus.REJECTED, 0)
    assert credited(market, receipt) == {(w2.address, b"forfeited-bond"): spec.challenge_bond_wei}
    task = market.task(task_id)
    assert (task.open_challenges, task.bonds_held_wei) == (0, 3 * spec.witness_bond_wei)
    assert market.round(task_id, 0).status == RoundStatus.FINALIZED
    assert market.credit_of(outsider.address) == 0


# ---------------------------------------------------------------------- training fraud


def test_training_challenges_upheld_rejected_and_expired(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
) -> None:
    everyone = [sponsor, *trainers, *witnesses, outsider]
    contract_start = int(w3.eth.get_balance(market.address))
    run = start_run(market, sponsor, trainers, witnesses, spec_factory, rounds=1)
    task_id, spec = run.task_id, run.spec
    w0, w1, w2 = witnesses
    t0, t1, t2 = trainers
    stake, bond = spec.trainer_stake_wei, spec.challenge_bond_wei
    segments = spec.checkpoint_segments
    assert (spec.inner_steps, spec.checkpoint_interval_steps, segments) == (50, 10, 5)
    for f, t in enumerate(trainers):
        commit(market, t, task_id, 0, f)
    finalize(market, w3, [w0, w1], task_id, 0, 0b111)
    task = market.task(task_id)
    assert task.status == TaskStatus.AWAITING_SEAL  # challenges are heard until the seal

    with pytest.raises(ChainError) as err:
        market.challenge_training(outsider, task_id, 0, 1, segments + 1)
    check_error(err.value, "SynclineBadSegment", {"segment": segments + 1, "segments": segments})

    # upheld: two guilty votes (k = 2) slash and evict the trainer and revoke its reward
    guilty_id = market.challenge_training(outsider, task_id, 0, 1, segments)  # the derivation segment
    c = market.challenge(guilty_id)
    assert (c.kind, c.status, c.accused, c.segment, c.fragment) == (
        ChallengeKind.TRAINING_FRAUD,
        ChallengeStatus.OPEN,
        t1.address,
        segments,
        1,
    )
    with pytest.raises(ChainError) as err:
        market.referee_vote(outsider, guilty_id, True)
    check_error(err.value, "SynclineNotWitness", {"taskId": task_id, "caller": outsider.address})
    market.referee_vote(w0, guilty_id, True)
    with pytest.raises(ChainError) as err:
        market.referee_vote(w0, guilty_id, True)
    check_error(err.value, "SynclineAlreadyRefereed", {"challengeId": guilty_id, "witness": w0.address})
    assert market.challenge(guilty_id).guilty_votes == 1
    receipt = market.referee_vote(w1, guilty_id, True)
    bounty = stake * SHARE_BPS // 10_000
    c = market.challenge(guilty_id)
    assert (c.status, c.guilty_votes, c.slashed_wei) == (ChallengeStatus.UPHELD, 2, stake)
    assert [e["args"]["guilty"] for e in market.events(receipt, "RefereeVoted")] == [True]
    (revoked,) = market.events(receipt, "RewardRevoked")
    assert (revoked["args"]["trainer"], revoked["args"]["round"]) == (t1.address, 0)
    assert market.round(task_id, 0).revoked_mask == 0b010
    rec = market.trainer(task_id, t1.address)
    assert (rec.evicted, rec.stake_wei, rec.slashed_wei, rec.accepted, rec.accepted_weight) == (True, 0, stake, 0, 0)
    assert market.credit_of(outsider.address) == bond + bounty
    with pytest.raises(ChainError) as err:  # its revoked submission can no longer be challenged
        market.challenge_training(outsider, task_id, 0, 1, 0)
    check_error(err.value, "SynclineNotAccepted", {"taskId": task_id, "round": 0, "fragment": 1})

    # rejected: once guilty cannot reach k, each replaying referee is paid bond / (2N), the
    # claimant gets the rest back (issue 27: it loses at most half the bond)
    innocent_id = market.challenge_training(sponsor, task_id, 0, 0, 0)
    market.referee_vote(w0, innocent_id, False)
    receipt = market.referee_vote(w2, innocent_id, False)  # 2 innocent of 3: guilty can reach at most 1 < k
    c = market.challenge(innocent_id)
    assert (c.status, c.innocent_votes, c.slashed_wei) == (ChallengeStatus.REJECTED, 2, 0)
    share = bond // (2 * len(witnesses))
    assert credited(market, receipt) == {
        (w0.address, b"referee-fee"): share,
        (w2.address, b"referee-fee"): share,
        (sponsor.address, b"bond-refund"): bond - 2 * share,
    }
    assert market.trainer(task_id, t0.address).stake_wei == stake

    # expired: the accused answers (its segment is published), nobody decides by the deadline;
    # meanwhile the open challenge holds the seal
    expired_id = market.challenge_training(outsider, task_id, 0, 2, 1)
    deadline = market.challenge(expired_id).deadline
    accused = trainers[[t.address.lower() for t in trainers].index(market.challenge(expired_id).accused.lower())]
    with pytest.raises(ChainError) as err:
        market.answer_training(outsider, expired_id)
    check_error(err.value, "SynclineNotAccused", {"challengeId": expired_id, "caller": outsider.address})
    with pytest.raises(ChainError) as err:  # nothing it published can be missing before it answers
        market.referee_unavailable(w1, expired_id)
    check_error(err.value, "SynclineTrainingNotAnswered", {"challengeId": expired_id})
    market.answer_training(accused, expired_id)
    assert market.availability_demand(expired_id).answered
    receipt = market.referee_unavailable(w1, expired_id)  # one Unavailable verdict: under k, it expires
    assert [e["args"]["witness"] for e in market.events(receipt, "RefereeUnavailable")] == [w1.address]
    assert market.availability_demand(expired_id).demanders == 1
    assert market.task(task_id).open_challenges == 1
    with pytest.raises(ChainError) as err:
        market.expire_challenge(outsider, expired_id)
    check_error(err.value, "SynclineChallengeDeadline", {"challengeId": expired_id, "deadline": deadline})
    until = market.task(task_id).last_closed_at + spec.challenge_window_s
    travel_past(w3, until)
    with pytest.raises(ChainError) as err:
        market.seal(sponsor, task_id)
    check_error(err.value, "SynclineChallengesOpen", {"taskId": task_id, "open": 1})
    with pytest.raises(ChainError) as err:  # the round's challenge window has closed
        market.challenge_training(outsider, task_id, 0, 2, 2)
    check_error(
        err.value,
        "SynclineChallengeWindowClosed",
        {"taskId": task_id, "round": 0, "until": until},
    )
    travel_past(w3, deadline)
    with pytest.raises(ChainError) as err:
        market.referee_vote(w0, expired_id, True)
    check_error(err.value, "SynclineChallengeDeadline", {"challengeId": expired_id, "deadline": deadline})
    receipt = market.expire_challenge(sponsor, expired_id)
    assert market.challenge(expired_id).status == ChallengeStatus.EXPIRED
    assert credited(market, receipt) == {(outsider.address, b"bond-refund"): bond}
    assert market.task(task_id).open_challenges == 0
    money_invariant(market, w3, contract_start, [task_id], everyone)

    # now the run seals: t1 gets nothing back, t0 and t2 share the pool (with the slash, minus the bounty)
    market.seal(sponsor, task_id)
    rc = market.receipt(task_id)
    lines = {line.trainer: line for line in rc.trainers}
    assert (lines[t1.address].reward_wei, lines[t1.address].stake_refund_wei) == (0, 0)
    assert lines[t0.address].reward_wei == lines[t2.address].reward_wei > 0
    assert rc.reward_pool_wei == spec.reward_pool_wei + stake - bounty
    assert market.escrow_of(task_id) == 0
    money_invariant(market, w3, contract_start, [task_id], everyone)
    assert market.challenge_count() == 3
    with pytest.raises(ChainError) as err:
        market.challenge(4)
    check_error(err.value, "SynclineUnknownChallenge", {"challengeId": 4})


# ---------------------------------------------------------------------- deployment


def test_deployment_records_the_court_and_the_client_abi_covers_both(
    deployment: Deployment, market: MarketClient, w3: Web3, outsider: Signer
) -> None:
    court = Web3.to_checksum_address(deployment.court)
    assert len(w3.eth.get_code(court)) > 0 and court != market.address
    assert market.contract.functions.COURT().call() == court
    abi = deployment.abi()
    keys = [(i["type"], i.get("name"), json.dumps(i.get("inputs"), sort_keys=True)) for i in abi]
    assert len(keys) == len(set(keys)), "merged ABI has duplicate entries"
    assert [i for i in abi if i["type"] == "constructor"] == [
        i for i in compile_contracts()["SynclineMarket"].abi if i["type"] == "constructor"
    ]
    names = {i.get("name") for i in abi}
    assert {"commitSubmission", "proveTrainerEquivocation", "getChallenge", "ChallengeOpened"} <= names
    # the court only runs on the market's storage: calling it directly is refused, decoded
    direct = MarketClient(w3, court, abi)
    with pytest.raises(ChainError) as err:
        direct.sender.send(outsider, direct.contract.functions.challengeCensorship(1, 0, 0))
    check_error(err.value, "SynclineCourtDirectCall", {})


def test_merged_abi_dedupes_and_refuses_conflicts() -> None:
    fn = {"type": "function", "name": "f", "inputs": [{"name": "x", "type": "uint256"}], "outputs": []}
    err = {"type": "error", "name": "E", "inputs": []}
    market_abi = [{"type": "constructor", "inputs": [{"name": "court", "type": "address"}]}, fn, err]
    court_abi = [{"type": "constructor", "inputs": []}, dict(err), {"type": "function", "name": "g", "inputs": []}]
    merged = merged_abi(market_abi, court_abi)
    assert merged == [*market_abi, court_abi[2]]
    with pytest.raises(ChainError, match="declare function f"):
        merged_abi(market_abi, [{**fn, "stateMutability": "payable"}])


def test_a_trainer_caught_equivocating_in_the_open_round_earns_nothing_for_it(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
) -> None:
    run = start_run(market, sponsor, trainers, witnesses, spec_factory)
    task_id = run.task_id
    t0 = trainers[0]
    a, sig_a = market.sign_commitment(t0, task_id, 0, 0, h32("A"), h32("A chunks"), checkpoint_root("A"), "ipfs://a")
    market.send_commitment(t0, a, sig_a)
    b, sig_b = market.sign_commitment(t0, task_id, 0, 0, h32("B"), h32("B chunks"), checkpoint_root("B"), "ipfs://b")
    for fragment, trainer in enumerate(trainers[1:], start=1):
        commit(market, trainer, task_id, 0, fragment)
    market.prove_trainer_equivocation(outsider, a, sig_a, b, sig_b)  # while round 0 is still open

    # The committee still aggregates all three submissions; the evicted trainer's is not paid.
    finalize(market, w3, witnesses[:2], task_id, 0, 0b111)
    rr = market.round(task_id, 0)
    assert rr.revoked_mask == 0b001
    assert market.trainer(task_id, t0.address).accepted == 0
    assert market.trainer(task_id, trainers[1].address).accepted == 1
    revoked = market.get_logs("RewardRevoked", taskId=task_id, round=0)
    assert [str(e["args"]["trainer"]) for e in revoked] == [t0.address]


# ---------------------------------------------------------------------- findings build their calls


def test_a_finding_builds_its_court_call_and_the_client_only_sends_it(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
) -> None:
    run = start_run(market, sponsor, trainers, witnesses, spec_factory)
    task_id = run.task_id
    for f, t in enumerate(trainers):
        commit(market, t, task_id, 0, f)
    finalize(market, w3, witnesses[:2], task_id, 0, 0b011)

    censorship = Censorship(0, 2)
    call = censorship.call(market, task_id)
    assert (call.target, call.function, call.value) == (
        market.address,
        "challengeCensorship",
        market.challenge_bond(task_id),
    )
    assert call.calldata == market.encode_call("challengeCensorship", [task_id, 0, 2])
    assert (censorship.kind_name, censorship.key()) == ("censorship", (ChallengeKind.CENSORSHIP, 0, 2))
    # a call whose calldata or target does not match what it says is refused before signing
    other_function = replace(call, calldata=market.encode_call("challengeTraining", [task_id, 0, 2, 1]))
    undecodable = replace(call, calldata=b"\xde\xad\xbe\xef" + call.calldata[4:])
    before = market.challenge_count()
    for forged in (other_function, undecodable, replace(call, target=outsider.address)):
        with pytest.raises(ChainError, match="challengeCensorship"):
            market.send_call(outsider, forged)
    assert market.challenge_count() == before
    opened = market.send_call(outsider, call)
    view = market.challenge(opened)
    assert (view.kind, view.round, view.fragment) == (ChallengeKind.CENSORSHIP, 0, 2)

    training = TrainingFraud(0, 0, 1, "replay differs", trainers[0].address)
    assert training.accused() == trainers[0].address.lower()
    assert not training.decided_in_its_transaction and training.key() == (ChallengeKind.TRAINING_FRAUD, 0, (0, 1))
    view = market.challenge(market.send_call(outsider, training.call(market, task_id)))
    assert (view.kind, view.segment, view.accused.lower()) == (
        ChallengeKind.TRAINING_FRAUD,
        1,
        trainers[0].address.lower(),
    )
