"""Per-chunk block quantization of trainers' outer gradients onto the Q32 grid.

A gradient of ``numel`` float values is split into chunks of CHUNK_SIZE coordinates (the last
may be short). Chunk ``c`` with ``m = max |g|`` over the chunk gets one exponent::

    m == 0:  e = 0, q = 0
    else:    k = ceil(log2(m / qmax))                 (computed exactly, see below)
             e = clamp(k + FRAC_BITS, 0, max_grad_exp(bits))
             q = clamp(round_half_even(g * 2**(FRAC_BITS - e)), -qmax, qmax)   (numpy.rint)

with ``qmax = 127`` (8 bits) or ``32767`` (16 bits). ``k`` is the smallest integer with
``qmax * 2**k >= m``; writing ``m = mant * 2**ex`` (``numpy.frexp``, ``mant`` in [0.5, 1)) and
``2**(B-1) <= qmax < 2**B``, it is ``ex - B + (mant > qmax / 2**B)``: only exact float64
comparisons and power-of-two scalings are used, so every machine gets the same exponents.

Decoding is exact: the Q32 grid value of coordinate ``j`` in chunk ``c`` is ``q_j << e_c``.
Unless a chunk saturates at the exponent cap, ``|q_j << e_c - g_j * 2**32| <= 2**(e_c - 1)``
grid units, i.e. half a quantization step.

Exponent cap (deviation from a single ``MAX_GRAD_EXP = 40``): the cap depends on the width so
that every decodable gradient satisfies ``|q << e| < 2**41``, the input bound of
:mod:`syncline.protocol.aggregation`. With a cap of 40, a Byzantine trainer could publish
``127 << 40 ~ 2**47`` and either overflow Krum's int64 distances or make the aggregation of the
whole round fail. The caps are ``MAX_GRAD_EXP_INT8 = 34`` and ``MAX_GRAD_EXP_INT16 = 26``
(both allow real magnitudes up to about 512; larger values saturate at ``+-qmax``).

Wire format: safetensors with tensors ``values`` (I8 or I16, shape ``[numel]``) and
``exponents`` (U8, shape ``[num_chunks]``) and metadata ``bits``, ``numel``, ``chunk_size``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from syncline.protocol.fixed_point import (
    CHUNK_SIZE,
    FRAC_BITS,
    MAX_SAFETENSORS_HEADER,
    as_numpy,
    num_chunks,
    pad_chunks,
    read_safetensors,
    safetensors_metadata,
    safetensors_spans,
    write_safetensors,
)

GRAD_BOUND_BITS = 41  # every dequantized value satisfies |x| < 2**41
MAX_GRAD_EXP_INT8 = 34
MAX_GRAD_EXP_INT16 = 26
_WIDTHS: dict[int, tuple[int, int, torch.dtype]] = {  # bits -> (qmax, exponent cap, dtype)
    8: (127, MAX_GRAD_EXP_INT8, torch.int8),
    16: (32767, MAX_GRAD_EXP_INT16, torch.int16),
}


_NP_DTYPES = {8: np.int8, 16: np.int16}


def _width(bits: int) -> tuple[int, int, torch.dtype]:
    if bits not in _WIDTHS:
        raise ValueError(f"quantization bits must be 8 or 16, got {bits!r}")
    return _WIDTHS[bits]


def _describe(t: object) -> str:
    if isinstance(t, torch.Tensor):
        return f"{t.dtype} of shape {tuple(t.shape)}"
    return type(t).__name__


def qmax(bits: int) -> int:
    """Largest magnitude of a quantized value: 127 or 32767 (-128 / -32768 are invalid)."""
    return _width(bits)[0]


def max_grad_exp(bits: int) -> int:
    """Exponent cap for ``bits``: the largest ``e`` with ``qmax << e < 2**41``."""
    return _width(bits)[1]


def range_problem(bits: int, values: np.ndarray, exponents: np.ndarray) -> str | None:
    """Why values and exponents (all of a gradient, or one range of it) are not a valid
    gradient: an exponent above the cap or the value ``-qmax - 1``; None when valid."""
    limit, cap, _ = _width(bits)
    if exponents.size and int(exponents.max()) > cap:
        return f"exponent {int(exponents.max())} exceeds the cap {cap} for {bits} bits"
    if values.size and int(values.min()) == -limit - 1:
        return f"quantized value {-limit - 1} is out of range [-{limit}, {limit}]"
    return None


@dataclass(frozen=True, eq=False)
class QuantizedGradient:
    """A quantized outer gradient: ``bits``, one value per coordinate, one exponent per chunk.

    Construction validates everything a witness relies on (dtypes, shapes, ranges), so an
    instance is always safe to dequantize and aggregate.
    """

    bits: int
    values: torch.Tensor
    exponents: torch.Tensor

    def __post_init__(self) -> None:
        _, _, dtype = _width(self.bits)
        if not isinstance(self.values, torch.Tensor) or self.values.dtype != dtype or self.values.dim() != 1:
            raise ValueError(f"values must be a 1-D {dtype} tensor for {self.bits} bits, got {_describe(self.values)}")
        if self.values.numel() == 0:
            raise ValueError("a quantized gradient needs at least one coordinate")
        expected = (num_chunks(self.values.numel()),)
        exps = self.exponents
        if not isinstance(exps, torch.Tensor) or exps.dtype != torch.uint8 or tuple(exps.shape) != expected:
            raise ValueError(f"exponents must be a uint8 tensor of shape {expected}, got {_describe(exps)}")
        problem = range_problem(self.bits, as_numpy(self.values), as_numpy(exps))
        if problem is not None:
            raise ValueError(problem)

    @property
    def numel(self) -> int:
        """Number of coordinates."""
        return int(self.values.numel())

    @property
    def num_chunks(self) -> int:
        """Number of chunks (exponents)."""
        return int(self.exponents.numel())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QuantizedGradient):
            return NotImplemented
        return (
            self.bits == other.bits
            and torch.equal(self.values, other.values)
            and torch.equal(self.exponents, other.exponents)
        )

    __hash__ = None  # type: ignore[assignment]

    def to_safetensors_bytes(self) -> bytes:
        """Serialize (see the module docstring for the format)."""
        metadata = {"bits": str(self.bits), "numel": str(self.numel), "chunk_size": str(CHUNK_SIZE)}
        return write_safetensors({"values": self.values, "exponents": self.exponents}, metadata)

    @classmethod
    def from_safetensors_bytes(
        cls, data: bytes, *, expected_numel: int | None = None, max_bytes: int | None = None
    ) -> QuantizedGradient:
        """Decode and validate a payload.

        Parameters
        ----------
        data
            safetensors bytes.
        expected_numel
            The task layout's parameter count; a payload of any other size is rejected.
        max_bytes
            Reject longer payloads before parsing. Defaults to a bound derived from
            ``expected_numel`` (16-bit values plus exponents plus 64 KiB of header) when given.

        Raises
        ------
        ValueError
            With a one-line reason.
        """
        bits, numel, _ = payload_layout(data, len(data), expected_numel=expected_numel, max_bytes=max_bytes)
        if max_bytes is None and expected_numel is not None:
            max_bytes = max_payload_size(expected_numel)
        _, _, dtype = _width(bits)
        tensors, _ = read_safetensors(
            data,
            {"values": (dtype, (numel,)), "exponents": (torch.uint8, (num_chunks(numel),))},
            max_bytes=max_bytes,
        )
        return cls(bits=bits, values=tensors["values"], exponents=tensors["exponents"])


def max_payload_size(numel: int) -> int:
    """Default size bound of a payload of ``numel`` coordinates: 16-bit values, exponents, 64 KiB header."""
    return 8 + MAX_SAFETENSORS_HEADER + 2 * numel + num_chunks(numel)


def payload_layout(
    prefix: bytes, total_len: int, *, expected_numel: int | None = None, max_bytes: int | None = None
) -> tuple[int, int, dict[str, tuple[int, int]]]:
    """Check a payload's header (``prefix`` holds at least its first ``8 + header`` bytes of
    ``total_len``) the way :meth:`QuantizedGradient.from_safetensors_bytes` does, without reading
    the tensors: returns ``(bits, numel, spans)`` with each tensor's absolute byte span."""
    if max_bytes is None and expected_numel is not None:
        max_bytes = max_payload_size(expected_numel)
    meta = _peek_metadata(prefix, max_bytes, total_len)
    bits, numel = meta["bits"], meta["numel"]
    if meta["chunk_size"] != CHUNK_SIZE:
        raise ValueError(f"chunk_size {meta['chunk_size']} != protocol CHUNK_SIZE {CHUNK_SIZE}")
    if expected_numel is not None and numel != expected_numel:
        raise ValueError(f"gradient has {numel} coordinates, the task layout has {expected_numel}")
    if numel < 1:
        raise ValueError("a quantized gradient needs at least one coordinate")
    _, _, dtype = _width(bits)
    spans, _ = safetensors_spans(
        prefix,
        total_len,
        {"values": (dtype, (numel,)), "exponents": (torch.uint8, (num_chunks(numel),))},
        max_bytes=max_bytes,
    )
    return bits, numel, spans


def _peek_metadata(data: bytes, max_bytes: int | None, total_len: int | None = None) -> dict[str, int]:
    """Integer metadata fields of a gradient payload, validated before shapes are checked."""
    meta = safetensors_metadata(data, max_bytes=max_bytes, total_len=total_len)
    out: dict[str, int] = {}
    for key in ("bits", "numel", "chunk_size"):
        text = meta.get(key)
        if text is None or not (text.isascii() and text.isdigit()) or len(text) > 12:
            raise ValueError(f"metadata {key!r} missing or not a non-negative integer: {text!r}")
        out[key] = int(text)
    return out


def quantize(grad: torch.Tensor, bits: int) -> QuantizedGradient:
    """Quantize a 1-D float gradient per chunk (see the module docstring).

    Raises
    ------
    ValueError
        If ``grad`` is not a non-empty 1-D floating tensor, holds NaN/Inf, or ``bits`` is not 8/16.
    """
    _width(bits)
    if not isinstance(grad, torch.Tensor) or grad.dim() != 1 or grad.numel() == 0:
        raise ValueError(f"quantize needs a non-empty 1-D floating tensor, got {_describe(grad)}")
    if not grad.is_floating_point():
        raise ValueError(f"quantize needs a floating tensor, got {grad.dtype}")
    t = grad.detach().cpu()
    if t.dtype not in (torch.float32, torch.float64):
        t = t.to(torch.float32)
    values, exponents = quantize_array(as_numpy(t), bits)
    return QuantizedGradient(bits=bits, values=torch.from_numpy(values), exponents=torch.from_numpy(exponents))


QUANTIZE_BLOCK_CHUNKS = 256
"""Chunks quantized at once (64 Ki coordinates): the float64 temporaries stay in cache."""


def quantize_array(g: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Quantize float32/float64 values ``g`` (1-D; a range starting on a chunk boundary) per chunk:
    ``(values int8/int16, exponents uint8)``, block by block in cache-sized pieces.

    Raises ValueError on NaN/Inf. Per chunk this is the module docstring's definition exactly, so
    quantizing a gradient range by range gives the same bytes as quantizing it whole.
    """
    limit, cap, _ = _width(bits)
    numel = int(g.shape[0])
    values = np.empty(numel, dtype=_NP_DTYPES[bits])
    exponents = np.empty(num_chunks(numel), dtype=np.uint8)
    scales = np.array([2.0 ** (FRAC_BITS - i) for i in range(cap + 1)])
    top = limit.bit_length()  # 2**(top-1) <= qmax < 2**top
    step = QUANTIZE_BLOCK_CHUNKS * CHUNK_SIZE
    for start in range(0, numel, step):
        block = g[start : start + step].astype(np.float64)
        if not np.isfinite(block).all():
            raise ValueError("gradient holds NaN or Inf")
        chunks = pad_chunks(block)  # [C, CHUNK_SIZE]; zero padding does not change max |g|
        m = np.abs(chunks).max(axis=1)
        mant, ex = np.frexp(m)
        k = ex.astype(np.int64) - top + (mant > limit / 2.0**top)
        e = np.where(m > 0, np.clip(k + FRAC_BITS, 0, cap), 0)
        chunks *= scales[e][:, None]
        np.rint(chunks, out=chunks)
        np.clip(chunks, -limit, limit, out=chunks)
        values[start : start + block.shape[0]] = chunks.reshape(-1)[: block.shape[0]]
        exponents[start // CHUNK_SIZE : start // CHUNK_SIZE + e.shape[0]] = e
    return values, exponents


def dequantize(qg: QuantizedGradient) -> torch.Tensor:
    """Exact Q32 grid values ``q << e`` (int64, length ``numel``)."""
    powers = np.array([1 << i for i in range(max_grad_exp(qg.bits) + 1)], dtype=np.int64)
    scale = np.repeat(powers[as_numpy(qg.exponents)], CHUNK_SIZE)[: qg.numel]
    return torch.from_numpy(as_numpy(qg.values).astype(np.int64) * scale)
