"""Segments of a round's inner loop: the trainer's payload derivation and a referee's replays.

The trainer runs :meth:`InnerLoop.run` with ``checkpoint_interval`` and derives its payload with
:func:`encode_payload`; a referee re-runs one training segment with :func:`replay_segment` (a fresh
loop configured from the checkpoint itself, in the checkpoint's precision or the referee's own) or
redoes the derivation with :func:`derive_payload`. Both sides use the same functions, so a CPU
trainer's commitments are reproduced bit for bit on CPU with the same kernels (instruction set
and torch build) and thread count (which the checkpoint records); the derivation on any CPU. A
replay that misses, or of another device class, is compared against the spec's tolerance.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from syncline.modality.base import ModalityAdapter
from syncline.privacy.dpsgd import DpSgd, StepNoise
from syncline.protocol.checkpoints import Checkpoint, CheckpointError, CheckpointFile, CheckpointLike, segment_bounds
from syncline.protocol.chunking import gradient_chunk_root
from syncline.protocol.disk_round import encode_payload_file
from syncline.protocol.fixed_point import ONE
from syncline.protocol.layout import ParameterLayout, torch_dtype
from syncline.protocol.quantization import quantize
from syncline.protocol.state import TrainingState
from syncline.run.agent_config import InnerOptimizerConfig
from syncline.run.state_file import StateFile
from syncline.trainer.inner_loop import InnerLoop

_BLOCK = 1 << 22


def encode_payload(gradient: torch.Tensor, bits: int) -> tuple[bytes, bytes]:
    """The committed form of an outer gradient: ``(payload bytes, chunk root)``.

    ``keccak(payload)`` is the submission's ``payloadHash`` and the chunk root its ``chunkRoot``.
    """
    qg = quantize(gradient, bits)
    return qg.to_safetensors_bytes(), gradient_chunk_root(qg)


def start_vector(state: TrainingState) -> torch.Tensor:
    """The round's start weights as the trainer's model holds them (float32, canonical order):
    what ``flat_parameters`` reads right after ``load_weights(model, state)``."""
    return state.layout.flatten(state.to_state_dict())


def start_values(start: StateFile, lo: int, hi: int) -> torch.Tensor:
    """Coordinates ``[lo, hi)`` of :func:`start_vector` of a state in a file, read from it: the
    Q32 weights as float32 (via float64, as ``from_fixed``), each through its parameter's dtype."""
    q = start.regions()[0]
    try:
        values = torch.from_numpy((q.read(lo, hi).astype(np.float64) / float(ONE)).astype(np.float32))
    finally:
        q.close()
    for e in start.layout.entries:
        if e.dtype != "float32" and e.offset < hi and e.offset + e.numel > lo:
            part = slice(max(e.offset, lo) - lo, min(e.offset + e.numel, hi) - lo)
            values[part] = values[part].to(torch_dtype(e.dtype)).to(torch.float32)
    return values


@dataclass(frozen=True)
class _DerivedGradient:
    """The outer gradient ``start - c_S`` of a state and a checkpoint in files, as a region read
    range by range (what :func:`encode_payload_file` quantizes)."""

    start: StateFile
    final: CheckpointFile

    @property
    def numel(self) -> int:
        return self.start.layout.numel

    def read(self, lo: int, hi: int) -> np.ndarray:
        gradient = start_values(self.start, lo, hi) - self.final.values("params", lo, hi)
        if not torch.isfinite(gradient).all():
            raise CheckpointError("the outer gradient derived from the last checkpoint holds NaN/Inf")
        return gradient.numpy()

    def write(self, start: int, values: np.ndarray) -> None:
        raise ValueError("a derived gradient is read-only")


def derive_payload_file(start: StateFile, final: CheckpointFile, bits: int, path: Path) -> tuple[bytes, bytes]:
    """:func:`derive_payload` with the start state and ``c_S`` in files: the payload is written to
    ``path`` range by range (the same bytes); returns its keccak and chunk root."""
    final.check_layout(start.layout)
    encoded = encode_payload_file(_DerivedGradient(start, final), bits, str(path))
    return encoded.payload_hash, encoded.chunk_root


def derive_payload(start: TrainingState, final: Checkpoint, bits: int) -> tuple[bytes, bytes]:
    """The derivation segment: the payload and chunk root an honest trainer commits for a round
    that started from ``start`` and ended in checkpoint ``final`` (``c_S``)."""
    final.check_layout(start.layout)
    gradient = start_vector(start) - final.params
    if not torch.isfinite(gradient).all():
        raise CheckpointError("the outer gradient derived from the last checkpoint holds NaN/Inf")
    return encode_payload(gradient, bits)


def holds_start_state(first: CheckpointLike, start: TrainingState | StateFile) -> bool:
    """Whether ``c_0``'s weights are bit for bit the round's start weights (compared range by
    range when either is in a file)."""
    if isinstance(first, Checkpoint) and isinstance(start, TrainingState):
        expected = start_vector(start)
        return first.params.shape == expected.shape and torch.equal(
            first.params.view(torch.int32), expected.contiguous().view(torch.int32)
        )
    numel = start.layout.numel
    if first.numel != numel:
        return False
    whole = start_vector(start) if isinstance(start, TrainingState) else None
    for lo in range(0, numel, _BLOCK):
        hi = min(lo + _BLOCK, numel)
        expected = whole[lo:hi] if whole is not None else start_values(start, lo, hi)  # type: ignore[arg-type]
        if not torch.equal(first.values("params", lo, hi).view(torch.int32), expected.contiguous().view(torch.int32)):
            return False
    return True


def replay_config(ckpt: CheckpointLike, inner_steps: int) -> InnerOptimizerConfig:
    """The inner-optimizer config a checkpoint was taken with (``eps`` is restored separately)."""
    hp = ckpt.optimizer
    return InnerOptimizerConfig(
        lr=hp.lr,
        weight_decay=hp.weight_decay,
        beta1=hp.beta1,
        beta2=hp.beta2,
        inner_steps=inner_steps,
        batch_size=hp.batch_size,
    )


def replay_segment(
    adapter: ModalityAdapter,
    model: torch.nn.Module,
    layout: ParameterLayout,
    checkpoint: CheckpointLike,
    shards: Sequence[bytes],
    *,
    seed: int,
    segment: int,
    inner_steps: int,
    interval: int,
    device: str | None = None,
    dtype: str | None = None,
    privacy: DpSgd | None = None,
    noise: StepNoise | None = None,
    out: Callable[[bytes], object] | None = None,
) -> bytes:
    """Re-run training segment ``segment`` from ``checkpoint`` (``c_segment``).

    By default as the checkpoint declares (its dtype, on CPU: the bit-exact replay of a CPU
    trainer); ``device`` / ``dtype`` replay on the referee's own device class instead (then compare
    with :mod:`syncline.protocol.tolerance`). ``model`` is a freshly built model of the task (its
    weights are overwritten); returns the canonical bytes of the checkpoint the segment ends in, or
    streams them into ``out`` (one parameter at a time) and returns ``b""``.
    """
    start, stop = segment_bounds(segment, inner_steps, interval)
    use_dtype = dtype or checkpoint.dtype
    loop = InnerLoop(
        adapter,
        model,
        layout,
        replay_config(checkpoint, inner_steps),
        device=device or "cpu",
        dtype=use_dtype,
        privacy=privacy,
    )
    return loop.run_segment(
        checkpoint, shards, seed=seed, start=start, stop=stop, dtype=use_dtype, noise=noise, out=out
    )
