"""Witnesses defend the rounds they voted against censorship claims, on a real anvil.

* a claim about a payload the trainer withheld: each honest voter's ``CensorshipDefence`` demands
  availability, nobody opens the demanded chunk in time, the claim is rejected when due: the voters
  keep their bonds and split the claimant's bond, the claimant loses it;
* the trainer opens the demanded chunk in time (data shown after the vote): the claim expires
  and nothing else moves (issue 27 item 6): nobody is slashed, no voter gives up its fee, the
  trainer is not credited the round, the claimant's bond goes back; and no challenger of an
  account that voted the result (on chain, or in a vote it signed) brings such a claim;
* ``decide`` (pure): answer with a malformed chunk when that was the reason, else demand; resolve
  only once the claim's deadline and any response window have passed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from eth_utils import keccak
from web3 import Web3

from conftest import check_error, checkpoint_root, commit, finalize, h32, start_task, travel_past
from syncline.blobstore.local import LocalBlobStore
from syncline.chain import devnet as devnet_mod
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.challenger.agent import Challenger
from syncline.court.defence import (
    AvailabilityResponder,
    CensorshipDefence,
    ClaimView,
    DefenceAction,
    MalformedChunk,
    decide,
    payload_chunks,
)
from syncline.errors import ChainError
from syncline.protocol import merkle
from syncline.protocol.enums import ChallengeStatus, RoundStatus
from syncline.protocol.spec import TrainingTaskSpec
from syncline.run.local_store import SIGNED_VOTES_FILE, append_record
from syncline.run.loop import pending_block
from syncline.trainer.segments import encode_payload

pytestmark = pytest.mark.chain


def _chunks(spec: TrainingTaskSpec) -> list[bytes]:
    """A well-formed 8-bit payload's chunks (256 coordinates each)."""
    return [bytes((8, 0)) + bytes(range(128)) * 2 for _ in range(spec.param_count // 256)]


def _defence(
    market: MarketClient, w3: Web3, witness: Signer, task_id: int, spec: TrainingTaskSpec
) -> CensorshipDefence:
    # The witness holds no payload of the excluded submission (it was withheld): no malformed chunk to show.
    held: dict[tuple[int, int], MalformedChunk] = {}
    return CensorshipDefence(
        market,
        witness,
        task_id,
        find_malformed=lambda r, f: held.get((r, f)),
        now=lambda: devnet_mod.chain_time(w3),
        chunk_count=spec.param_count // 256,
    )


def _round0_excluding_2(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    spec_factory: Callable[..., TrainingTaskSpec],
) -> tuple[int, TrainingTaskSpec, list[bytes]]:
    spec = spec_factory()
    task_id, _ = start_task(market, sponsor, spec, witnesses, trainers)
    chunks = _chunks(spec)
    root = merkle.root([keccak(c) for c in chunks])
    for f, t in enumerate(trainers):
        chunk_root = root if f == 2 else h32(f"chunks/{f}")
        market.commit_submission(
            t, task_id, 0, f, h32(f"payload/{f}"), chunk_root, "ipfs://g", checkpoint_root=checkpoint_root(str(f))
        )
    finalize(market, w3, witnesses[:2], task_id, 0, 0b011)  # fragment 2's payload never reached them
    return task_id, spec, chunks


def test_withheld_payload_claim_fails_and_honest_voters_keep_their_bonds(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
) -> None:
    task_id, spec, _ = _round0_excluding_2(market, w3, sponsor, trainers, witnesses, spec_factory)
    claim = market.challenge_censorship(outsider, task_id, 0, 2)
    defences = [_defence(market, w3, w, task_id, spec) for w in witnesses]
    for d in defences:
        d.step()
    demand = market.availability_demand(claim)
    assert demand.demanders == 2 and not demand.answered  # w0 and w1 voted; w2 did not and stays out
    assert [market.demanded_by(claim, w.address) for w in witnesses] == [True, True, False]

    c = market.challenge(claim)
    travel_past(w3, max(c.deadline, demand.deadline))
    for d in defences:
        d.step()  # the first resolves; the others see it closed
    c = market.challenge(claim)
    bond = spec.challenge_bond_wei
    assert c.status == ChallengeStatus.REJECTED
    assert market.credit_of(outsider.address) == 0
    for w in witnesses[:2]:
        view = market.witness(task_id, w.address)
        assert (view.bond_wei, view.slashed_wei) == (spec.witness_bond_wei, 0)
        assert market.credit_of(w.address) == bond // 2
    assert market.round(task_id, 0).status == RoundStatus.FINALIZED
    assert market.task(task_id).open_challenges == 0


def test_data_shown_after_the_vote_expires_the_claim_and_moves_nothing(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
    tmp_path: Path,
) -> None:
    """The accused trainer's ``AvailabilityResponder`` opens the demanded chunk from its own
    payload (a real quantized gradient in a real blob store) in time."""
    spec = spec_factory()
    task_id, _ = start_task(market, sponsor, spec, witnesses, trainers)
    blobs = LocalBlobStore(tmp_path / "blobs")
    payload, chunk_root = encode_payload(torch.linspace(-1.0, 1.0, spec.param_count), spec.gradient_bits)
    ref = blobs.put(payload)
    for f, t in enumerate(trainers):
        if f == 2:
            market.commit_submission(
                t,
                task_id,
                0,
                f,
                "0x" + keccak(payload).hex(),
                "0x" + chunk_root.hex(),
                ref.uri,
                checkpoint_root=checkpoint_root("2"),
            )
        else:
            commit(market, t, task_id, 0, f)
    finalize(market, w3, witnesses[:2], task_id, 0, 0b011)  # fragment 2 published after the vote
    claim = market.challenge_censorship(outsider, task_id, 0, 2)
    chunks = payload_chunks(payload, numel=spec.param_count, bits=spec.gradient_bits)
    assert chunks is not None
    with pytest.raises(ChainError) as err:  # the claimant cannot answer its own claim
        market.answer_censorship(outsider, claim, 0, chunks[0], merkle.proof([keccak(c) for c in chunks], 0))
    check_error(err.value, "SynclineNotDefender", {"challengeId": claim, "caller": outsider.address})
    defences = [_defence(market, w3, w, task_id, spec) for w in witnesses]
    for d in defences:
        d.step()
    responder = AvailabilityResponder(
        market,
        trainers[2],
        task_id,
        2,
        own_payload=lambda r: blobs.fetch(ref.uri, expected_digest=ref.digest, max_bytes=len(payload)),
        numel=spec.param_count,
        bits=spec.gradient_bits,
        now=lambda: devnet_mod.chain_time(w3),
    )
    responder.step()
    assert market.availability_demand(claim).answered
    travel_past(w3, market.challenge(claim).deadline)
    for d in defences:
        d.step()
    c = market.challenge(claim)
    assert (c.status, c.slashed_wei) == (ChallengeStatus.EXPIRED, 0)
    assert market.credit_of(outsider.address) == spec.challenge_bond_wei
    assert market.trainer(task_id, trainers[2].address).accepted == 0  # showing data late earns nothing
    for w in witnesses[:2]:
        view = market.witness(task_id, w.address)
        assert (view.bond_wei, view.slashed_wei, view.fees_wei) == (spec.witness_bond_wei, 0, spec.witness_fee_wei)

    # Who may bring such a claim: never an account that voted the result (issue 27 item 6).
    def voted_for(who: Signer, state_dir: Path | None = None) -> bool:
        return Challenger(task_id, who, market, blobs, state_dir=state_dir)._voted_for(0)

    assert voted_for(witnesses[0]) and voted_for(witnesses[1])  # their votes on chain
    assert not voted_for(outsider) and not voted_for(witnesses[2])
    rr = market.round(task_id, 0)
    signed = {"stateRoot": rr.state_root, "aggregateRoot": rr.aggregate_root, "acceptedMask": rr.accepted_mask}
    late_voter = tmp_path / "witness-3"  # its vote came after the finalize: none on chain, one signed
    append_record(late_voter, SIGNED_VOTES_FILE, {"task": task_id, "round": 0, "vote": json.dumps(signed)})
    assert voted_for(witnesses[2], late_voter)


def test_a_long_rollback_is_carried_to_the_end_by_the_witnesses(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
) -> None:
    """An undefended claim on round 0 after 40 rounds: the ruling voids 32 rounds, the witnesses'
    defence carries the rest (``continueInvalidation``) so the run can seal."""
    spec = spec_factory(rounds=44)
    task_id, _ = start_task(market, sponsor, spec, witnesses, trainers)
    for f, t in enumerate(trainers):
        commit(market, t, task_id, 0, f)
    finalize(market, w3, witnesses[:2], task_id, 0, 0b011)
    claim = market.challenge_censorship(outsider, task_id, 0, 2)
    for rnd in range(1, 41):
        for f, t in enumerate(trainers):
            commit(market, t, task_id, rnd, f)
        finalize(market, w3, witnesses[:2], task_id, rnd, 0b111)
    travel_past(w3, market.challenge(claim).deadline)
    market.resolve_censorship(outsider, claim)  # nobody defended: upheld, first batch voided
    _, next_round, end = market.invalidation(task_id)
    assert (next_round, end) == (32, 41)
    assert market.task(task_id).open_challenges == 1  # the rollback holds the seal
    _defence(market, w3, witnesses[2], task_id, spec).step()
    _, next_round, end = market.invalidation(task_id)
    assert next_round == end == 41
    task = market.task(task_id)
    assert (task.open_challenges, task.rounds_invalidated, task.total_weight) == (0, 41, 0)


def test_decide_answers_demands_and_resolves_in_order() -> None:
    open_claim = ClaimView(
        deadline=100, demand_deadline=0, demand_answered=False, voted_result=True, demanded_by_me=False
    )
    bad = MalformedChunk(1, b"\x10\x00", [])
    assert decide(open_claim, malformed=bad, now=50) is DefenceAction.ANSWER_MALFORMED
    assert decide(open_claim, malformed=None, now=50) is DefenceAction.DEMAND
    demanded = ClaimView(100, 150, False, True, True)
    assert decide(demanded, malformed=None, now=50) is DefenceAction.NOTHING
    assert decide(demanded, malformed=None, now=120) is DefenceAction.NOTHING  # response window still open
    assert decide(demanded, malformed=None, now=151) is DefenceAction.RESOLVE
    assert decide(ClaimView(100, 150, True, True, True), malformed=None, now=101) is DefenceAction.RESOLVE
    not_voter = ClaimView(100, 0, False, False, False)
    assert decide(not_voter, malformed=bad, now=50) is DefenceAction.NOTHING
    assert decide(not_voter, malformed=None, now=101) is DefenceAction.RESOLVE


def test_find_malformed_chunk_opens_the_committed_root() -> None:
    import json

    import torch

    from syncline.court.defence import find_malformed_chunk
    from syncline.protocol.chunking import gradient_chunk_contents
    from syncline.protocol.quantization import quantize

    qg = quantize(torch.linspace(-1.0, 1.0, 600), 8)
    payload = qg.to_safetensors_bytes()
    contents = gradient_chunk_contents(qg)
    clean_root = merkle.root([keccak(c) for c in contents])
    assert find_malformed_chunk(payload, clean_root, numel=600, bits=8) is None

    # coordinate 300 (chunk 1, position 44) set to -128, the value the contract's chunk check refuses
    header_len = int.from_bytes(payload[:8], "little")
    start = 8 + header_len + json.loads(payload[8 : 8 + header_len])["values"]["data_offsets"][0]
    bad = bytearray(payload)
    bad[start + 300] = 0x80
    contents[1] = contents[1][: 2 + 44] + b"\x80" + contents[1][2 + 45 :]
    hashes = [keccak(c) for c in contents]
    found = find_malformed_chunk(bytes(bad), merkle.root(hashes), numel=600, bits=8)
    assert found is not None and found.index == 1 and found.content == contents[1]
    assert found.proof == merkle.proof(hashes, 1)
    # bytes that do not open the committed root prove nothing: demand availability instead
    assert find_malformed_chunk(bytes(bad), clean_root, numel=600, bits=8) is None


def test_a_trainer_that_answers_a_training_claim_keeps_its_stake_a_silent_one_is_convicted(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
    tmp_path: Path,
) -> None:
    spec = spec_factory()
    task_id, _ = start_task(market, sponsor, spec, witnesses, trainers)
    for f, t in enumerate(trainers):
        commit(market, t, task_id, 0, f)
    finalize(market, w3, witnesses[:2], task_id, 0, 0b111)
    # The challenger agent's own claims (as its audit would bring them), one per trainer 0 and 1.
    challenger = Challenger(task_id, outsider, market, LocalBlobStore(tmp_path / "blobs"))
    answered_claim = market.challenge_training(outsider, task_id, 0, 0, 1)
    silent_claim = market.challenge_training(outsider, task_id, 0, 1, 1)
    challenger.mine.update({answered_claim, silent_claim})

    published: list[tuple[int, int]] = []
    ready = {"published": False}

    def segment_published(round_: int, segment: int) -> bool:
        published.append((round_, segment))
        return ready["published"]

    responder = AvailabilityResponder(
        market,
        trainers[0],
        task_id,
        0,
        own_payload=lambda r: None,
        numel=spec.param_count,
        bits=spec.gradient_bits,
        now=lambda: devnet_mod.chain_time(w3),
        segment_published=segment_published,
    )
    responder.step()  # its checkpoints are not out yet (an upload waiting): it does not answer yet
    assert not market.availability_demand(answered_claim).answered and published == [(0, 1)]
    ready["published"] = True
    responder.step()
    assert market.availability_demand(answered_claim).answered
    assert not market.availability_demand(silent_claim).answered  # trainer 1 runs no responder

    # Past the response window the challenger closes the silent trainer's claim: upheld.
    respond_by = market.availability_demand(silent_claim).deadline
    travel_past(w3, respond_by)
    challenger._follow_up(devnet_mod.chain_time(w3), pending_block(w3))
    silent = market.challenge(silent_claim)
    assert silent.status == ChallengeStatus.UPHELD and silent.slashed_wei == spec.trainer_stake_wei
    assert market.trainer(task_id, trainers[1].address).evicted
    # The answering trainer's claim waits for its referees until the deadline, then merely expires.
    assert market.challenge(answered_claim).status == ChallengeStatus.OPEN
    travel_past(w3, market.challenge(answered_claim).deadline)
    challenger._follow_up(devnet_mod.chain_time(w3), pending_block(w3))
    assert market.challenge(answered_claim).status == ChallengeStatus.EXPIRED
    assert market.trainer(task_id, trainers[0].address).stake_wei == spec.trainer_stake_wei
