"""Building fraud proofs a contract checks on its own (pure: no chain, no blobs).

Aggregation fraud: the finalized state differs from the task's rule and outer step applied to
the accepted inputs. The challenger recomputes the round, finds the first state chunk whose
bytes differ from the finalized state, and opens that chunk — every accepted input's gradient
chunk against its trainer's chunk root, the previous state's chunk against the round's previous
state root and the finalized chunk against the finalized root — together with a window of at most
``window`` coordinates around the first differing coordinate. The contract
(``SynclineCourt.proveAggregationFraud``) recomputes only that window, which keeps the proof well
under 3M gas for 16 inputs with any rule it supports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from eth_utils import keccak

from syncline.protocol import merkle
from syncline.protocol.chunking import CHUNK_SIZE, chunk_bounds, gradient_chunk_contents, state_chunk_contents
from syncline.protocol.quantization import QuantizedGradient
from syncline.protocol.state import TrainingState

DEFAULT_WINDOW = 32


@dataclass(frozen=True)
class AggregationOpening:
    """The fields of the on-chain ``AggregationProof`` struct."""

    task_id: int
    round: int
    chunk_index: int
    lo: int
    hi: int
    input_chunks: tuple[bytes, ...]
    input_proofs: tuple[tuple[bytes, ...], ...]
    prev_chunk: bytes
    prev_proof: tuple[bytes, ...]
    claimed_chunk: bytes
    claimed_proof: tuple[bytes, ...]

    def as_tuple(self) -> tuple[object, ...]:
        """ABI tuple in the struct's field order."""
        return (
            self.task_id,
            self.round,
            self.chunk_index,
            self.lo,
            self.hi,
            list(self.input_chunks),
            [list(p) for p in self.input_proofs],
            self.prev_chunk,
            list(self.prev_proof),
            self.claimed_chunk,
            list(self.claimed_proof),
        )


def first_differing_chunk(expected: TrainingState, claimed: TrainingState) -> int | None:
    """Index of the first state chunk whose content differs, or ``None`` if the states are equal."""
    if expected.layout.numel != claimed.layout.numel:
        raise ValueError("states of different sizes cannot be compared chunk by chunk")
    differs = (expected.weights != claimed.weights) | (expected.momentum != claimed.momentum)
    where = torch.nonzero(differs, as_tuple=False)
    if where.numel() == 0:
        return None
    return int(where[0, 0]) // CHUNK_SIZE


def coordinate_window(
    expected: TrainingState, claimed: TrainingState, chunk_index: int, window: int = DEFAULT_WINDOW
) -> tuple[int, int]:
    """``[lo, hi)`` within the chunk: at most ``window`` coordinates starting at the first difference."""
    start, stop = chunk_bounds(chunk_index, expected.layout.numel)
    differs = (expected.weights[start:stop] != claimed.weights[start:stop]) | (
        expected.momentum[start:stop] != claimed.momentum[start:stop]
    )
    where = torch.nonzero(differs, as_tuple=False)
    if where.numel() == 0:
        raise ValueError(f"chunk {chunk_index} does not differ")
    lo = int(where[0, 0])
    return lo, min(lo + window, stop - start)


def build_aggregation_proof(
    *,
    task_id: int,
    round_: int,
    accepted: Sequence[QuantizedGradient],
    previous: TrainingState,
    expected: TrainingState,
    claimed: TrainingState,
    window: int = DEFAULT_WINDOW,
    chunk_index: int | None = None,
) -> AggregationOpening | None:
    """Open the first chunk where ``claimed`` (finalized) differs from ``expected`` (recomputed).

    ``accepted`` are the accepted submissions' gradients in ascending fragment order. Returns
    ``None`` when the two states are identical (no fraud to prove).
    """
    if chunk_index is None:
        chunk_index = first_differing_chunk(expected, claimed)
        if chunk_index is None:
            return None
        lo, hi = coordinate_window(expected, claimed, chunk_index, window)
    else:
        start, stop = chunk_bounds(chunk_index, expected.layout.numel)
        lo, hi = 0, min(window, stop - start)
    inputs: list[bytes] = []
    proofs: list[tuple[bytes, ...]] = []
    for qg in accepted:
        contents = gradient_chunk_contents(qg)
        inputs.append(contents[chunk_index])
        proofs.append(tuple(merkle.proof([keccak(c) for c in contents], chunk_index)))
    prev_contents = state_chunk_contents(previous.weights, previous.momentum)
    claimed_contents = state_chunk_contents(claimed.weights, claimed.momentum)
    return AggregationOpening(
        task_id=task_id,
        round=round_,
        chunk_index=chunk_index,
        lo=lo,
        hi=hi,
        input_chunks=tuple(inputs),
        input_proofs=tuple(proofs),
        prev_chunk=prev_contents[chunk_index],
        prev_proof=tuple(merkle.proof([keccak(c) for c in prev_contents], chunk_index)),
        claimed_chunk=claimed_contents[chunk_index],
        claimed_proof=tuple(merkle.proof([keccak(c) for c in claimed_contents], chunk_index)),
    )
