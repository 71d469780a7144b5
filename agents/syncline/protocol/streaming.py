"""Streaming round computation (issue 12, item 2; work in progress on this branch).

A round's result is chunk-local for the coordinate-wise rules (mean, trimmed mean, coordinate
median): coordinate ``i`` of the aggregate depends only on coordinate ``i`` of the inputs, the
outer step is coordinate-wise, and every Merkle leaf (a state chunk: the weights' then the
momentum's int64 big-endian slice; an aggregate chunk) covers one ``CHUNK_SIZE`` range. So the
round can be computed range of chunks by range of chunks, holding ``n × range`` int64 values at
once instead of the ``n × numel`` matrix :func:`syncline.protocol.sync_round.compute_round`
stacks (8 bytes per parameter per input), and hashing each chunk in the same pass.

Byte-identical to ``compute_round`` (the parity tests compare every output). Not yet done here:
memory-mapped payloads and state, processes over chunk ranges, and the whole-vector rules (Krum,
Multi-Krum, CenteredClip: a first streaming pass for the exact integer distances, then the
selection, then the aggregation pass), which still run through ``compute_round``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from eth_utils import keccak

from syncline.protocol import merkle
from syncline.protocol.aggregation import AggregationRuleImpl, CoordinateMedian, Mean, TrimmedMean
from syncline.protocol.fixed_point import CHUNK_SIZE, as_numpy, num_chunks
from syncline.protocol.outer_optimizer import nesterov_step
from syncline.protocol.quantization import QuantizedGradient, max_grad_exp

COORDINATE_WISE = (Mean, TrimmedMean, CoordinateMedian)
DEFAULT_RANGE_CHUNKS = 4096
"""Chunks per range: 1 Mi coordinates, ``n × 8`` MiB of int64 inputs at once."""


@dataclass(frozen=True)
class StreamedRound:
    """What a streamed round produced: the new state (written into the caller's arrays) and roots."""

    weights: np.ndarray
    momentum: np.ndarray
    state_root: bytes
    aggregate_root: bytes


def _dequantized_range(qg: QuantizedGradient, first: int, last: int, numel: int) -> np.ndarray:
    """Q32 values ``q << e`` of chunks ``[first, last)`` of one gradient (int64)."""
    start, stop = first * CHUNK_SIZE, min(last * CHUNK_SIZE, numel)
    powers = np.array([1 << i for i in range(max_grad_exp(qg.bits) + 1)], dtype=np.int64)
    exps = as_numpy(qg.exponents)[first:last]
    scale = np.repeat(powers[exps], CHUNK_SIZE)[: stop - start]
    values: np.ndarray = as_numpy(qg.values)[start:stop].astype(np.int64) * scale
    return values


def _chunk_hashes(*arrays: np.ndarray) -> list[bytes]:
    """keccak of each chunk's content: the arrays' int64 big-endian slices, concatenated in order."""
    raws = [a.astype(">i8").tobytes() for a in arrays]
    step = CHUNK_SIZE * 8
    size = len(raws[0])
    return [keccak(b"".join(r[i : i + step] for r in raws)) for i in range(0, size, step)]


def stream_round(
    weights: np.ndarray,
    momentum: np.ndarray,
    gradients: Sequence[QuantizedGradient],
    rule: AggregationRuleImpl,
    lr_ppm: int,
    mom_ppm: int,
    *,
    range_chunks: int = DEFAULT_RANGE_CHUNKS,
    out_weights: np.ndarray | None = None,
    out_momentum: np.ndarray | None = None,
) -> StreamedRound:
    """Aggregate ``gradients`` (valid, ascending fragment order) with a coordinate-wise ``rule``
    and apply the outer step to ``weights``/``momentum`` (int64 Q32, any array-like: a memmap
    works), ``range_chunks`` chunks at a time. The new state goes into ``out_weights`` /
    ``out_momentum`` (new arrays when None)."""
    if not isinstance(rule, COORDINATE_WISE):
        raise ValueError(f"{type(rule).__name__} is not coordinate-wise: it needs whole-vector distances")
    if not gradients:
        raise ValueError("no gradient to aggregate")
    if range_chunks < 1:
        raise ValueError(f"range_chunks must be >= 1, got {range_chunks}")
    numel = int(weights.shape[0])
    out_w = np.empty(numel, dtype=np.int64) if out_weights is None else out_weights
    out_m = np.empty(numel, dtype=np.int64) if out_momentum is None else out_momentum
    state_leaves: list[bytes] = []
    aggregate_leaves: list[bytes] = []
    total = num_chunks(numel)
    for first in range(0, total, range_chunks):
        last = min(first + range_chunks, total)
        start, stop = first * CHUNK_SIZE, min(last * CHUNK_SIZE, numel)
        inputs = np.stack([_dequantized_range(qg, first, last, numel) for qg in gradients])
        aggregate = rule.aggregate_with_info(torch.from_numpy(inputs)).aggregate
        w, m = nesterov_step(
            torch.from_numpy(np.ascontiguousarray(weights[start:stop], dtype=np.int64)),
            torch.from_numpy(np.ascontiguousarray(momentum[start:stop], dtype=np.int64)),
            aggregate,
            lr_ppm,
            mom_ppm,
        )
        out_w[start:stop] = as_numpy(w)
        out_m[start:stop] = as_numpy(m)
        state_leaves += _chunk_hashes(out_w[start:stop], out_m[start:stop])
        aggregate_leaves += _chunk_hashes(as_numpy(aggregate))
    return StreamedRound(out_w, out_m, merkle.root(state_leaves), merkle.root(aggregate_leaves))
