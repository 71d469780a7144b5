"""The state bound's saturation is byte-identical in Python and in ``ChunkAggregation.sol``.

Issue 10, finding 9: at ``|x| = 2**46 - 1`` the outer step saturates (weights and momentum) instead
of failing. The harness (compiled with the project's solc, deployed on the session anvil) gets
states at and around the bound, the largest gradients a payload can hold and the whole range of
optimizer coefficients; its new state chunk must equal the Python protocol's bytes
(``dequantize -> make_rule(...).aggregate -> nesterov_step -> state_chunk_contents``).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _harness import deploy_chunk_aggregation_harness, python_chunk_round
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from web3 import Web3
from web3.contract import Contract

from syncline.chain.keys import Signer
from syncline.protocol.enums import AggregationRule
from syncline.protocol.outer_optimizer import STATE_MAX, nesterov_step
from syncline.protocol.quantization import max_grad_exp, qmax

pytestmark = pytest.mark.chain

LIMIT = (1 << 46) - 1
DELTA_MAX = (1 << 41) - 1
RULES = (AggregationRule.MEAN, AggregationRule.TRIMMED_MEAN, AggregationRule.COORDINATE_MEDIAN)


@pytest.fixture(scope="module")
def harness(w3: Web3, sponsor: Signer) -> Contract:
    return deploy_chunk_aggregation_harness(w3, sponsor)


def near_bound() -> st.SearchStrategy[int]:
    """State values at the bound, within 2**42 of it (either sign), or anywhere inside."""
    offset = st.integers(0, 1 << 42) | st.sampled_from([0, 1, 2])
    edge = st.tuples(st.sampled_from([1, -1]), offset).map(lambda so: so[0] * (LIMIT - so[1]))
    return edge | edge | st.integers(-LIMIT, LIMIT)


@st.composite
def bound_cases(draw: st.DrawFn) -> dict[str, Any]:
    bits = draw(st.sampled_from((8, 8, 16)))
    n = draw(st.integers(1, 8))
    count = draw(st.integers(1, 40))
    limit = qmax(bits)
    extreme = st.sampled_from([limit, -limit])
    grads = []
    for _ in range(n):
        values = draw(st.lists(extreme | st.integers(-limit, limit), min_size=count, max_size=count))
        exponent = draw(st.sampled_from([max_grad_exp(bits)]) | st.integers(0, max_grad_exp(bits)))
        grads.append((values, exponent))
    rule = draw(st.sampled_from(RULES))
    return {
        "bits": bits,
        "grads": grads,
        "weights": draw(st.lists(near_bound(), min_size=count, max_size=count)),
        "momentum": draw(st.lists(near_bound(), min_size=count, max_size=count)),
        "rule": rule,
        "param": draw(st.integers(0, 4999)) if rule == AggregationRule.TRIMMED_MEAN else 0,
        "lr_ppm": draw(st.sampled_from([700_000, 2**32 - 1]) | st.integers(1, 2**32 - 1)),
        "mom_ppm": draw(st.sampled_from([900_000, 999_999]) | st.integers(0, 999_999)),
    }


def _on_chain(harness: Contract, case: dict[str, Any], chunks: list[bytes], prev: bytes) -> bytes:
    args = (chunks, case["bits"], int(case["rule"]), case["param"], prev, case["lr_ppm"], case["mom_ppm"])
    return bytes(harness.functions.recomputeStateChunk(*args).call())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=bound_cases())
def test_recompute_at_and_around_the_bound_matches_python(harness: Contract, case: dict[str, Any]) -> None:
    chunks, prev, expected, _, _ = python_chunk_round(case)
    assert _on_chain(harness, case, chunks, prev) == expected


@pytest.mark.parametrize("sign", [1, -1])
@pytest.mark.parametrize("mom_ppm", [900_000, 999_999])
def test_maximal_gradients_on_a_state_at_the_bound(harness: Contract, sign: int, mom_ppm: int) -> None:
    """The finding's attack on one chunk: every input ``+-127 << 34``, the state at the bound.
    Before the rule the Python step raised and the contract reverted ``StateOutOfBounds``."""
    count = 6
    case = {
        "bits": 8,
        "grads": [([sign * 127] * count, 34)] + [([sign * 5] * count, 20)] * 2,
        "weights": [-sign * LIMIT, -sign * (LIMIT - 1), -sign * (LIMIT - 1000), 0, sign * LIMIT, -sign * (1 << 45)],
        "momentum": [sign * LIMIT, sign * (LIMIT - 1), 0, sign * (1 << 45), -sign * LIMIT, 0],
        "rule": AggregationRule.MEAN,
        "param": 0,
        "lr_ppm": 700_000,
        "mom_ppm": mom_ppm,
    }
    chunks, prev, expected, new_w, new_m = python_chunk_round(case)
    assert _on_chain(harness, case, chunks, prev) == expected
    assert new_w.tolist()[:3] == [-sign * LIMIT] * 3  # the weights saturate
    assert max(abs(int(x)) for x in (*new_w, *new_m)) <= LIMIT == STATE_MAX
    if mom_ppm == 999_999:
        assert int(new_m[0]) == sign * LIMIT  # and so does the momentum


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    weights=st.lists(near_bound(), min_size=1, max_size=12),
    data=st.data(),
    lr_ppm=st.integers(1, 2**32 - 1),
    mom_ppm=st.integers(0, 999_999),
)
def test_nesterov_step_over_the_whole_input_range_matches_python(
    harness: Contract, weights: list[int], data: st.DataObject, lr_ppm: int, mom_ppm: int
) -> None:
    """The step alone, on every input it accepts (``|theta|, |m| <= 2**46 - 1``, ``|delta| < 2**41``)."""
    k = len(weights)
    momentum = data.draw(st.lists(near_bound(), min_size=k, max_size=k))
    delta = data.draw(
        st.lists(st.integers(-DELTA_MAX, DELTA_MAX) | st.sampled_from([DELTA_MAX, -DELTA_MAX]), min_size=k, max_size=k)
    )
    theta, m, d = (torch.tensor(v, dtype=torch.int64) for v in (weights, momentum, delta))
    new_w, new_m = nesterov_step(theta, m, d, lr_ppm, mom_ppm)
    got_w, got_m = harness.functions.nesterovStep(weights, momentum, delta, lr_ppm, mom_ppm).call()
    assert list(got_w) == new_w.tolist()
    assert list(got_m) == new_m.tolist()
