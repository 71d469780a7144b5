"""The exact integer grid every witness computes on, and its byte encodings.

Weights, momentum and outer-gradient values live on the Q32 grid: the real value ``x`` is the
int64 ``round_half_even(x * 2**FRAC_BITS)``. Optimizer coefficients (learning rate, momentum)
are Q16 integers derived from the chain's ppm values with a floor, so a Solidity contract can
recompute them bit for bit. Every operation after :func:`to_fixed` is integer arithmetic with
floor rounding (arithmetic right shifts and :func:`floor_div`), so results do not depend on the
machine, the BLAS library or the number of threads.

Training state values (weights and momentum) are bounded by ``|x| <= 2**46 - 1`` (a real magnitude
just under 16384); the outer step saturates at that bound rather than failing (the exact rule is in
:mod:`syncline.protocol.outer_optimizer`, identical on chain in ``ChunkAggregation.nesterovStep``).
Outer gradients and aggregates satisfy ``|x| < 2**41`` (:mod:`syncline.protocol.quantization`).

Constants
---------
FRAC_BITS = 32
    Fractional bits of the grid: one grid unit is 2**-32.
CHUNK_SIZE = 256
    Coordinates per Merkle chunk (re-exported by :mod:`syncline.protocol.chunking`). Small so
    that a contract can recompute a rule over one chunk with 16-32 inputs under 3M gas.
Q16_BITS = 16
    Fractional bits of optimizer coefficients.

The module also holds the byte encodings shared by the wire formats: big-endian two's
complement serialization and a strict safetensors reader that validates the header (names,
dtypes, shapes, offsets, size) before any tensor is materialized.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping

import numpy as np
import torch
from safetensors.torch import load as _safetensors_load

from syncline.protocol.wire import load_bounded_json

FRAC_BITS = 32
ONE = 1 << FRAC_BITS
CHUNK_SIZE = 256
Q16_BITS = 16
PPM = 1_000_000
MAX_REAL_ABS = 2.0**30  # to_fixed rejects |x| >= 2**30 so the grid value fits int64 with headroom
MAX_SAFETENSORS_HEADER = 1 << 20  # 1 MiB: room for the layout JSON of large models


def to_fixed(x: torch.Tensor) -> torch.Tensor:
    """Map a float tensor onto the Q32 grid.

    Parameters
    ----------
    x
        Any floating tensor. It is widened to float64 (exact for float16/bfloat16/float32), scaled
        by 2**32 (exact: a power of two) and rounded half to even (``numpy.rint``).

    Returns
    -------
    torch.Tensor
        int64 tensor of the same shape.

    Raises
    ------
    ValueError
        If ``x`` is not floating, holds NaN/Inf, or has ``|x| >= 2**30``.
    """
    wide = float64_numpy(x, "to_fixed")
    if wide.size:
        if not np.isfinite(wide).all():
            raise ValueError("to_fixed: tensor holds NaN or Inf")
        peak = float(np.abs(wide).max())
        if peak >= MAX_REAL_ABS:
            raise ValueError(f"to_fixed: |x| must be < 2**30, got {peak}")
    return torch.from_numpy(np.rint(wide * float(ONE)).astype(np.int64)).reshape(x.shape)


def from_fixed(q: torch.Tensor) -> torch.Tensor:
    """Map Q32 grid integers back to float32 (via float64; exact for ``|q| < 2**53``)."""
    if q.dtype != torch.int64:
        raise ValueError(f"from_fixed needs an int64 tensor, got {q.dtype}")
    wide = as_numpy(q).astype(np.float64) / float(ONE)
    return torch.from_numpy(wide.astype(np.float32)).reshape(q.shape)


def as_numpy(t: torch.Tensor) -> np.ndarray:
    """A numpy view of ``t`` (zero-copy for contiguous CPU tensors).

    The exact integer kernels run on numpy: its int64 element-wise operations and reductions
    avoid torch's allocation and thread-pool overheads and give identical results.
    """
    return t.detach().cpu().contiguous().numpy()


def float64_numpy(x: torch.Tensor, what: str) -> np.ndarray:
    """A float64 numpy copy of a floating tensor (bfloat16/float16 widen exactly via float32)."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        kind = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{what} needs a floating tensor, got {kind}")
    t = x.detach()
    if t.dtype not in (torch.float32, torch.float64):
        t = t.to(torch.float32)
    return as_numpy(t).astype(np.float64)


def q16(ppm: int) -> int:
    """Q16 coefficient of a ppm value: ``(ppm << 16) // 1_000_000`` (floor).

    Examples
    --------
    >>> q16(700_000), q16(900_000), q16(1_000_000)
    (45875, 58982, 65536)
    """
    if isinstance(ppm, bool) or not isinstance(ppm, int) or ppm < 0:
        raise ValueError(f"ppm must be a non-negative int, got {ppm!r}")
    return (ppm << Q16_BITS) // PPM


def floor_div(a: torch.Tensor, b: int | torch.Tensor) -> torch.Tensor:
    """Exact floor division of int64 tensors (rounds toward minus infinity, like ``>>``)."""
    return torch.div(a, b, rounding_mode="floor")


def check_int64(t: torch.Tensor, name: str, *, ndim: int | None = None) -> None:
    """Raise ValueError unless ``t`` is an int64 tensor (with ``ndim`` dimensions if given)."""
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int64:
        kind = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"{name}: expected an int64 tensor, got {kind}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimension(s), got shape {tuple(t.shape)}")


def check_abs_bound(t: torch.Tensor, bound: int, name: str) -> None:
    """Raise ValueError if any ``|t| >= bound`` (``bound`` a power of two up to 2**62)."""
    if not t.numel():
        return
    a = as_numpy(t)
    if int(a.min()) <= -bound or int(a.max()) >= bound:
        raise ValueError(f"{name}: values must satisfy |x| < 2**{bound.bit_length() - 1}")


def exact_sum(partials: np.ndarray, axis: int = -1) -> np.ndarray:
    """Exact sums of non-negative int64 partials along ``axis``, as an object array of Python ints.

    Every entry must lie in ``[0, 2**62)``. Entries are split into 31-bit halves whose int64 sums
    cannot overflow for fewer than 2**32 terms, then recombined as Python ints, so the result is
    exact however large it gets.
    """
    if partials.dtype != np.int64:
        raise ValueError(f"exact_sum needs int64 partials, got {partials.dtype}")
    if partials.shape[axis] >= 1 << 32:
        raise ValueError("exact_sum: too many terms")
    low = np.sum(partials & ((1 << 31) - 1), axis=axis)
    high = np.sum(partials >> 31, axis=axis)
    return (high.astype(object) << 31) + low.astype(object)  # type: ignore[no-any-return]


def num_chunks(numel: int) -> int:
    """Number of CHUNK_SIZE chunks covering ``numel`` coordinates (the last may be short)."""
    return -(-numel // CHUNK_SIZE)


def pad_chunks(a: np.ndarray) -> np.ndarray:
    """Split the last axis into CHUNK_SIZE chunks, zero-padding the last one.

    ``[..., d] -> [..., num_chunks(d), CHUNK_SIZE]`` (a view when ``d`` is a multiple of
    CHUNK_SIZE, otherwise a padded copy).
    """
    d = a.shape[-1]
    c = num_chunks(d)
    if c * CHUNK_SIZE != d:
        padded = np.zeros((*a.shape[:-1], c * CHUNK_SIZE), dtype=a.dtype)
        padded[..., :d] = a
        a = padded
    return a.reshape(*a.shape[:-1], c, CHUNK_SIZE)


def int64_be_bytes(t: torch.Tensor) -> bytes:
    """Big-endian two's complement bytes of an int64 tensor (8 bytes per value, row-major)."""
    check_int64(t, "int64_be_bytes")
    return bytes(as_numpy(t).astype(">i8").tobytes())


_ST_DTYPES: dict[torch.dtype, tuple[str, int]] = {
    torch.int8: ("I8", 1),
    torch.uint8: ("U8", 1),
    torch.int16: ("I16", 2),
    torch.int64: ("I64", 8),
}


_NP_LE: dict[torch.dtype, str] = {torch.int8: "<i1", torch.uint8: "<u1", torch.int16: "<i2", torch.int64: "<i8"}


def padded_json(obj: object) -> bytes:
    """Canonical JSON of a header: sorted keys, no whitespace, ASCII, no NaN, padded with spaces to
    a multiple of 8 bytes (so the data after it stays aligned). Safetensors payloads and states,
    and inner-loop checkpoints, write their headers with it."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("ascii")
    return text + b" " * (-len(text) % 8)


def write_safetensors(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> bytes:
    """Canonical safetensors bytes: the same tensors and metadata always give the same bytes.

    The reference writer emits metadata keys in hash order, so one payload could hash several
    ways; here the header is JSON with sorted keys and no spaces, padded with spaces to a multiple
    of 8, and tensor data follows in name order, little-endian. Readable by any safetensors reader.
    """
    header: dict[str, object] = {"__metadata__": dict(sorted(metadata.items()))}
    chunks: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        if t.dtype not in _ST_DTYPES:
            raise ValueError(f"tensor {name!r}: dtype {t.dtype} is not serializable here")
        raw = t.detach().cpu().contiguous().numpy().astype(_NP_LE[t.dtype], copy=False).tobytes()
        header[name] = {
            "dtype": _ST_DTYPES[t.dtype][0],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    text = padded_json(header)
    return len(text).to_bytes(8, "little") + text + b"".join(chunks)


def _parse_header(
    data: bytes, max_bytes: int | None, total_len: int | None = None
) -> tuple[dict[str, object], dict[str, str], int]:
    """Header, metadata and header length of a payload of ``total_len`` bytes (default
    ``len(data)``) whose first bytes are ``data`` (at least the header)."""
    size = len(data) if total_len is None else total_len
    if max_bytes is not None and size > max_bytes:
        raise ValueError(f"payload is {size} bytes, more than the limit {max_bytes}")
    if size < 8 or len(data) < 8:
        raise ValueError("payload too short for a safetensors header")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > MAX_SAFETENSORS_HEADER or 8 + header_len > size or 8 + header_len > len(data):
        raise ValueError(f"safetensors header length {header_len} is invalid")
    header = load_bounded_json(
        data[8 : 8 + header_len], max_bytes=MAX_SAFETENSORS_HEADER, max_depth=4, what="safetensors header"
    )
    if not isinstance(header, dict):
        raise ValueError("safetensors header is not an object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ValueError("safetensors metadata must map strings to strings")
    for name, entry in header.items():
        _check_entry(name, entry, size - 8 - header_len)
    return header, {str(k): v for k, v in metadata.items()}, header_len


def _is_index(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_entry(name: str, entry: object, data_len: int) -> None:
    """Raise ValueError unless ``entry`` is a well-typed tensor record: ``dtype`` a string,
    ``shape`` a list of non-negative ints, ``data_offsets`` two ints within the data section
    (network bytes: every type is checked before any value is used)."""
    if not isinstance(entry, dict):
        raise ValueError(f"tensor {name!r}: header entry is {type(entry).__name__}, not an object")
    if set(entry) != {"dtype", "shape", "data_offsets"}:
        raise ValueError(f"tensor {name!r}: header entry must have exactly dtype, shape and data_offsets")
    if not isinstance(entry["dtype"], str):
        raise ValueError(f"tensor {name!r}: dtype is {type(entry['dtype']).__name__}, not a string")
    shape = entry["shape"]
    if not isinstance(shape, list) or len(shape) > 16 or not all(_is_index(d) for d in shape):
        raise ValueError(f"tensor {name!r}: shape must be a list of non-negative integers")
    offsets = entry["data_offsets"]
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_is_index(o) for o in offsets)
        or not offsets[0] <= offsets[1] <= data_len
    ):
        raise ValueError(f"tensor {name!r}: data_offsets must be two integers within the data section")


def safetensors_metadata(data: bytes, *, max_bytes: int | None = None, total_len: int | None = None) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors payload, read without decoding any tensor (``data``
    may be just the payload's first bytes when ``total_len`` gives its size)."""
    return _parse_header(data, max_bytes, total_len)[1]


def safetensors_spans(
    prefix: bytes,
    total_len: int,
    expected: Mapping[str, tuple[torch.dtype, tuple[int, ...]]],
    *,
    max_bytes: int | None = None,
) -> tuple[dict[str, tuple[int, int]], dict[str, str]]:
    """Check a payload's header against ``expected`` without reading its tensors.

    ``prefix`` holds at least the payload's first ``8 + header`` bytes and ``total_len`` is the
    whole payload's size (a file's size, for a payload on disk). Returns each tensor's absolute
    byte span ``(begin, end)`` and the metadata; raises ValueError like :func:`read_safetensors`.
    """
    header, metadata, header_len = _parse_header(prefix, max_bytes, total_len)
    if set(header) != set(expected):
        raise ValueError(f"payload tensors {sorted(header)} != expected {sorted(expected)}")
    spans: dict[str, tuple[int, int]] = {}
    for name, (dtype, shape) in expected.items():
        entry = header[name]  # type-checked by _parse_header
        assert isinstance(entry, dict)
        code, width = _ST_DTYPES[dtype]
        if entry["dtype"] != code:
            raise ValueError(f"tensor {name!r}: dtype {entry['dtype']} != expected {code}")
        if entry["shape"] != list(shape):
            raise ValueError(f"tensor {name!r}: shape {entry['shape']} != expected {list(shape)}")
        begin, end = entry["data_offsets"]
        if end - begin != width * math.prod(shape):
            raise ValueError(f"tensor {name!r}: data offsets {entry['data_offsets']} do not match its shape")
        spans[name] = (begin, end)
    cursor = 0
    for begin, end in sorted(spans.values()):
        if begin != cursor:
            raise ValueError("safetensors data section has gaps or overlaps")
        cursor = end
    if 8 + header_len + cursor != total_len:
        raise ValueError(f"payload has {total_len - 8 - header_len - cursor} unexpected trailing bytes")
    base = 8 + header_len
    return {name: (base + b, base + e) for name, (b, e) in spans.items()}, metadata


def read_safetensors(
    data: bytes, expected: Mapping[str, tuple[torch.dtype, tuple[int, ...]]], *, max_bytes: int | None = None
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Strictly decode a safetensors payload with exactly the expected tensors.

    Parameters
    ----------
    data
        The payload.
    expected
        ``name -> (dtype, shape)`` for every tensor the payload must hold, and nothing else.
    max_bytes
        Reject payloads longer than this before parsing anything.

    Returns
    -------
    tuple
        ``(tensors, metadata)``.

    Raises
    ------
    ValueError
        With a one-line reason: oversized, malformed header, unexpected or missing names, wrong
        dtype or shape, overlapping or trailing data.
    """
    safetensors_spans(data, len(data), expected, max_bytes=max_bytes)
    metadata = _parse_header(data, max_bytes)[1]
    try:
        tensors = _safetensors_load(data)
    except Exception as exc:  # the Rust decoder raises its own error type
        raise ValueError(f"safetensors decode failed: {exc}") from None
    return tensors, metadata
