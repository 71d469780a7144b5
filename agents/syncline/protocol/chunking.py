"""Merkle commitments to chunked tensors, checkable one chunk at a time by a contract.

A tensor of ``numel`` coordinates is cut into ``ceil(numel / CHUNK_SIZE)`` chunks; chunk ``i``
covers coordinates ``[i * CHUNK_SIZE, min((i + 1) * CHUNK_SIZE, numel))``. Each chunk has a
canonical byte string, its content hash is ``keccak256(content)``, and the commitment is the
:mod:`syncline.protocol.merkle` root over the content hashes (leaf ``i`` binds index ``i``).

Chunk contents
--------------
Quantized gradient chunk (``bits`` 8 or 16)::

    uint8 bits || uint8 exponent || value_0 .. value_{k-1}

each value big-endian two's complement in ``bits / 8`` bytes.

State chunk (int64 Q32 weights and momentum)::

    weight_0 .. weight_{k-1} || momentum_0 .. momentum_{k-1}

each 8 bytes big-endian two's complement; one leaf holds everything the outer step needs for
those coordinates.

All chunks are serialized with one vectorized numpy call and sliced; only hashing loops over
chunks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from syncline.protocol import merkle
from syncline.protocol.fixed_point import CHUNK_SIZE, as_numpy, check_int64, int64_be_bytes, num_chunks
from syncline.protocol.hashing import Keccak256, keccak
from syncline.protocol.quantization import QuantizedGradient

__all__ = [
    "CHUNK_SIZE",
    "chunk_bounds",
    "chunk_proof",
    "decode_gradient_chunk",
    "decode_state_chunk",
    "gradient_chunk_contents",
    "gradient_chunk_hashes",
    "gradient_chunk_root",
    "num_chunks",
    "state_chunk_contents",
    "state_chunk_hashes",
    "state_chunk_root",
    "verify_chunk",
]


def chunk_bounds(index: int, numel: int) -> tuple[int, int]:
    """Coordinate range ``[start, stop)`` of chunk ``index``."""
    if not 0 <= index < num_chunks(numel):
        raise IndexError(f"chunk {index} out of range for {numel} coordinates")
    return index * CHUNK_SIZE, min((index + 1) * CHUNK_SIZE, numel)


def gradient_chunk_buffer(bits: int, values: np.ndarray, exponents: np.ndarray) -> tuple[memoryview, int, int]:
    """All chunk contents of gradient values ``values`` (chunk-aligned, any length) laid end to end.

    Returns ``(buffer, stride, last)``: chunk ``i`` is ``buffer[i * stride : i * stride + size_i]``
    with ``stride = 2 + CHUNK_SIZE * bits / 8`` and ``size_i = stride`` except ``last`` for the
    final chunk. Built with vectorized numpy (no per-chunk concatenation).
    """
    width = bits // 8
    count = int(exponents.shape[0])
    numel = int(values.shape[0])
    stride = 2 + CHUNK_SIZE * width
    body = np.zeros(count * CHUNK_SIZE, dtype=">i1" if width == 1 else ">i2")
    body[:numel] = values
    rows = np.empty((count, stride), dtype=np.uint8)
    rows[:, 0] = bits
    rows[:, 1] = exponents
    rows[:, 2:] = body.view(np.uint8).reshape(count, stride - 2)
    last = 2 + (numel - (count - 1) * CHUNK_SIZE) * width
    return rows.reshape(-1).data, stride, last


def hash_rows(buffer: memoryview, stride: int, last: int) -> list[bytes]:
    """keccak of each ``stride``-byte row of ``buffer``, the final row cut to ``last`` bytes."""
    count = (len(buffer) - last) // stride + 1  # the buffer may or may not pad its last row
    hashes = [Keccak256(buffer[i : i + stride]).digest() for i in range(0, (count - 1) * stride, stride)]
    hashes.append(Keccak256(buffer[(count - 1) * stride : (count - 1) * stride + last]).digest())
    return hashes


def gradient_chunk_contents(qg: QuantizedGradient) -> list[bytes]:
    """Canonical bytes of every chunk of a quantized gradient."""
    buffer, stride, last = gradient_chunk_buffer(qg.bits, as_numpy(qg.values), as_numpy(qg.exponents))
    count = qg.num_chunks
    return [bytes(buffer[i * stride : i * stride + (stride if i < count - 1 else last)]) for i in range(count)]


def gradient_chunk_hashes(qg: QuantizedGradient) -> list[bytes]:
    """``keccak256`` of every gradient chunk's content."""
    return hash_rows(*gradient_chunk_buffer(qg.bits, as_numpy(qg.values), as_numpy(qg.exponents)))


def gradient_chunk_root(qg: QuantizedGradient) -> bytes:
    """Merkle root (32 bytes) committing to a quantized gradient."""
    return merkle.root(gradient_chunk_hashes(qg))


def _check_state(weights: torch.Tensor, momentum: torch.Tensor) -> int:
    check_int64(weights, "weights", ndim=1)
    check_int64(momentum, "momentum", ndim=1)
    if weights.numel() != momentum.numel() or weights.numel() == 0:
        raise ValueError(f"weights ({weights.numel()}) and momentum ({momentum.numel()}) need one equal, nonzero size")
    return int(weights.numel())


def state_chunk_contents(weights: torch.Tensor, momentum: torch.Tensor) -> list[bytes]:
    """Canonical bytes of every state chunk (weights slice then momentum slice)."""
    numel = _check_state(weights, momentum)
    wbuf, mbuf = int64_be_bytes(weights), int64_be_bytes(momentum)
    out = []
    for i in range(num_chunks(numel)):
        start, stop = chunk_bounds(i, numel)
        out.append(wbuf[start * 8 : stop * 8] + mbuf[start * 8 : stop * 8])
    return out


def state_chunk_buffer(weights: np.ndarray, momentum: np.ndarray) -> tuple[memoryview, int, int]:
    """All state chunk contents of equal-length int64 slices laid end to end (see
    :func:`gradient_chunk_buffer` for ``(buffer, stride, last)``; ``stride`` is 4096 bytes)."""
    numel = int(weights.shape[0])
    count = num_chunks(numel)
    rows = np.zeros((count, 2, CHUNK_SIZE), dtype=">i8")
    flat = rows.reshape(count, 2 * CHUNK_SIZE)
    full = numel // CHUNK_SIZE
    rows[:full, 0, :] = weights[: full * CHUNK_SIZE].reshape(full, CHUNK_SIZE)
    rows[:full, 1, :] = momentum[: full * CHUNK_SIZE].reshape(full, CHUNK_SIZE)
    tail = numel - full * CHUNK_SIZE
    if tail:  # the short last chunk is packed: weights tail then momentum tail
        flat[full, :tail] = weights[full * CHUNK_SIZE :]
        flat[full, tail : 2 * tail] = momentum[full * CHUNK_SIZE :]
    last = 16 * (numel - (count - 1) * CHUNK_SIZE)
    return rows.view(np.uint8).reshape(-1).data, 16 * CHUNK_SIZE, last


def state_chunk_hashes(weights: torch.Tensor, momentum: torch.Tensor) -> list[bytes]:
    """``keccak256`` of every state chunk's content."""
    _check_state(weights, momentum)
    return hash_rows(*state_chunk_buffer(as_numpy(weights), as_numpy(momentum)))


def state_chunk_root(weights: torch.Tensor, momentum: torch.Tensor) -> bytes:
    """Merkle root (32 bytes) committing to a training state."""
    return merkle.root(state_chunk_hashes(weights, momentum))


def chunk_proof(content_hashes: Sequence[bytes], index: int) -> list[bytes]:
    """Merkle sibling path proving chunk ``index`` (see :func:`verify_chunk`)."""
    return merkle.proof(content_hashes, index)


def verify_chunk(root: bytes, index: int, content: bytes, proof: Sequence[bytes], leaf_count: int) -> bool:
    """Check that ``content`` is chunk ``index`` of the tensor committed by ``root``."""
    return merkle.verify(root, index, keccak(content), proof, leaf_count)


def decode_gradient_chunk(content: bytes) -> tuple[int, int, torch.Tensor]:
    """Inverse of the gradient chunk encoding: ``(bits, exponent, values as int64)``."""
    if len(content) < 3 or content[0] not in (8, 16):
        raise ValueError("not a gradient chunk: bad length or bits byte")
    bits, exponent, width = content[0], content[1], content[0] // 8
    body = content[2:]
    if len(body) % width or len(body) // width > CHUNK_SIZE:
        raise ValueError(f"gradient chunk body of {len(body)} bytes does not hold {bits}-bit values")
    values = np.frombuffer(body, dtype=">i1" if width == 1 else ">i2").astype(np.int64)
    return bits, exponent, torch.from_numpy(values)


def decode_state_chunk(content: bytes) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of the state chunk encoding: ``(weights, momentum)`` int64 slices."""
    if not content or len(content) % 16 or len(content) // 16 > CHUNK_SIZE:
        raise ValueError(f"state chunk of {len(content)} bytes is not k * 16 bytes with k <= {CHUNK_SIZE}")
    values = torch.from_numpy(np.frombuffer(content, dtype=">i8").astype(np.int64))
    half = values.numel() // 2
    return values[:half].clone(), values[half:].clone()
