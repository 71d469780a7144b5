"""Aggregation-fraud proofs built by the Python challenger, checked by the real court on anvil.

For each chunk-provable rule, three trainers commit real int8 gradients (their chunk roots), a
colluding quorum finalizes a state with one wrong coordinate, and the challenger's
``build_aggregation_proof`` opening is accepted: the voters' bonds are slashed, the round is
invalidated and the task's state root rolls back. The same opening against the honest state is
refused with ``SynclineAggregationCorrect``, and a tampered opening with ``SynclineBadMerkleProof``.

At the state bound (issue 10, finding 9) the round saturates: an honest state whose chunk holds
saturated weights and momentum cannot be proven wrong, and a forged one (one unit inside the
bound, or one past it) is convicted.
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
from syncline.court.proofs import build_aggregation_proof, first_differing_chunk
from syncline.errors import ChainError
from syncline.protocol.aggregation import make_rule
from syncline.protocol.chunking import (
    chunk_proof,
    gradient_chunk_root,
    state_chunk_contents,
    state_chunk_hashes,
    state_chunk_root,
    verify_chunk,
)
from syncline.protocol.enums import AggregationRule, ChallengeStatus, RoundStatus, Tier
from syncline.protocol.fixed_point import to_fixed
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.outer_optimizer import STATE_MAX
from syncline.protocol.quantization import QuantizedGradient, dequantize, quantize
from syncline.protocol.spec import AggregationSpec, OuterOptimizerSpec, TrainingTaskSpec
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


def _post_round(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    spec: TrainingTaskSpec,
    grads: list[QuantizedGradient],
    claimed_root: bytes,
) -> int:
    """Start ``spec``'s task, commit ``grads`` (fragments in order) and let two of the three
    witnesses finalize round 0 with ``claimed_root``; returns the task id."""
    task_id, _ = start_task(market, sponsor, spec, witnesses, trainers)
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
    travel_past(w3, market.round_deadline(task_id))
    for w in witnesses[:2]:
        market.finalize_round(w, task_id, 0, claimed_root, h32("aggregate"), 0b111)
    assert market.round(task_id, 0).status == RoundStatus.FINALIZED
    return task_id


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
    grads = _gradients(len(trainers))
    honest = _honest(previous, grads, spec)
    claimed = honest
    if tamper:
        weights = honest.weights.clone()
        weights[300] += 1  # chunk 1, coordinate 44
        claimed = TrainingState(layout=honest.layout, weights=weights, momentum=honest.momentum)
    task_id = _post_round(market, w3, sponsor, trainers, witnesses, spec, grads, claimed.state_root())
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


# ---------------------------------------------------------------- the state bound: saturation

SATURATED = range(256, 512)  # chunk 1: pushed to the bound by maximal gradients
LIMIT = (1 << 46) - 1


def _at_the_bound() -> tuple[TrainingState, list[QuantizedGradient]]:
    """A previous state whose chunk 1 sits at the bound (weights ~ -LIMIT, momentum ~ +LIMIT) and
    three trainers' gradients that are maximal there (every value ``127 << 34``): the next weights
    and, at momentum 0.999999, the next momentum saturate on the whole chunk."""
    previous = _previous()
    weights, momentum = previous.weights.clone(), previous.momentum.clone()
    lo, hi = SATURATED.start, SATURATED.stop
    weights[lo:hi] = -(LIMIT - torch.arange(hi - lo, dtype=torch.int64) * 1000)
    momentum[lo:hi] = LIMIT - torch.arange(hi - lo, dtype=torch.int64)
    grads = []
    for qg in _gradients(3):
        values = qg.values.clone()
        exponents = qg.exponents.clone()
        values[lo:hi] = 127
        exponents[1] = 34
        grads.append(QuantizedGradient(bits=8, values=values, exponents=exponents))
    return TrainingState(layout=previous.layout, weights=weights, momentum=momentum), grads


def _saturating_round(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    spec_factory: Callable[..., TrainingTaskSpec],
    forge: Callable[[torch.Tensor, torch.Tensor], None] | None,
) -> tuple[int, TrainingState, list[QuantizedGradient], TrainingState, tuple[torch.Tensor, torch.Tensor]]:
    """Finalize round 0 on the state at the bound with the honest (saturated) result, or with the
    result that ``forge`` edits in place (weights, momentum; values may leave the bound)."""
    previous, grads = _at_the_bound()
    spec = spec_factory(
        param_count=PARAMS,
        initial_state_root=previous.state_root_hex,
        aggregation=AggregationSpec(rule=AggregationRule.MEAN),
        tier=Tier.OPEN,
        outer_optimizer=OuterOptimizerSpec(lr=0.7, momentum=0.999999),
        min_trainers=3,
    )
    honest = _honest(previous, grads, spec)
    saturated = honest.weights[SATURATED.start : SATURATED.stop]
    assert bool((saturated == -STATE_MAX).all())
    assert bool((honest.momentum[SATURATED.start : SATURATED.stop] == STATE_MAX).all())
    weights, momentum = honest.weights.clone(), honest.momentum.clone()
    if forge is not None:
        forge(weights, momentum)
    task_id = _post_round(market, w3, sponsor, trainers, witnesses, spec, grads, state_chunk_root(weights, momentum))
    return task_id, previous, grads, honest, (weights, momentum)


def test_an_honest_saturated_state_cannot_be_proven_wrong(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
) -> None:
    """Before the bound had a rule the court's recomputation reverted ``StateOutOfBounds`` here."""
    task_id, previous, grads, honest, _ = _saturating_round(
        market, w3, sponsor, trainers, witnesses, spec_factory, None
    )
    opening = build_aggregation_proof(
        task_id=task_id,
        round_=0,
        accepted=grads,
        previous=previous,
        expected=honest,
        claimed=honest,
        chunk_index=1,
        window=256,
    )
    assert opening is not None
    with pytest.raises(ChainError) as err:
        market.prove_aggregation_fraud(outsider, opening)
    assert err.value.error_name == "SynclineAggregationCorrect"
    assert market.round(task_id, 0).status == RoundStatus.FINALIZED


def _weight_inside(w: torch.Tensor, m: torch.Tensor) -> None:
    w[300] += 1  # -LIMIT + 1: in bounds, but not the saturated value


def _weight_past(w: torch.Tensor, m: torch.Tensor) -> None:
    w[300] -= 1  # -2**46: one past the bound (a step that forgot to saturate)


def _momentum_past(w: torch.Tensor, m: torch.Tensor) -> None:
    m[300] += 1  # 2**46


FORGERIES = {"weight_inside": _weight_inside, "weight_past": _weight_past, "momentum_past": _momentum_past}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_forged_saturated_state_is_convicted(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
    forgery: str,
) -> None:
    task_id, previous, grads, honest, (weights, momentum) = _saturating_round(
        market, w3, sponsor, trainers, witnesses, spec_factory, FORGERIES[forgery]
    )
    opening = build_aggregation_proof(
        task_id=task_id, round_=0, accepted=grads, previous=previous, expected=honest, claimed=honest, chunk_index=1
    )
    assert opening is not None and (opening.lo, opening.hi) == (0, 32)
    # Open the forged chunk (a TrainingState cannot hold a value past the bound) in a window from
    # the forged coordinate (chunk 1, coordinate 44).
    start, stop = SATURATED.start, SATURATED.stop
    (forged_chunk,) = state_chunk_contents(weights[start:stop], momentum[start:stop])
    forged_proof = tuple(chunk_proof(state_chunk_hashes(weights, momentum), 1))
    opening = replace(opening, lo=44, hi=76, claimed_chunk=forged_chunk, claimed_proof=forged_proof)
    bond = market.witness_bond(task_id)
    challenge_id = market.prove_aggregation_fraud(outsider, opening)
    c = market.challenge(challenge_id)
    assert c.status == ChallengeStatus.UPHELD
    assert c.slashed_wei == 2 * bond
    assert market.round(task_id, 0).status == RoundStatus.INVALIDATED
    assert market.task(task_id).state_root == previous.state_root_hex
