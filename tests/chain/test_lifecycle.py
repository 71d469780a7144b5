"""The whole market life cycle on a real anvil: 3 trainers, 3 witnesses (k = 2), 4 rounds.

Round 0  all three trainers commit; W0 + W1 finalize; W2 re-sends the same result (idempotent,
         no state or credit change) and then a different one (ConflictingFinalize).
Round 1  T2 misses; W0 votes Y (accepting T0 only), W2 votes X (DissentRecorded), W1 votes Y.
Round 2  T2 misses again; one vote only; carryForward is refused inside the grace window and
         succeeds after it: the state root carries forward, T2 (2 consecutive misses >
         max_missed_rounds = 1) is evicted, 25% of its stake slashed into the pool, shards
         reassigned over T0 and T1.
Round 3  T0 + T1 commit (3 shards each); W1 + W2 finalize; the run completes.
Seal     refused inside the challenge window, then sealed (witness bonds refunded); every account
         withdraws and every balance is checked to the wei (gas from each receipt's
         gasUsed * effectiveGasPrice).

The witnesses post their bonds right after the task is posted; commitments and votes are EIP-712
messages signed by the trainer or witness (each sends its own here).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from web3 import Web3

from conftest import ETH, SPEC_URI, GasMeter, commit, h32, shard_mask
from syncline.chain.devnet import chain_time, set_next_timestamp
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient, result_digest
from syncline.errors import ChainError
from syncline.protocol.enums import RoundStatus, TaskStatus

pytestmark = pytest.mark.chain

ZERO32 = "0x" + "00" * 32


def travel_to(w3: Web3, timestamp: int) -> None:
    """Mine a block at exactly ``timestamp`` (later transactions are at or after it)."""
    assert timestamp > chain_time(w3), "time travel only goes forward"
    set_next_timestamp(w3, timestamp)
    assert chain_time(w3) == timestamp


def deadline_of(market: MarketClient, task_id: int) -> int:
    return market.round_deadline(task_id)


def balances(w3: Web3, signers: list[Signer]) -> dict[str, int]:
    return {s.address: int(w3.eth.get_balance(s.address)) for s in signers}


def test_full_lifecycle_every_wei_accounted(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Any,
    gas: GasMeter,
) -> None:
    t0, t1, t2 = trainers
    w0, w1, w2 = witnesses
    everyone = [sponsor, *trainers, *witnesses, outsider]
    start = balances(w3, everyone)
    contract_start = int(w3.eth.get_balance(market.address))

    def assert_money_invariant(task_id: int) -> None:
        """TaskEscrow: the contract holds exactly the task's escrow plus everyone's credit."""
        held = int(w3.eth.get_balance(market.address)) - contract_start
        credits = sum(market.credit_of(s.address) for s in everyone)
        assert held == market.escrow_of(task_id) + credits

    spec = spec_factory()
    fee, stake, pool0, bond = spec.witness_fee_wei, spec.trainer_stake_wei, spec.reward_pool_wei, spec.witness_bond_wei
    assert bond == ETH // 2
    fee_budget = fee * spec.threshold * spec.rounds
    assert spec.escrow_wei == pool0 + fee_budget == 3 * ETH + 8 * ETH // 100

    # ------------------------------------------------------------------ post
    task_id, receipt = market.post_task(sponsor, spec, SPEC_URI)
    gas.add(receipt)
    (posted,) = market.events(receipt, "TaskPosted")
    assert posted["args"]["sponsor"] == sponsor.address
    assert posted["args"]["rewardPool"] == pool0
    assert posted["args"]["witnessFeeBudget"] == fee_budget
    assert "0x" + posted["args"]["specHash"].hex() == spec.spec_hash
    assert market.escrow_of(task_id) == spec.escrow_wei
    task = market.task(task_id)
    assert task.status == TaskStatus.ENROLLING
    assert task.state_root == spec.initial_state_root

    # ------------------------------------------------------------------ witnesses bond
    for witness in witnesses:
        receipt = gas.add(market.bond_witness(witness, task_id))
        (bonded,) = market.events(receipt, "WitnessBonded")
        assert (bonded["args"]["witness"], bonded["args"]["bond"]) == (witness.address, bond)
        assert market.witness(task_id, witness.address).bonded
    assert market.task(task_id).bonds_held_wei == 3 * bond
    assert market.escrow_of(task_id) == spec.escrow_wei + 3 * bond

    # ------------------------------------------------------------------ enroll (auto-start at max)
    for expected_fragment, trainer in enumerate(trainers):
        fragment, receipt = market.enroll(trainer, task_id)
        gas.add(receipt)
        assert fragment == expected_fragment
        (enrolled,) = market.events(receipt, "TrainerEnrolled")
        assert enrolled["args"]["stake"] == stake
    assert market.events(receipt, "RunStarted")[0]["args"]["trainers"] == 3
    started_masks = {e["args"]["trainer"]: e["args"]["shardMask"] for e in market.events(receipt, "ShardsAssigned")}
    assert started_masks == {tr.address: shard_mask(6, 3, i) for i, tr in enumerate(trainers)}
    assert [market.trainer(task_id, tr.address).shard_mask for tr in trainers] == [0b11, 0b1100, 0b110000]
    task = market.task(task_id)
    assert (task.status, task.enrolled, task.active, task.current_round) == (TaskStatus.RUNNING, 3, 3, 0)
    assert task.stake_held_wei == 3 * stake
    assert market.escrow_of(task_id) == spec.escrow_wei + 3 * stake + 3 * bond
    assert market.trainers(task_id) == [tr.address for tr in trainers]

    # ------------------------------------------------------------------ round 0: everyone commits
    for fragment, trainer in enumerate(trainers):
        receipt = gas.add(commit(market, trainer, task_id, 0, fragment))
        (committed,) = market.events(receipt, "SubmissionCommitted")
        assert committed["args"]["weight"] == 2
    assert market.submission(task_id, 0, 2).trainer == t2.address
    assert market.submission(task_id, 0, 2).weight == 2
    assert market.round(task_id, 0).committed_mask == 0b111
    travel_to(w3, deadline_of(market, task_id) + 1)

    s0, a0, m0 = h32("state/0"), h32("aggregate/0"), 0b111
    r0 = result_digest(s0, a0, m0)
    gas.add(market.finalize_round(w0, task_id, 0, s0, a0, m0, metric=4_100_000))
    assert market.round(task_id, 0).status == RoundStatus.PENDING
    receipt = gas.add(market.finalize_round(w1, task_id, 0, s0, a0, m0, metric=4_100_000))
    (fin,) = market.events(receipt, "RoundFinalized")
    assert "0x" + fin["args"]["result"].hex() == r0
    assert fin["args"]["acceptedMask"] == m0
    rnd = market.round(task_id, 0)
    assert (rnd.status, rnd.vote_count, rnd.result, rnd.state_root, rnd.accepted_mask) == (
        RoundStatus.FINALIZED,
        2,
        r0,
        s0,
        m0,
    )
    assert market.task(task_id).state_root == s0
    assert market.task(task_id).current_round == 1

    # Idempotent re-finalize by the third witness: succeeds, changes nothing, earns nothing.
    before = (
        market.task(task_id),
        market.round(task_id, 0),
        market.witness(task_id, w2.address),
        market.vote_of(task_id, 0, w2.address),
        market.credit_of(w2.address),
        market.escrow_of(task_id),
    )
    receipt = gas.add(market.finalize_round(w2, task_id, 0, s0, a0, m0, metric=123))
    assert market.all_events(receipt) == []
    after = (
        market.task(task_id),
        market.round(task_id, 0),
        market.witness(task_id, w2.address),
        market.vote_of(task_id, 0, w2.address),
        market.credit_of(w2.address),
        market.escrow_of(task_id),
    )
    assert after == before
    assert market.vote_of(task_id, 0, w2.address) == ZERO32
    assert market.witness(task_id, w2.address).fees_wei == 0

    # Fork detection: a different result for a finalized round reverts with both results.
    forked = h32("state/0-fork")
    nonce = w3.eth.get_transaction_count(w2.address)
    with pytest.raises(ChainError) as err:
        market.finalize_round(w2, task_id, 0, forked, a0, m0)
    assert err.value.error_name == "ConflictingFinalize"
    assert err.value.error_args == {"round": 0, "finalized": r0, "offered": result_digest(forked, a0, m0)}
    assert str(err.value).count("\n") == 0 and "ConflictingFinalize(round=0" in str(err.value)
    assert w3.eth.get_transaction_count(w2.address) == nonce  # nothing was sent

    assert_money_invariant(task_id)

    # ------------------------------------------------------------------ round 1: T2 misses, dissent
    gas.add(commit(market, t0, task_id, 1, 0))
    gas.add(commit(market, t1, task_id, 1, 1))
    travel_to(w3, deadline_of(market, task_id) + 1)
    s1, a1, m1 = h32("state/1"), h32("aggregate/1"), 0b01  # the committee rejects T1's gradient
    sx, ax, mx = h32("state/1-dissent"), h32("aggregate/1-dissent"), 0b11
    r1, rx = result_digest(s1, a1, m1), result_digest(sx, ax, mx)
    gas.add(market.finalize_round(w0, task_id, 1, s1, a1, m1))
    receipt = gas.add(market.finalize_round(w2, task_id, 1, sx, ax, mx))
    (dissent,) = market.events(receipt, "DissentRecorded")
    assert dissent["args"]["witness"] == w2.address
    assert "0x" + dissent["args"]["result"].hex() == rx
    assert "0x" + dissent["args"]["firstVote"].hex() == r1
    assert market.events(receipt, "RoundFinalized") == []
    assert market.witness(task_id, w2.address).dissents == 1
    assert market.witness(task_id, w0.address).dissents == 0
    rnd = market.round(task_id, 1)
    assert (rnd.status, rnd.vote_count, rnd.first_vote) == (RoundStatus.PENDING, 2, r1)
    assert market.vote_of(task_id, 1, w2.address) == rx
    receipt = gas.add(market.finalize_round(w1, task_id, 1, s1, a1, m1))
    assert market.events(receipt, "DissentRecorded") == []
    assert len(market.events(receipt, "RoundFinalized")) == 1
    (missed,) = market.events(receipt, "RoundMissed")
    assert (missed["args"]["trainer"], missed["args"]["consecutive"]) == (t2.address, 1)
    assert market.events(receipt, "TrainerEvicted") == []
    assert market.round(task_id, 1).result == r1
    assert market.trainer(task_id, t2.address).consecutive_missed == 1

    assert_money_invariant(task_id)

    # ------------------------------------------------------------------ round 2: no quorum -> carry forward
    gas.add(commit(market, t0, task_id, 2, 0))
    gas.add(commit(market, t1, task_id, 2, 1))
    deadline2 = deadline_of(market, task_id)
    opened2 = market.task(task_id).round_opened_at
    assert deadline2 == opened2 + spec.round_duration_s
    travel_to(w3, deadline2 + 1)
    gas.add(market.finalize_round(w0, task_id, 2, h32("state/2"), h32("aggregate/2"), 0b11))
    earliest = deadline2 + spec.grace_window_s
    with pytest.raises(ChainError) as err:
        market.carry_forward(outsider, task_id, 2)
    assert err.value.error_name == "SynclineGraceWindowOpen"
    assert err.value.error_args == {"taskId": task_id, "round": 2, "earliest": earliest}

    travel_to(w3, earliest + 1)
    receipt = gas.add(market.carry_forward(outsider, task_id, 2))
    (carried,) = market.events(receipt, "RoundCarriedForward")
    assert "0x" + carried["args"]["stateRoot"].hex() == s1
    assert carried["args"]["caller"] == outsider.address
    (missed,) = market.events(receipt, "RoundMissed")
    assert (missed["args"]["trainer"], missed["args"]["consecutive"]) == (t2.address, 2)
    (evicted,) = market.events(receipt, "TrainerEvicted")
    assert (evicted["args"]["trainer"], evicted["args"]["round"]) == (t2.address, 2)
    slash = stake * spec.eviction_slash_bps // 10_000
    assert slash == ETH // 4
    (slashed,) = market.events(receipt, "StakeSlashed")
    assert slashed["args"]["offender"] == t2.address
    assert (slashed["args"]["amount"], slashed["args"]["remainingStake"]) == (slash, stake - slash)
    reassigned = {e["args"]["trainer"]: e["args"]["shardMask"] for e in market.events(receipt, "ShardsAssigned")}
    assert reassigned == {t0.address: shard_mask(6, 2, 0), t1.address: shard_mask(6, 2, 1)}
    assert reassigned[t0.address] | reassigned[t1.address] == (1 << 6) - 1
    assert reassigned[t0.address] & reassigned[t1.address] == 0
    (opened,) = market.events(receipt, "RoundOpened")
    assert opened["args"]["round"] == 3

    rnd = market.round(task_id, 2)
    assert (rnd.status, rnd.state_root, rnd.vote_count) == (RoundStatus.CARRIED_FORWARD, s1, 1)
    task = market.task(task_id)
    assert (task.current_round, task.state_root, task.rounds_carried, task.rounds_finalized) == (3, s1, 1, 2)
    assert task.active == 2
    assert task.reward_pool_wei == pool0 + slash
    assert task.stake_held_wei == 3 * stake - slash
    rec2 = market.trainer(task_id, t2.address)
    assert (rec2.evicted, rec2.stake_wei, rec2.slashed_wei, rec2.shard_mask) == (True, stake - slash, slash, 0)
    assert market.trainer(task_id, t0.address).shard_mask == 0b000111
    assert market.trainer(task_id, t1.address).shard_mask == 0b111000

    with pytest.raises(ChainError) as err:
        market.finalize_round(w1, task_id, 2, h32("state/2"), h32("aggregate/2"), 0b11)
    assert err.value.error_name == "SynclineRoundCarriedForward"
    assert err.value.error_args == {"taskId": task_id, "round": 2}

    assert_money_invariant(task_id)

    # ------------------------------------------------------------------ round 3: the evicted trainer is out
    with pytest.raises(ChainError) as err:
        commit(market, t2, task_id, 3, 2)
    assert err.value.error_name == "SynclineNotActiveTrainer"
    assert err.value.error_args["taskId"] == task_id
    assert Web3.to_checksum_address(str(err.value.error_args["caller"])) == t2.address
    for fragment, trainer in ((0, t0), (1, t1)):
        receipt = gas.add(commit(market, trainer, task_id, 3, fragment))
        assert market.events(receipt, "SubmissionCommitted")[0]["args"]["weight"] == 3
    travel_to(w3, deadline_of(market, task_id) + 1)
    s3, a3, m3 = h32("state/3"), h32("aggregate/3"), 0b11
    gas.add(market.finalize_round(w1, task_id, 3, s3, a3, m3))
    receipt = gas.add(market.finalize_round(w2, task_id, 3, s3, a3, m3))
    closed_at = int(w3.eth.get_block(receipt["blockNumber"])["timestamp"])
    (completed,) = market.events(receipt, "RunCompleted")
    until = closed_at + spec.challenge_window_s
    assert "0x" + completed["args"]["finalStateRoot"].hex() == s3
    assert completed["args"]["challengeWindowEnds"] == until
    task = market.task(task_id)
    assert (task.status, task.rounds_finalized, task.rounds_carried) == (TaskStatus.AWAITING_SEAL, 3, 1)

    assert_money_invariant(task_id)

    # ------------------------------------------------------------------ seal
    with pytest.raises(ChainError) as err:
        market.seal(outsider, task_id)
    assert err.value.error_name == "SynclineChallengeWindowOpen"
    assert err.value.error_args == {"taskId": task_id, "until": until}
    travel_to(w3, until)
    receipt = gas.add(market.seal(outsider, task_id))

    # Expected settlement, from the rules.
    weights = {t0.address: 2 + 2 + 3, t1.address: 2 + 0 + 3, t2.address: 2}
    total_weight = sum(weights.values())
    pool = pool0 + slash
    rewards = {a: pool * wt // total_weight for a, wt in weights.items()}
    dust = pool - sum(rewards.values())
    fees = {w0.address: 2 * fee, w1.address: 3 * fee, w2.address: 1 * fee}  # rounds 0,1 / 0,1,3 / 3
    unearned = fee_budget - sum(fees.values())
    sponsor_refund = dust + unearned
    stake_back = {t0.address: stake, t1.address: stake, t2.address: stake - slash}
    assert (total_weight, dust, unearned) == (14, 1, 2 * fee)  # sanity of the scenario itself

    (sealed,) = market.events(receipt, "TaskSealed")
    assert "0x" + sealed["args"]["finalStateRoot"].hex() == s3
    assert sealed["args"]["rewardsPaid"] == sum(rewards.values())
    assert sealed["args"]["feesPaid"] == sum(fees.values())
    assert sealed["args"]["sponsorRefund"] == sponsor_refund
    credited: dict[tuple[str, bytes], int] = {}
    for e in market.events(receipt, "Credited"):
        credited[(e["args"]["account"], e["args"]["reason"].rstrip(b"\0"))] = e["args"]["amount"]
    expected_credits = {
        **{(a, b"reward"): r for a, r in rewards.items()},
        **{(a, b"stake-refund"): s for a, s in stake_back.items()},
        **{(a, b"witness-fee"): f for a, f in fees.items()},
        **{(w.address, b"bond-refund"): bond for w in witnesses},
        (sponsor.address, b"sponsor-refund"): sponsor_refund,
    }
    assert credited == expected_credits
    assert market.escrow_of(task_id) == 0
    task = market.task(task_id)
    assert (task.status, task.sealed_pool_wei, task.sponsor_refund_wei) == (TaskStatus.SEALED, pool, sponsor_refund)
    assert (task.bonds_held_wei, task.open_challenges, task.rounds_invalidated) == (0, 0, 0)
    for w in witnesses:
        view = market.witness(task_id, w.address)
        assert (view.bonded, view.bond_wei, view.slashed_wei) == (True, 0, 0)

    # ------------------------------------------------------------------ receipt
    assert_money_invariant(task_id)
    rc = market.receipt(task_id)
    assert rc.task_id == task_id and rc.spec_hash == spec.spec_hash and rc.status == TaskStatus.SEALED
    assert (rc.final_state_root, rc.rounds_total, rc.rounds_finalized, rc.rounds_carried_forward) == (s3, 4, 3, 1)
    assert (rc.reward_pool_wei, rc.sponsor_refund_wei) == (pool, sponsor_refund)
    assert rc.rounds_invalidated == 0
    lines = {line.trainer: line for line in rc.trainers}
    assert [line.trainer for line in rc.trainers] == [t.address for t in trainers]
    expected_lines = {
        # fragment, evicted, submitted, accepted, missed
        t0.address: (0, False, 4, 3, 0),
        t1.address: (1, False, 4, 2, 0),
        t2.address: (2, True, 1, 1, 2),
    }
    for addr, (fragment, was_evicted, submitted, accepted, missed_n) in expected_lines.items():
        line = lines[addr]
        assert (line.fragment, line.evicted, line.submitted, line.accepted, line.missed) == (
            fragment,
            was_evicted,
            submitted,
            accepted,
            missed_n,
        )
        assert line.accepted_weight == weights[addr]
        assert line.reward_wei == rewards[addr]
        assert line.stake_refund_wei == stake_back[addr]
        assert line.slashed_wei == stake - stake_back[addr]
    wlines = {line.witness: line for line in rc.witnesses}
    assert [line.witness for line in rc.witnesses] == [w.address for w in witnesses]
    # votes, matched, dissents: W0 voted r0 r1 r2, W1 r0 r1 r3, W2 r1 (dissent) r3.
    expected_w = {w0.address: (3, 2, 0), w1.address: (3, 3, 0), w2.address: (2, 1, 1)}
    for addr, (votes, matched, dissents) in expected_w.items():
        line = wlines[addr]
        assert (line.votes, line.matched, line.dissents, line.fees_wei) == (votes, matched, dissents, fees[addr])
        assert (line.bond_wei, line.slashed_wei) == (bond, 0)
        assert market.witness(task_id, addr).fees_wei == fees[addr]
    as_json = json.loads(rc.to_json())
    assert as_json["status"] == "sealed"
    assert as_json["spec_hash"] == spec.spec_hash
    assert [t["reward_wei"] for t in as_json["trainers"]] == [rewards[t.address] for t in trainers]
    assert [w["fees_wei"] for w in as_json["witnesses"]] == [fees[w.address] for w in witnesses]

    # Idempotence and fork detection still hold after sealing.
    gas.add(market.finalize_round(w2, task_id, 0, s0, a0, m0))
    with pytest.raises(ChainError) as err:
        market.finalize_round(w0, task_id, 3, forked, a3, m3)
    assert err.value.error_name == "ConflictingFinalize"
    assert err.value.error_args["round"] == 3

    # ------------------------------------------------------------------ withdraw: every credit, every wei
    owed = {
        sponsor.address: sponsor_refund,
        t0.address: rewards[t0.address] + stake,
        t1.address: rewards[t1.address] + stake,
        t2.address: rewards[t2.address] + stake - slash,
        **{a: f + bond for a, f in fees.items()},
        outsider.address: 0,
    }
    assert {s.address: market.credit_of(s.address) for s in everyone} == owed
    assert int(w3.eth.get_balance(market.address)) - contract_start == sum(owed.values())
    for signer in everyone:
        if owed[signer.address] == 0:
            continue
        amount, receipt = market.withdraw(signer)
        gas.add(receipt)
        assert amount == owed[signer.address]
        assert market.credit_of(signer.address) == 0
    assert int(w3.eth.get_balance(market.address)) == contract_start

    sent = {
        sponsor.address: spec.escrow_wei,
        **{t.address: stake for t in trainers},
        **{w.address: bond for w in witnesses},
    }
    end = balances(w3, everyone)
    for signer in everyone:
        a = signer.address
        expected = start[a] - sent.get(a, 0) + owed[a] - gas.of(signer)
        assert end[a] == expected, f"{a}: off by {end[a] - expected} wei"
    # every account that acted paid gas for each of its transactions
    assert gas.count[outsider.address] == 2  # carryForward, seal
    assert gas.count[w2.address] == 6  # bond, r0 idempotent, r1 dissent, r3, idempotent after seal, withdraw


def test_underfilled_task_is_cancelled_and_refunded_to_the_wei(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Any,
    gas: GasMeter,
) -> None:
    t0, t1, _ = trainers
    w0 = witnesses[0]
    everyone = [sponsor, t0, t1, w0, outsider]
    start = balances(w3, everyone)
    spec = spec_factory()
    bond = spec.witness_bond_wei
    task_id, receipt = market.post_task(sponsor, spec, SPEC_URI)
    gas.add(receipt)
    gas.add(market.bond_witness(w0, task_id))
    fragment, receipt = market.enroll(t0, task_id)
    gas.add(receipt)
    assert fragment == 0
    assert market.escrow_of(task_id) == spec.escrow_wei + spec.trainer_stake_wei + bond

    with pytest.raises(ChainError) as err:
        market.cancel_underfilled(outsider, task_id)
    assert err.value.error_name == "SynclineEnrollmentStillOpen"
    assert err.value.error_args == {"taskId": task_id, "deadline": spec.enrollment_deadline}

    travel_to(w3, spec.enrollment_deadline + 1)
    with pytest.raises(ChainError) as err:
        market.enroll(t1, task_id)
    assert err.value.error_name == "SynclineEnrollmentClosed"
    with pytest.raises(ChainError) as err:
        market.start_run(outsider, task_id)
    assert err.value.error_name == "SynclineUnderfilled"
    assert err.value.error_args == {"taskId": task_id, "enrolled": 1, "minTrainers": 2}

    receipt = gas.add(market.cancel_underfilled(outsider, task_id))
    (cancelled,) = market.events(receipt, "TaskCancelled")
    assert (cancelled["args"]["enrolled"], cancelled["args"]["sponsorRefund"]) == (1, spec.escrow_wei)
    assert market.escrow_of(task_id) == 0
    task = market.task(task_id)
    assert (task.status, task.sponsor_refund_wei, task.stake_held_wei) == (TaskStatus.CANCELLED, spec.escrow_wei, 0)
    assert market.credit_of(sponsor.address) == spec.escrow_wei
    assert market.credit_of(t0.address) == spec.trainer_stake_wei
    assert market.credit_of(w0.address) == bond  # the witness bond comes back at cancel
    assert market.task(task_id).bonds_held_wei == 0
    assert market.credit_of(outsider.address) == 0

    rc = market.receipt(task_id)
    assert rc.status == TaskStatus.CANCELLED
    assert rc.sponsor_refund_wei == spec.escrow_wei
    (line,) = rc.trainers
    assert (line.trainer, line.stake_refund_wei, line.slashed_wei, line.reward_wei) == (
        t0.address,
        spec.trainer_stake_wei,
        0,
        0,
    )

    with pytest.raises(ChainError) as err:  # cancelled is final
        market.cancel_underfilled(outsider, task_id)
    assert err.value.error_name == "SynclineWrongTaskStatus"
    assert err.value.error_args == {"taskId": task_id, "status": "cancelled", "required": "enrolling"}

    for signer, owed in ((sponsor, spec.escrow_wei), (t0, spec.trainer_stake_wei), (w0, bond)):
        amount, receipt = market.withdraw(signer)
        gas.add(receipt)
        assert amount == owed
    end = balances(w3, everyone)
    for signer in everyone:
        assert end[signer.address] == start[signer.address] - gas.of(signer), signer.address
    assert end[t1.address] == start[t1.address]  # the refused enroll sent nothing
