"""Deploy a test harness contract (outside contracts/src) on the session anvil, and the Python
side of the chunk-recomputation parity tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from web3 import Web3
from web3.contract import Contract

from syncline.chain.deployment import deploy_contract
from syncline.chain.keys import Signer
from syncline.chain.toolchain import compile_harness
from syncline.paths import repo_root
from syncline.protocol.aggregation import make_rule
from syncline.protocol.chunking import gradient_chunk_contents, state_chunk_contents
from syncline.protocol.outer_optimizer import nesterov_step
from syncline.protocol.quantization import QuantizedGradient, dequantize

CHUNK_HARNESS = "contracts/test/harness/ChunkAggregationHarness.sol"


def deploy_harness(
    w3: Web3, deployer: Signer, source: str, contract: str, extra_sources: Sequence[Path] = ()
) -> Contract:
    artifact = compile_harness(source, contract, extra_sources)
    address, _ = deploy_contract(w3, deployer, artifact)
    return w3.eth.contract(address=Web3.to_checksum_address(address), abi=artifact.abi)


def deploy_chunk_aggregation_harness(w3: Web3, deployer: Signer) -> Contract:
    """``ChunkAggregationHarness`` (``recomputeStateChunk`` over the project's libraries)."""
    libraries = sorted((repo_root() / "contracts" / "src" / "libraries").glob("*.sol"))
    return deploy_harness(w3, deployer, CHUNK_HARNESS, "ChunkAggregationHarness", libraries)


def python_chunk_round(case: dict[str, Any]) -> tuple[list[bytes], bytes, bytes, torch.Tensor, torch.Tensor]:
    """What the Python protocol makes of one chunk ``case`` (keys ``bits``, ``grads`` as
    ``(values, exponent)`` pairs, ``weights``, ``momentum``, ``rule``, ``param``, ``lr_ppm``,
    ``mom_ppm``): (gradient chunk contents, previous state chunk, expected new state chunk, new
    weights, new momentum), by dequantize -> make_rule(...).aggregate -> nesterov_step."""
    dtype = torch.int8 if case["bits"] == 8 else torch.int16
    chunks, rows = [], []
    for values, exponent in case["grads"]:
        qg = QuantizedGradient(
            bits=case["bits"],
            values=torch.tensor(values, dtype=dtype),
            exponents=torch.tensor([exponent], dtype=torch.uint8),
        )
        (content,) = gradient_chunk_contents(qg)
        chunks.append(content)
        rows.append(dequantize(qg))
    weights = torch.tensor(case["weights"], dtype=torch.int64)
    momentum = torch.tensor(case["momentum"], dtype=torch.int64)
    (prev,) = state_chunk_contents(weights, momentum)
    aggregate = make_rule(case["rule"], case["param"]).aggregate(torch.stack(rows))
    new_w, new_m = nesterov_step(weights, momentum, aggregate, case["lr_ppm"], case["mom_ppm"])
    (expected,) = state_chunk_contents(new_w, new_m)
    return chunks, prev, expected, new_w, new_m
