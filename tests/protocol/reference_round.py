"""The whole-vector round (``compute_round`` before issue 12's streaming rewrite), kept as the
oracle the streaming implementation is tested against: it stacks the ``n x numel`` int64 inputs,
runs the rule's whole-vector definition (:mod:`syncline.protocol.aggregation`) and the outer step
(:meth:`TrainingState.apply_round`), and hashes the results in separate passes."""

from __future__ import annotations

import torch

from syncline.protocol import merkle
from syncline.protocol.aggregation import CoordinateMedian, Krum, make_rule
from syncline.protocol.enums import AggregationRule
from syncline.protocol.fixed_point import CHUNK_SIZE, int64_be_bytes
from syncline.protocol.hashing import keccak
from syncline.protocol.quantization import dequantize
from syncline.protocol.state import TrainingState
from syncline.protocol.sync_round import ZERO_ROOT, CommittedSubmission, RoundResult, validate_submissions


def reference_aggregate_root(aggregate: torch.Tensor) -> bytes:
    raw = int64_be_bytes(aggregate)
    step = CHUNK_SIZE * 8
    return merkle.root([keccak(raw[i : i + step]) for i in range(0, len(raw), step)])


def reference_compute_round(
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
    numel = previous.layout.numel
    valid, rejected = validate_submissions(submissions, numel=numel, bits=bits, max_bytes=max_payload_bytes)
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
        new_state,
        new_state.state_root(),
        reference_aggregate_root(result.aggregate),
        mask,
        rejected,
        type(impl).__name__,
    )
