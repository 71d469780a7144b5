"""What a witness computes for one round, given the submissions' payloads and the previous state.

Pure and deterministic: the same payload bytes and previous state give the same bytes out on any
machine (integer aggregation and outer step). I/O (fetching blobs, the chain) stays in the agent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from syncline.protocol import merkle
from syncline.protocol.aggregation import CoordinateMedian, Krum, make_rule
from syncline.protocol.chunking import gradient_chunk_root
from syncline.protocol.enums import AggregationRule
from syncline.protocol.fixed_point import CHUNK_SIZE, int64_be_bytes
from syncline.protocol.hashing import keccak
from syncline.protocol.quantization import QuantizedGradient, dequantize
from syncline.protocol.state import TrainingState

ZERO_ROOT = b"\x00" * 32


@dataclass(frozen=True)
class CommittedSubmission:
    """A fragment's on-chain commitment plus the payload fetched for it (``None`` if unavailable)."""

    fragment: int
    payload_hash: bytes
    chunk_root: bytes
    payload: bytes | None
    fetch_error: str | None = None


@dataclass(frozen=True)
class RoundResult:
    """The vote a witness casts, and why inputs were left out."""

    state: TrainingState
    state_root: bytes
    aggregate_root: bytes
    accepted_mask: int
    rejected: Mapping[int, str] = field(default_factory=dict)
    rule_used: str = ""


def validate_submission(
    sub: CommittedSubmission, *, numel: int, bits: int, max_bytes: int
) -> tuple[QuantizedGradient | None, str | None]:
    """Check one submission; returns (gradient, None) or (None, reason)."""
    if sub.payload is None:
        return None, sub.fetch_error or "payload unavailable"
    if len(sub.payload) > max_bytes:
        return None, f"oversized payload ({len(sub.payload)} > {max_bytes} bytes)"
    if keccak(sub.payload) != sub.payload_hash:
        return None, "hash mismatch: payload keccak differs from the committed payloadHash"
    try:
        qg = QuantizedGradient.from_safetensors_bytes(sub.payload, expected_numel=numel, max_bytes=max_bytes)
    except ValueError as exc:
        return None, f"malformed payload: {exc}"
    if qg.bits != bits:
        return None, f"wrong quantization: {qg.bits} bits, the task uses {bits}"
    if gradient_chunk_root(qg) != sub.chunk_root:
        return None, "chunk root mismatch: payload chunks differ from the committed chunkRoot"
    return qg, None


def aggregate_root(aggregate: torch.Tensor) -> bytes:
    """Merkle root over the aggregate's int64 chunks (8-byte big-endian, ``CHUNK_SIZE`` per chunk)."""
    raw = int64_be_bytes(aggregate)
    step = CHUNK_SIZE * 8
    return merkle.root([keccak(raw[i : i + step]) for i in range(0, len(raw), step)])


def compute_round(
    previous: TrainingState,
    submissions: list[CommittedSubmission],
    *,
    rule: AggregationRule,
    rule_param: int,
    bits: int,
    lr_ppm: int,
    momentum_ppm: int,
    max_payload_bytes: int,
) -> RoundResult:
    """Validate, aggregate with the task's rule and apply the outer Nesterov step.

    If the rule cannot run on the number of valid inputs (Krum/Multi-Krum need n >= 2f + 3), the
    coordinate median is used instead; with no valid input the state carries over unchanged. At
    the state bound the outer step saturates (weights and momentum at ``+-(2**46 - 1)``), so valid
    inputs never make the round fail and are never left out for it.
    """
    numel = previous.layout.numel
    valid: list[tuple[int, QuantizedGradient]] = []
    rejected: dict[int, str] = {}
    for sub in sorted(submissions, key=lambda s: s.fragment):
        qg, reason = validate_submission(sub, numel=numel, bits=bits, max_bytes=max_payload_bytes)
        if qg is None:
            rejected[sub.fragment] = reason or "invalid"
        else:
            valid.append((sub.fragment, qg))
    if not valid:
        return RoundResult(previous, previous.state_root(), ZERO_ROOT, 0, rejected, "none")

    impl = make_rule(rule, rule_param)
    if isinstance(impl, Krum) and len(valid) < 2 * impl.f + 3:
        impl = CoordinateMedian()
    inputs = torch.stack([dequantize(qg) for _, qg in valid])
    result = impl.aggregate_with_info(inputs)
    selected = set(result.selected)
    mask = 0
    for row, (fragment, _) in enumerate(valid):
        if row in selected:
            mask |= 1 << fragment
        else:
            rejected[fragment] = f"filtered by {type(impl).__name__}"
    new_state = previous.apply_round(result.aggregate, lr_ppm, momentum_ppm)
    return RoundResult(
        new_state, new_state.state_root(), aggregate_root(result.aggregate), mask, rejected, type(impl).__name__
    )
