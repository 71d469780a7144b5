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

import torch

from syncline.chain.market import AggregationProof
from syncline.protocol.chunking import (
    CHUNK_SIZE,
    chunk_bounds,
    chunk_proof,
    gradient_chunk_contents,
    gradient_chunk_hashes,
    state_chunk_contents,
    state_chunk_hashes,
)
from syncline.protocol.quantization import QuantizedGradient
from syncline.protocol.state import TrainingState

DEFAULT_WINDOW = 32


def first_difference(expected: TrainingState, claimed: TrainingState) -> int | None:
    """Index of the first coordinate whose weight or momentum differs, or ``None`` if the states are equal."""
    if expected.layout.numel != claimed.layout.numel:
        raise ValueError("states of different sizes cannot be compared chunk by chunk")
    differs = (expected.weights != claimed.weights) | (expected.momentum != claimed.momentum)
    where = torch.nonzero(differs, as_tuple=False)
    return None if where.numel() == 0 else int(where[0, 0])


def first_differing_chunk(expected: TrainingState, claimed: TrainingState) -> int | None:
    """Index of the first state chunk whose content differs, or ``None`` if the states are equal."""
    first = first_difference(expected, claimed)
    return None if first is None else first // CHUNK_SIZE


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
) -> AggregationProof | None:
    """Open the first chunk where ``claimed`` (finalized) differs from ``expected`` (recomputed),
    with at most ``window`` coordinates starting at the first difference.

    ``accepted`` are the accepted submissions' gradients in ascending fragment order. Returns
    ``None`` when the two states are identical (no fraud to prove). An explicit ``chunk_index``
    opens that chunk from its first coordinate instead (tests: proving an honest chunk fails).
    """
    if chunk_index is None:
        first = first_difference(expected, claimed)
        if first is None:
            return None
        chunk_index = first // CHUNK_SIZE
        lo = first - chunk_index * CHUNK_SIZE
    else:
        lo = 0
    start, stop = chunk_bounds(chunk_index, expected.layout.numel)
    hi = min(lo + window, stop - start)
    prev_chunk, prev_proof = _open_state(previous, chunk_index)
    claimed_chunk, claimed_proof = _open_state(claimed, chunk_index)
    return AggregationProof(
        task_id=task_id,
        round=round_,
        chunk_index=chunk_index,
        lo=lo,
        hi=hi,
        input_chunks=tuple(gradient_chunk_contents(qg)[chunk_index] for qg in accepted),
        input_proofs=tuple(tuple(chunk_proof(gradient_chunk_hashes(qg), chunk_index)) for qg in accepted),
        prev_chunk=prev_chunk,
        prev_proof=prev_proof,
        claimed_chunk=claimed_chunk,
        claimed_proof=claimed_proof,
    )


def _open_state(state: TrainingState, index: int) -> tuple[bytes, tuple[bytes, ...]]:
    """State chunk ``index`` (the chunk encoding of its coordinate slice) and its proof against the state root."""
    start, stop = chunk_bounds(index, state.layout.numel)
    (content,) = state_chunk_contents(state.weights[start:stop], state.momentum[start:stop])
    return content, tuple(chunk_proof(state_chunk_hashes(state.weights, state.momentum), index))
