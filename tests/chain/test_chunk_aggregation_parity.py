"""On-chain chunk recomputation (``ChunkAggregation.sol``) is bit-identical to the Python protocol.

The harness is compiled with the project's solc wrapper (nothing cached in the repo), deployed
on the session anvil, and fed random int8/int16 gradient chunks, previous state chunks, rules
(Mean, TrimmedMean, CoordinateMedian) and optimizer coefficients; its new state chunk must equal
the bytes the Python protocol produces (dequantize -> make_rule(...).aggregate -> nesterov_step
-> state_chunk_contents).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _harness import deploy_chunk_aggregation_harness, python_chunk_round
from eth_abi import encode
from eth_utils import keccak
from hexbytes import HexBytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from web3 import Web3
from web3.contract import Contract
from web3.exceptions import ContractCustomError

from syncline.chain.keys import Signer
from syncline.protocol.chunking import state_chunk_contents
from syncline.protocol.enums import AggregationRule
from syncline.protocol.quantization import QuantizedGradient, max_grad_exp, qmax

pytestmark = pytest.mark.chain

STATE_ABS = 1 << 43  # |theta|, |m| < 2**43 and lr <= 1.5 keep every result inside Python's 2**46 bounds
RULES = (AggregationRule.MEAN, AggregationRule.TRIMMED_MEAN, AggregationRule.COORDINATE_MEDIAN)


@pytest.fixture(scope="module")
def harness(w3: Web3, sponsor: Signer) -> Contract:
    return deploy_chunk_aggregation_harness(w3, sponsor)


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    bits = draw(st.sampled_from((8, 8, 8, 16)))
    n = draw(st.integers(1, 16))
    count = draw(st.one_of(st.just(256), st.integers(1, 256)))
    limit = qmax(bits)
    grads = []
    for _ in range(n):
        values = draw(st.lists(st.integers(-limit, limit), min_size=count, max_size=count))
        exponent = draw(st.integers(0, max_grad_exp(bits)))
        grads.append((values, exponent))
    state = st.lists(st.integers(-STATE_ABS + 1, STATE_ABS - 1), min_size=count, max_size=count)
    rule = draw(st.sampled_from(RULES))
    param = draw(st.integers(0, 4999)) if rule == AggregationRule.TRIMMED_MEAN else 0
    return {
        "bits": bits,
        "grads": grads,
        "weights": draw(state),
        "momentum": draw(state),
        "rule": rule,
        "param": param,
        "lr_ppm": draw(st.integers(1, 1_500_000)),
        "mom_ppm": draw(st.integers(0, 999_999)),
    }


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_recompute_state_chunk_matches_python(harness: Contract, case: dict[str, Any]) -> None:
    chunks, prev, expected, _, _ = python_chunk_round(case)
    args = (chunks, case["bits"], int(case["rule"]), case["param"], prev, case["lr_ppm"], case["mom_ppm"])
    got = harness.functions.recomputeStateChunk(*args).call()
    assert bytes(got) == expected
    assert bytes(harness.functions.recomputeHash(*args).call()) == keccak(expected)


def test_recompute_rejects_min_int8_like_python(harness: Contract) -> None:
    """-128 is rejected by ``QuantizedGradient`` and by the contract alike."""
    with pytest.raises(ValueError, match="out of range"):
        QuantizedGradient(
            bits=8, values=torch.tensor([1, -128], dtype=torch.int8), exponents=torch.zeros(1, dtype=torch.uint8)
        )
    weights = torch.zeros(2, dtype=torch.int64)
    (prev,) = state_chunk_contents(weights, weights)
    call = harness.functions.recomputeStateChunk([bytes([8, 0, 1, 0x80])], 8, 0, 0, prev, 700_000, 900_000)
    with pytest.raises(ContractCustomError) as info:
        call.call()
    selector = keccak(text="QuantizedValueOutOfRange(uint256,uint256,int256)")[:4]
    expected = selector + encode(["uint256", "uint256", "int256"], [0, 1, -128])
    data = info.value.data
    assert isinstance(data, str)
    assert HexBytes(data) == HexBytes(expected)
