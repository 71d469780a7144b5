"""Aggregation-fraud proofs built by the Python challenger, checked by the real court on anvil.

For each chunk-provable rule, three trainers commit real int8 gradients (their chunk roots), a
colluding quorum finalizes a state with one wrong coordinate, and the challenger's
``build_aggregation_proof`` opening is accepted: the voters' bonds are slashed, the round is
invalidated and the task's state root rolls back. The same opening against the honest state is
refused with ``SynclineAggregationCorrect``, and a tampered opening with ``SynclineBadMerkleProof``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
import torch
from web3 import Web3

from conftest import checkpoint_root, h32, start_task, travel_past
from syncline.chain.keys import Signer
from syncline.chain.market import AggregationProof, MarketClient
from syncline.challenger.proofs import build_aggregation_proof, first_differing_chunk
from syncline.errors import ChainError
from syncline.protocol.aggregation import make_rule
from syncline.protocol.chunking import gradient_chunk_root, verify_chunk
from syncline.protocol.enums import AggregationRule, ChallengeStatus, RoundStatus
from syncline.protocol.fixed_point import to_fixed
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.quantization import QuantizedGradient, dequantize, quantize
from syncline.protocol.spec import AggregationSpec, TrainingTaskSpec
from syncline.protocol.state import TrainingState

pytestmark = pytest.mark.chain

PARAMS = 600  # three chunks: 256, 256 and 88 coordinates
RULES = [
    (AggregationRule.MEAN, 0),
    (AggregationRule.TRIMMED_MEAN, 3400),  # trims one of three from each side
    (AggregationRule.COORDINATE_MEDIAN, 0),
]


def _previous() -> TrainingState:
    g = torch.Generator().manual_seed(7)
    layout = ParameterLayout.from_state_dict({"w": torch.zeros(PARAMS)})
    weights = to_fixed(torch.randn(PARAMS, generator=g) * 0.1)
    momentum = to_fixed(torch.randn(PARAMS, generator=g) * 0.01)
    return TrainingState(layout=layout, weights=weights, momentum=momentum)


def _gradients(n: int) -> list[QuantizedGradient]:
    g = torch.Generator().manual_seed(11)
    return [quantize(torch.randn(PARAMS, generator=g) * 0.02, 8) for _ in range(n)]


def _honest(previous: TrainingState, grads: list[QuantizedGradient], spec: TrainingTaskSpec) -> TrainingState:
    rule = make_rule(spec.aggregation.rule, spec.aggregation.rule_param)
    aggregate = rule.aggregate_with_info(torch.stack([dequantize(q) for q in grads])).aggregate
    return previous.apply_round(aggregate, spec.outer_lr_ppm, spec.outer_momentum_ppm)


def _finalized_round(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    spec_factory: Callable[..., TrainingTaskSpec],
    rule: AggregationRule,
    param: int,
    *,
    tamper: bool,
) -> tuple[int, TrainingState, list[QuantizedGradient], TrainingState, TrainingState]:
    previous = _previous()
    spec = spec_factory(
        param_count=PARAMS,
        initial_state_root=previous.state_root_hex,
        aggregation=AggregationSpec(rule=rule, trim_fraction=param / 10_000),
        min_trainers=3,
    )
    task_id, _ = start_task(market, sponsor, spec, witnesses, trainers)
    grads = _gradients(len(trainers))
    for fragment, (trainer, qg) in enumerate(zip(trainers, grads, strict=True)):
        market.commit_submission(
            trainer,
            task_id,
            0,
            fragment,
            h32(f"payload-{fragment}"),
            gradient_chunk_root(qg),
            f"blob://{fragment}",
            checkpoint_root=checkpoint_root(f"agg-{fragment}"),
        )
    honest = _honest(previous, grads, spec)
    claimed = honest
    if tamper:
        weights = honest.weights.clone()
        weights[300] += 1  # chunk 1, coordinate 44
        claimed = TrainingState(layout=honest.layout, weights=weights, momentum=honest.momentum)
    travel_past(w3, market.round_deadline(task_id))
    for w in witnesses[:2]:
        market.finalize_round(w, task_id, 0, claimed.state_root(), h32("aggregate"), 0b111)
    assert market.round(task_id, 0).status == RoundStatus.FINALIZED
    return task_id, previous, grads, honest, claimed


@pytest.mark.parametrize(("rule", "param"), RULES, ids=[r.name.lower() for r, _ in RULES])
def test_python_proof_of_a_wrong_aggregate_is_upheld(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
    rule: AggregationRule,
    param: int,
) -> None:
    task_id, previous, grads, honest, claimed = _finalized_round(
        market, w3, sponsor, trainers, witnesses, spec_factory, rule, param, tamper=True
    )
    opening = build_aggregation_proof(
        task_id=task_id, round_=0, accepted=grads, previous=previous, expected=honest, claimed=claimed
    )
    assert opening is not None
    assert (opening.chunk_index, opening.lo, opening.hi) == (1, 44, 76)
    for qg, content, proof in zip(grads, opening.input_chunks, opening.input_proofs, strict=True):
        assert verify_chunk(gradient_chunk_root(qg), 1, content, proof, 3)  # each input against its own root

    bond = market.witness_bond(task_id)
    challenge_id = market.prove_aggregation_fraud(outsider, opening)
    c = market.challenge(challenge_id)
    assert c.status == ChallengeStatus.UPHELD
    assert c.slashed_wei == 2 * bond
    assert market.round(task_id, 0).status == RoundStatus.INVALIDATED
    assert market.task(task_id).state_root == previous.state_root_hex
    for w in witnesses[:2]:
        assert market.witness(task_id, w.address).slashed_wei == bond
    assert market.witness(task_id, witnesses[2].address).slashed_wei == 0


def test_the_honest_state_cannot_be_proven_wrong(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
) -> None:
    task_id, previous, grads, honest, claimed = _finalized_round(
        market, w3, sponsor, trainers, witnesses, spec_factory, AggregationRule.COORDINATE_MEDIAN, 0, tamper=False
    )
    assert first_differing_chunk(honest, claimed) is None
    for chunk in (0, 2):  # a full chunk and the short last one, whole window
        opening = build_aggregation_proof(
            task_id=task_id,
            round_=0,
            accepted=grads,
            previous=previous,
            expected=honest,
            claimed=claimed,
            chunk_index=chunk,
            window=256,
        )
        assert opening is not None
        with pytest.raises(ChainError) as err:
            market.prove_aggregation_fraud(outsider, opening)
        assert err.value.error_name == "SynclineAggregationCorrect"
    assert market.round(task_id, 0).status == RoundStatus.FINALIZED


def test_a_forged_opening_is_refused(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
) -> None:
    task_id, previous, grads, honest, claimed = _finalized_round(
        market, w3, sponsor, trainers, witnesses, spec_factory, AggregationRule.MEAN, 0, tamper=True
    )
    opening = build_aggregation_proof(
        task_id=task_id, round_=0, accepted=grads, previous=previous, expected=honest, claimed=claimed
    )
    assert opening is not None
    forged_input = bytearray(opening.input_chunks[0])
    forged_input[5] ^= 1
    forged: list[AggregationProof] = [
        replace(opening, input_chunks=(bytes(forged_input), *opening.input_chunks[1:])),
        replace(opening, prev_chunk=opening.claimed_chunk),
        replace(opening, chunk_index=0),
    ]
    for bad in forged:
        with pytest.raises(ChainError) as err:
            market.prove_aggregation_fraud(outsider, bad)
        assert err.value.error_name == "SynclineBadMerkleProof"
    with pytest.raises(ChainError) as err:
        market.prove_aggregation_fraud(outsider, replace(opening, input_chunks=opening.input_chunks[:2]))
    assert err.value.error_name == "SynclineBadOpening"
