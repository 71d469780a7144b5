"""Issue 10, finding 9: the state bound ``|x| < 2**46`` has defined behaviour (saturation).

One Byzantine trainer that sends the largest gradient a payload can hold (every value ``127 << 34``)
under the Mean rule pushes the weights to the bound in a few dozen rounds. Every witness must keep
computing the same next state there: weights and momentum saturate at ``+-(2**46 - 1)``, the
attacker's input stays accepted (leaving it out would itself be censorship), and the state is a
valid, serializable ``TrainingState`` with a root the chain can recompute chunk by chunk.
"""

from __future__ import annotations

import torch
from eth_utils import keccak

from syncline.protocol.chunking import gradient_chunk_root
from syncline.protocol.enums import AggregationRule
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.quantization import QuantizedGradient, max_grad_exp, qmax, quantize
from syncline.protocol.state import TrainingState
from syncline.protocol.sync_round import CommittedSubmission, RoundResult, compute_round

NUMEL = 300  # two chunks, the second one short
LIMIT = (1 << 46) - 1  # the largest magnitude a weight or a momentum value may hold
HONEST = 3
ROUNDS = 40


def _submission(fragment: int, qg: QuantizedGradient) -> CommittedSubmission:
    payload = qg.to_safetensors_bytes()
    return CommittedSubmission(fragment, keccak(payload), gradient_chunk_root(qg), payload)


def maximal_gradient(sign: int, numel: int = NUMEL, bits: int = 8) -> QuantizedGradient:
    """Every value ``+-qmax`` at the exponent cap: the largest outer gradient a payload can hold."""
    dtype = torch.int8 if bits == 8 else torch.int16
    chunks = -(-numel // 256)
    return QuantizedGradient(
        bits=bits,
        values=torch.full((numel,), sign * qmax(bits), dtype=dtype),
        exponents=torch.full((chunks,), max_grad_exp(bits), dtype=torch.uint8),
    )


def _start() -> TrainingState:
    layout = ParameterLayout.from_state_dict({"w": torch.zeros(NUMEL)})
    weights = torch.randn(NUMEL, generator=torch.Generator().manual_seed(0)) * 0.1
    return TrainingState.from_model_state_dict({"w": weights}, layout)


def _drive(sign: int, momentum_ppm: int, rounds: int = ROUNDS, start: TrainingState | None = None) -> list[RoundResult]:
    """``rounds`` Mean rounds of three honest trainers and one Byzantine trainer sending ``maximal_gradient(sign)``."""
    g = torch.Generator().manual_seed(1)
    state, results = start or _start(), []
    for _ in range(rounds):
        honest = [_submission(i, quantize(torch.randn(NUMEL, generator=g) * 0.01, 8)) for i in range(HONEST)]
        result = compute_round(
            state,
            [*honest, _submission(HONEST, maximal_gradient(sign))],
            rule=AggregationRule.MEAN,
            rule_param=0,
            bits=8,
            lr_ppm=700_000,
            momentum_ppm=momentum_ppm,
            max_payload_bytes=1 << 20,
        )
        results.append(result)
        state = result.state
    return results


def test_a_maximal_byzantine_gradient_under_mean_saturates_and_the_run_goes_on() -> None:
    """Before the fix ``compute_round`` raised ``theta after the step: values must satisfy
    |x| < 2**46`` at round 26 of this run, so every witness stopped and the run halted."""
    for sign in (1, -1):
        results = _drive(sign, 900_000)
        saturated = [r for r, res in enumerate(results) if int(res.state.weights.abs().max()) == LIMIT]
        assert saturated, "the attack must reach the bound within the test's rounds"
        first = saturated[0]
        assert 15 <= first < ROUNDS - 5
        for res in results:
            assert res.accepted_mask == 0b1111 and not res.rejected  # nobody is left out
            assert int(res.state.weights.abs().max()) <= LIMIT
            assert int(res.state.momentum.abs().max()) <= LIMIT
            assert TrainingState.from_bytes(res.state.to_bytes()) == res.state
        # Descent subtracts the gradient: a positive attack pins the weights at -LIMIT and keeps them there.
        pinned = results[-1].state.weights
        assert bool((pinned == -sign * LIMIT).all())
        assert all(r in saturated for r in range(first, ROUNDS))


def test_momentum_saturates_too() -> None:
    """With momentum ~1 the momentum itself reaches the bound; it saturates as the weights do.
    (From a state whose momentum is already ``2**42`` below the bound: from zero it takes ~130 rounds.)"""
    start = _start()
    start = TrainingState(layout=start.layout, weights=start.weights, momentum=torch.full((NUMEL,), LIMIT - (1 << 42)))
    results = _drive(1, 999_999, rounds=20, start=start)
    momentum = results[-1].state.momentum
    assert bool((momentum == LIMIT).all())
    assert bool((results[-1].state.weights == -LIMIT).all())
    assert all(res.accepted_mask == 0b1111 for res in results)
