"""What a witness computes for one round, given the submissions' payloads and the previous state.

Pure and deterministic: the same payload bytes and previous state give the same bytes out on any
machine (integer aggregation and outer step). I/O (fetching blobs, the chain) stays in the agent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from syncline.errors import candidate_failure
from syncline.protocol import merkle
from syncline.protocol.aggregation import AggregationRuleImpl, CoordinateMedian, Krum, make_rule
from syncline.protocol.chunking import gradient_chunk_root, hash_rows
from syncline.protocol.enums import AggregationRule
from syncline.protocol.fixed_point import as_numpy
from syncline.protocol.hashing import keccak
from syncline.protocol.parallel import fork_map
from syncline.protocol.quantization import QuantizedGradient
from syncline.protocol.state import TrainingState
from syncline.protocol.streaming import (
    ArrayRegion,
    GradientInput,
    aggregate_chunk_buffer,
    default_workers,
    shared_region,
    stream_round,
)

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


UNAVAILABLE = "payload unavailable"
HASH_MISMATCH = "hash mismatch: payload keccak differs from the committed payloadHash"
CHUNK_ROOT_MISMATCH = "chunk root mismatch: payload chunks differ from the committed chunkRoot"


def oversized(size: int, max_bytes: int) -> str:
    """Rejection reason of a payload over the task's size bound."""
    return f"oversized payload ({size} > {max_bytes} bytes)"


def wrong_bits(got: int, task: int) -> str:
    """Rejection reason of a payload quantized to another width than the task's."""
    return f"wrong quantization: {got} bits, the task uses {task}"


def validate_submission(
    sub: CommittedSubmission, *, numel: int, bits: int, max_bytes: int
) -> tuple[QuantizedGradient | None, str | None]:
    """Check one submission; returns (gradient, None) or (None, reason)."""
    if sub.payload is None:
        return None, sub.fetch_error or UNAVAILABLE
    if len(sub.payload) > max_bytes:
        return None, oversized(len(sub.payload), max_bytes)
    if keccak(sub.payload) != sub.payload_hash:
        return None, HASH_MISMATCH
    try:
        qg = QuantizedGradient.from_safetensors_bytes(sub.payload, expected_numel=numel, max_bytes=max_bytes)
    except Exception as exc:  # any decoding failure of a trainer's bytes rejects that submission only
        return None, f"malformed payload: {candidate_failure(exc)}"
    if qg.bits != bits:
        return None, wrong_bits(qg.bits, bits)
    if gradient_chunk_root(qg) != sub.chunk_root:
        return None, CHUNK_ROOT_MISMATCH
    return qg, None


def validate_submissions(
    submissions: list[CommittedSubmission], *, numel: int, bits: int, max_bytes: int, workers: int = 1
) -> tuple[list[tuple[int, QuantizedGradient]], dict[int, str]]:
    """Validate every submission (ascending fragment order): ``(valid, rejected reasons)``.

    With ``workers > 1`` the hashing (payload keccak, chunk root) runs in forked processes, one
    submission each; the parent then decodes only the valid payloads (cheap, no hashing).
    """
    ordered = sorted(submissions, key=lambda s: s.fragment)
    forked = workers > 1 and len(ordered) > 1
    reasons: list[str | None] = (
        fork_map(lambda sub: validate_submission(sub, numel=numel, bits=bits, max_bytes=max_bytes)[1], ordered, workers)
        if forked
        else [None] * len(ordered)
    )
    valid: list[tuple[int, QuantizedGradient]] = []
    rejected: dict[int, str] = {}
    for sub, reason in zip(ordered, reasons, strict=True):
        qg: QuantizedGradient | None = None
        if reason is None and forked:  # validated in a worker: decode only
            assert sub.payload is not None
            qg = QuantizedGradient.from_safetensors_bytes(sub.payload, max_bytes=max_bytes)
        elif reason is None:
            qg, reason = validate_submission(sub, numel=numel, bits=bits, max_bytes=max_bytes)
        if qg is None:
            rejected[sub.fragment] = reason or "invalid"
        else:
            valid.append((sub.fragment, qg))
    return valid, rejected


def round_rule(rule: AggregationRule, rule_param: int, inputs: int) -> AggregationRuleImpl:
    """The rule a round runs on ``inputs`` valid rows: the task's, or the coordinate median when
    Krum/Multi-Krum cannot run (they need ``n >= 2f + 3``; docs/protocol.md §8)."""
    impl = make_rule(rule, rule_param)
    if isinstance(impl, Krum) and inputs < 2 * impl.f + 3:
        return CoordinateMedian()
    return impl


def selection_mask(fragments: list[int], selected: tuple[int, ...], rule_name: str, rejected: dict[int, str]) -> int:
    """``acceptedMask`` of the valid rows ``fragments`` the rule ``selected`` (by row); the others
    are recorded in ``rejected`` as filtered by the rule."""
    chosen = set(selected)
    mask = 0
    for row, fragment in enumerate(fragments):
        if row in chosen:
            mask |= 1 << fragment
        else:
            rejected[fragment] = f"filtered by {rule_name}"
    return mask


def aggregate_root(aggregate: torch.Tensor) -> bytes:
    """Merkle root over the aggregate's int64 chunks (8-byte big-endian, ``CHUNK_SIZE`` per chunk)."""
    return merkle.root(hash_rows(*aggregate_chunk_buffer(as_numpy(aggregate))))


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
    workers: int | None = None,
) -> RoundResult:
    """Validate, aggregate with the task's rule and apply the outer Nesterov step.

    If the rule cannot run on the number of valid inputs (Krum/Multi-Krum need n >= 2f + 3), the
    coordinate median is used instead; with no valid input the state carries over unchanged. At
    the state bound the outer step saturates (weights and momentum at ``+-(2**46 - 1)``), so valid
    inputs never make the round fail and are never left out for it.

    The aggregation, outer step and commitments run in :func:`syncline.protocol.streaming.stream_round`
    (range by range, in ``workers`` processes for large rounds; default
    :func:`~syncline.protocol.streaming.default_workers`). The new state's vectors live in shared
    memory when workers were used.
    """
    numel = previous.layout.numel
    workers = default_workers(numel) if workers is None else workers
    valid, rejected = validate_submissions(
        submissions, numel=numel, bits=bits, max_bytes=max_payload_bytes, workers=workers
    )
    if not valid:
        return RoundResult(previous, previous.state_root(), ZERO_ROOT, 0, rejected, "none")

    impl = round_rule(rule, rule_param, len(valid))
    if workers > 1:
        out_w, out_m = shared_region(numel), shared_region(numel)
    else:
        out_w = ArrayRegion(np.empty(numel, dtype=np.int64))
        out_m = ArrayRegion(np.empty(numel, dtype=np.int64))
    streamed = stream_round(
        ArrayRegion(as_numpy(previous.weights)),
        ArrayRegion(as_numpy(previous.momentum)),
        [GradientInput.of(qg) for _, qg in valid],
        impl,
        lr_ppm,
        momentum_ppm,
        out_weights=out_w,
        out_momentum=out_m,
        workers=workers,
    )
    mask = selection_mask([f for f, _ in valid], streamed.selected, type(impl).__name__, rejected)
    new_state = TrainingState(
        layout=previous.layout, weights=torch.from_numpy(out_w.array), momentum=torch.from_numpy(out_m.array)
    )
    return RoundResult(new_state, streamed.state_root, streamed.aggregate_root, mask, rejected, type(impl).__name__)
