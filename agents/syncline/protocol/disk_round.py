"""Rounds whose state and payloads live in files: a billion parameters in bounded memory.

A 1B-parameter state is 16 GB and each int8 payload 1 GB, so a witness (or a trainer
re-deriving the state) keeps them on disk and streams them:

* :func:`open_payload` validates a payload file exactly as
  :func:`syncline.protocol.sync_round.validate_submission` validates bytes (same checks, same
  order, same one-line reasons) while reading it range by range: the size bound, the committed
  ``payloadHash`` (incremental keccak), the safetensors header, the exponent cap and value range,
  the task's width and the committed ``chunkRoot`` (block roots, as in
  :mod:`syncline.protocol.streaming`).
* :func:`compute_round_on_disk` then runs :func:`syncline.protocol.streaming.stream_round` over
  the valid payloads and updates the state in place (``pread``/``pwrite``), in worker processes.
* :func:`encode_payload_file` is the trainer's side: quantize a float gradient range by range
  and write the payload file, computing its ``chunkRoot`` in the same pass; the bytes are exactly
  :meth:`QuantizedGradient.to_safetensors_bytes`.

Same bytes as the in-memory path (``tests/protocol/test_disk_round.py``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from syncline.errors import candidate_failure
from syncline.protocol import merkle
from syncline.protocol.chunking import gradient_chunk_buffer, hash_rows, state_chunk_buffer
from syncline.protocol.enums import AggregationRule
from syncline.protocol.fixed_point import CHUNK_SIZE, MAX_SAFETENSORS_HEADER, num_chunks, padded_json
from syncline.protocol.hashing import Keccak256
from syncline.protocol.parallel import fork_map
from syncline.protocol.quantization import payload_layout, quantize_array, range_problem
from syncline.protocol.streaming import (
    DEFAULT_RANGE_CHUNKS,
    FileRegion,
    GradientInput,
    Region,
    default_workers,
    stream_round,
)
from syncline.protocol.sync_round import (
    CHUNK_ROOT_MISMATCH,
    HASH_MISMATCH,
    UNAVAILABLE,
    ZERO_ROOT,
    oversized,
    round_rule,
    selection_mask,
    wrong_bits,
)

READ_BLOCK = 8 << 20


@dataclass(frozen=True)
class PayloadFile:
    """A fragment's on-chain commitment and the file its payload was fetched to (None if unavailable)."""

    fragment: int
    payload_hash: bytes
    chunk_root: bytes
    path: str | None
    fetch_error: str | None = None
    digest_verified: bool = False
    """True when ``path`` was written by a fetch that checked the bytes' keccak against
    ``payload_hash`` as they arrived (the blob store's verified fetch, which refuses a mismatch):
    the round then does not read and hash the file a second time."""


@dataclass(frozen=True)
class DiskRoundResult:
    """A round's vote; the new state was written over the state files."""

    state_root: bytes
    aggregate_root: bytes
    accepted_mask: int
    rejected: dict[int, str] = field(default_factory=dict)
    rule_used: str = ""


def file_keccak(path: str) -> bytes:
    """keccak256 of a file, read in blocks."""
    hasher = Keccak256()
    with open(path, "rb") as f:
        while block := f.read(READ_BLOCK):
            hasher.update(block)
    digest: bytes = hasher.digest()
    return digest


def _range_block_roots(
    bits: int, values: Region, exponents: np.ndarray, numel: int, range_chunks: int
) -> tuple[bytes, str | None]:
    """The chunk root of a payload read range by range, and the first value-range error."""
    roots: list[bytes] = []
    problem: str | None = None
    total = num_chunks(numel)
    for first in range(0, total, range_chunks):
        last = min(first + range_chunks, total)
        vals = values.read(first * CHUNK_SIZE, min(last * CHUNK_SIZE, numel))
        exps = exponents[first:last]
        problem = problem or range_problem(bits, vals, exps)
        hashes = hash_rows(*gradient_chunk_buffer(bits, vals, exps))
        roots.append(merkle.block_root(hashes, first))
    return merkle.root_of_blocks(roots), problem


def open_payload(
    sub: PayloadFile, *, numel: int, bits: int, max_bytes: int, range_chunks: int = DEFAULT_RANGE_CHUNKS
) -> tuple[GradientInput | None, str | None]:
    """Validate a payload file; ``(gradient over the file, None)`` or ``(None, reason)``."""
    if sub.path is None:
        return None, sub.fetch_error or UNAVAILABLE
    size = os.path.getsize(sub.path)
    if size > max_bytes:
        return None, oversized(size, max_bytes)
    if not sub.digest_verified and file_keccak(sub.path) != sub.payload_hash:
        return None, HASH_MISMATCH
    with open(sub.path, "rb") as f:
        prefix = f.read(8 + MAX_SAFETENSORS_HEADER)
    try:
        got_bits, _, spans = payload_layout(prefix, size, expected_numel=numel, max_bytes=max_bytes)
    except Exception as exc:  # any decoding failure of a trainer's bytes rejects that submission only
        return None, f"malformed payload: {candidate_failure(exc)}"
    begin, end = spans["exponents"]
    with open(sub.path, "rb") as f:
        f.seek(begin)
        exponents = np.frombuffer(f.read(end - begin), dtype=np.uint8)
    width = "<i1" if got_bits == 8 else "<i2"
    values = FileRegion(sub.path, spans["values"][0], numel, dtype=width)
    root, problem = _range_block_roots(got_bits, values, exponents, numel, range_chunks)
    values.close()
    if problem is not None:
        return None, f"malformed payload: {problem}"
    if got_bits != bits:
        return None, wrong_bits(got_bits, bits)
    if root != sub.chunk_root:
        return None, CHUNK_ROOT_MISMATCH
    return GradientInput(got_bits, FileRegion(sub.path, spans["values"][0], numel, dtype=width), exponents), None


def open_payloads(
    subs: Sequence[PayloadFile],
    *,
    numel: int,
    bits: int,
    max_bytes: int,
    workers: int = 1,
    range_chunks: int = DEFAULT_RANGE_CHUNKS,
) -> tuple[list[tuple[int, GradientInput]], dict[int, str]]:
    """Validate every payload file (ascending fragment order, one worker process per file when
    ``workers > 1``): ``(valid gradients, rejected reasons)``."""
    ordered = sorted(subs, key=lambda s: s.fragment)
    forked = workers > 1 and len(ordered) > 1

    def check(sub: PayloadFile) -> str | None:
        return open_payload(sub, numel=numel, bits=bits, max_bytes=max_bytes, range_chunks=range_chunks)[1]

    reasons: list[str | None] = fork_map(check, ordered, workers) if forked else [None] * len(ordered)
    valid: list[tuple[int, GradientInput]] = []
    rejected: dict[int, str] = {}
    for sub, reason in zip(ordered, reasons, strict=True):
        gradient: GradientInput | None = None
        if reason is None and forked:  # validated in a worker: header and exponents only
            gradient = _reopen(sub, numel)
        elif reason is None:
            gradient, reason = open_payload(sub, numel=numel, bits=bits, max_bytes=max_bytes, range_chunks=range_chunks)
        if gradient is None:
            rejected[sub.fragment] = reason or "invalid"
        else:
            valid.append((sub.fragment, gradient))
    return valid, rejected


def _reopen(sub: PayloadFile, numel: int) -> GradientInput:
    """A payload a worker already validated: header and exponents only."""
    assert sub.path is not None
    size = os.path.getsize(sub.path)
    with open(sub.path, "rb") as f:
        prefix = f.read(8 + MAX_SAFETENSORS_HEADER)
        bits, _, spans = payload_layout(prefix, size, expected_numel=numel)
        f.seek(spans["exponents"][0])
        exponents = np.frombuffer(f.read(spans["exponents"][1] - spans["exponents"][0]), dtype=np.uint8)
    width = "<i1" if bits == 8 else "<i2"
    return GradientInput(bits, FileRegion(sub.path, spans["values"][0], numel, dtype=width), exponents)


def state_root_on_disk(weights: Region, momentum: Region, range_chunks: int = DEFAULT_RANGE_CHUNKS) -> bytes:
    """The state root of a state read range by range."""
    numel = weights.numel
    roots = []
    for first in range(0, num_chunks(numel), range_chunks):
        start, stop = first * CHUNK_SIZE, min((first + range_chunks) * CHUNK_SIZE, numel)
        hashes = hash_rows(*state_chunk_buffer(weights.read(start, stop), momentum.read(start, stop)))
        roots.append(merkle.block_root(hashes, first))
    return merkle.root_of_blocks(roots)


def compute_round_on_disk(
    weights: Region,
    momentum: Region,
    submissions: Sequence[PayloadFile],
    *,
    rule: AggregationRule,
    rule_param: int,
    bits: int,
    lr_ppm: int,
    momentum_ppm: int,
    max_payload_bytes: int,
    workers: int | None = None,
    range_chunks: int = DEFAULT_RANGE_CHUNKS,
) -> DiskRoundResult:
    """:func:`syncline.protocol.sync_round.compute_round` for a state and payloads in files; the
    new state overwrites ``weights``/``momentum`` (writable regions)."""
    numel = weights.numel
    workers = default_workers(numel) if workers is None else workers
    valid, rejected = open_payloads(
        submissions, numel=numel, bits=bits, max_bytes=max_payload_bytes, workers=workers, range_chunks=range_chunks
    )
    if not valid:
        return DiskRoundResult(state_root_on_disk(weights, momentum, range_chunks), ZERO_ROOT, 0, rejected, "none")
    impl = round_rule(rule, rule_param, len(valid))
    try:
        streamed = stream_round(
            weights,
            momentum,
            [g for _, g in valid],
            impl,
            lr_ppm,
            momentum_ppm,
            out_weights=weights,
            out_momentum=momentum,
            workers=workers,
            range_chunks=range_chunks,
        )
    finally:
        for _, g in valid:
            if isinstance(g.values, FileRegion):
                g.values.close()
    mask = selection_mask([f for f, _ in valid], streamed.selected, type(impl).__name__, rejected)
    return DiskRoundResult(streamed.state_root, streamed.aggregate_root, mask, rejected, type(impl).__name__)


@dataclass(frozen=True)
class EncodedPayload:
    """What a trainer commits for a payload file."""

    payload_hash: bytes
    chunk_root: bytes
    size: int


def encode_payload_file(
    gradient: Region, bits: int, path: str, *, range_chunks: int = DEFAULT_RANGE_CHUNKS
) -> EncodedPayload:
    """Quantize float values ``gradient`` range by range into the payload file ``path``.

    The file is byte for byte :meth:`QuantizedGradient.to_safetensors_bytes` of
    ``quantize(gradient, bits)``: the canonical header, then the exponents (``exponents`` sorts
    before ``values``), then the values. Raises ValueError on NaN/Inf.
    """
    numel = gradient.numel
    count = num_chunks(numel)
    width = bits // 8
    dtype = "<i1" if bits == 8 else "<i2"
    header = {
        "__metadata__": {"bits": str(bits), "chunk_size": str(CHUNK_SIZE), "numel": str(numel)},
        "exponents": {"dtype": "U8", "shape": [count], "data_offsets": [0, count]},
        "values": {
            "dtype": "I8" if bits == 8 else "I16",
            "shape": [numel],
            "data_offsets": [count, count + width * numel],
        },
    }
    text = padded_json(header)
    base = 8 + len(text)
    exponents = np.empty(count, dtype=np.uint8)
    roots = []
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        f.seek(base + count)
        for first in range(0, count, range_chunks):
            last = min(first + range_chunks, count)
            values, exps = quantize_array(gradient.read(first * CHUNK_SIZE, min(last * CHUNK_SIZE, numel)), bits)
            exponents[first:last] = exps
            f.write(values.astype(dtype, copy=False).tobytes())
            roots.append(merkle.block_root(hash_rows(*gradient_chunk_buffer(bits, values, exps)), first))
        f.seek(base)
        f.write(exponents.tobytes())
    return EncodedPayload(file_keccak(path), merkle.root_of_blocks(roots), base + count + width * numel)
