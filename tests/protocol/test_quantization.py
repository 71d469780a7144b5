"""Per-chunk quantization: exponent choice, error bound, exact decoding and the wire format."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save

from syncline.protocol.aggregation import validate_inputs
from syncline.protocol.fixed_point import CHUNK_SIZE, FRAC_BITS
from syncline.protocol.quantization import (
    QuantizedGradient,
    dequantize,
    max_grad_exp,
    qmax,
    quantize,
)


def gradient(seed: int, numel: int, log2_scale: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(numel, generator=g) * 2.0**log2_scale
    # Zero a chunk now and then, and plant exact powers of two, to hit the edge cases.
    if numel > CHUNK_SIZE and seed % 3 == 0:
        x[:CHUNK_SIZE] = 0
    if seed % 5 == 0:
        x[-1] = 2.0**log2_scale
    return x


gradients = st.builds(gradient, st.integers(0, 10_000), st.integers(1, 1_200), st.integers(-45, 12))


@given(gradients, st.sampled_from([8, 16]))
@settings(max_examples=80)
def test_error_is_at_most_half_a_step(grad: torch.Tensor, bits: int) -> None:
    qg = quantize(grad, bits)
    exact = grad.double().numpy() * 2.0**FRAC_BITS  # exact: float32 -> float64, times 2**32
    grid = dequantize(qg).numpy().astype(np.float64)  # exact: |grid| < 2**41
    limit, cap = qmax(bits), max_grad_exp(bits)
    for c, e in enumerate(qg.exponents.tolist()):
        sl = slice(c * CHUNK_SIZE, (c + 1) * CHUNK_SIZE)
        m = np.abs(exact[sl]).max()
        if m > limit * 2.0**cap:  # saturated chunk: values clamp to +-qmax at the cap
            assert e == cap
            continue
        assert np.abs(grid[sl] - exact[sl]).max() <= 2.0 ** (e - 1)
        # e is minimal: one step finer would overflow qmax (unless e is already 0).
        assert m <= limit * 2.0**e
        if e > 0:
            assert m > limit * 2.0 ** (e - 1)


@given(gradients, st.sampled_from([8, 16]))
@settings(max_examples=40)
def test_dequantize_is_q_shifted_by_e(grad: torch.Tensor, bits: int) -> None:
    qg = quantize(grad, bits)
    values, exps = qg.values.tolist(), qg.exponents.tolist()
    expected = [v << exps[i // CHUNK_SIZE] for i, v in enumerate(values)]
    assert dequantize(qg).tolist() == expected
    assert max(abs(v) for v in values) <= qmax(bits)


def test_exponent_boundaries_are_exact() -> None:
    # m == 127 * 2**-20 needs exactly k = -20, e = 12 and q = 127.
    qg = quantize(torch.tensor([127 * 2.0**-20, -1 * 2.0**-20]), 8)
    assert qg.exponents.tolist() == [12] and qg.values.tolist() == [127, -1]
    # One ulp more needs the next exponent.
    above = float(np.nextafter(np.float32(127 * 2.0**-20), np.float32(1)))
    assert quantize(torch.tensor([above]), 8).exponents.tolist() == [13]
    # 16 bits: m = 32767 * 2**-10 -> e = 22.
    assert quantize(torch.tensor([32767 * 2.0**-10]), 16).exponents.tolist() == [22]


def test_zero_tiny_huge_and_rounding() -> None:
    qg = quantize(torch.zeros(300), 8)
    assert qg.exponents.tolist() == [0, 0] and not qg.values.any()
    tiny = quantize(torch.tensor([2.5 * 2.0**-32, 1e-12], dtype=torch.float64), 8)
    assert tiny.exponents.tolist() == [0] and tiny.values.tolist() == [2, 0]  # half to even
    huge = quantize(torch.tensor([1e6, -1e6, 1.0]), 8)
    assert huge.exponents.tolist() == [max_grad_exp(8)] and huge.values.tolist() == [127, -127, 0]


@pytest.mark.parametrize("bits", [8, 16])
def test_extreme_payload_stays_inside_the_aggregation_bound(bits: int) -> None:
    """Why the exponent cap depends on the width: any valid gradient is a valid aggregation input."""
    limit, cap = qmax(bits), max_grad_exp(bits)
    dtype = torch.int8 if bits == 8 else torch.int16
    qg = QuantizedGradient(bits, torch.tensor([limit, -limit], dtype=dtype), torch.tensor([cap], dtype=torch.uint8))
    grid = dequantize(qg)
    assert int(grid.abs().max()) < 2**41
    validate_inputs(grid.unsqueeze(0))


def test_short_last_chunk() -> None:
    grad = torch.cat([torch.full((CHUNK_SIZE,), 1e-3), torch.full((5,), 4.0)])
    qg = quantize(grad, 16)
    assert qg.num_chunks == 2 and qg.numel == CHUNK_SIZE + 5
    assert qg.exponents[1] > qg.exponents[0]


@pytest.mark.parametrize(
    "bad",
    [
        torch.tensor([0.0, float("nan")]),
        torch.tensor([float("inf")]),
        torch.tensor([1, 2]),
        torch.zeros(0),
        torch.zeros(2, 2),
    ],
)
def test_quantize_rejects_bad_gradients(bad: torch.Tensor) -> None:
    with pytest.raises(ValueError, match=r"NaN or Inf|floating"):
        quantize(bad, 8)


def test_quantize_rejects_bad_bits() -> None:
    with pytest.raises(ValueError, match="8 or 16"):
        quantize(torch.zeros(3), 4)


def _qg(bits: int = 8, values: list[int] | None = None, exps: list[int] | None = None) -> QuantizedGradient:
    dtype = torch.int8 if bits == 8 else torch.int16
    return QuantizedGradient(
        bits, torch.tensor(values or [1, -2, 3], dtype=dtype), torch.tensor(exps or [5], dtype=torch.uint8)
    )


def test_construction_validates() -> None:
    _qg()
    with pytest.raises(ValueError, match="8 or 16"):
        QuantizedGradient(4, torch.zeros(3, dtype=torch.int8), torch.zeros(1, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"torch\.int16 tensor for 16 bits"):
        QuantizedGradient(16, torch.zeros(3, dtype=torch.int8), torch.zeros(1, dtype=torch.uint8))
    with pytest.raises(ValueError, match="1-D"):
        QuantizedGradient(8, torch.zeros(1, 3, dtype=torch.int8), torch.zeros(1, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        QuantizedGradient(8, torch.zeros(300, dtype=torch.int8), torch.zeros(1, dtype=torch.uint8))
    with pytest.raises(ValueError, match="exceeds the cap 34"):
        _qg(exps=[35])
    with pytest.raises(ValueError, match="exceeds the cap 26"):
        _qg(bits=16, exps=[27])
    with pytest.raises(ValueError, match="-128 is out of range"):
        _qg(values=[0, -128])
    with pytest.raises(ValueError, match="-32768 is out of range"):
        _qg(bits=16, values=[-32768])


@given(gradients, st.sampled_from([8, 16]))
@settings(max_examples=25)
def test_safetensors_round_trip(grad: torch.Tensor, bits: int) -> None:
    qg = quantize(grad, bits)
    data = qg.to_safetensors_bytes()
    back = QuantizedGradient.from_safetensors_bytes(data, expected_numel=qg.numel)
    assert back == qg
    assert back.values.dtype == qg.values.dtype and back.exponents.dtype == torch.uint8


def _raw(tensors: dict[str, torch.Tensor], **meta: str) -> bytes:
    base = {"bits": "8", "numel": "3", "chunk_size": str(CHUNK_SIZE)}
    return bytes(save(tensors, metadata={**base, **meta}))


GOOD = {"values": torch.tensor([1, -2, 3], dtype=torch.int8), "exponents": torch.tensor([5], dtype=torch.uint8)}


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (_raw({**GOOD, "values": torch.tensor([1, -2, 3], dtype=torch.int16)}), "dtype I16 != expected I8"),
        (_raw({**GOOD, "values": torch.tensor([1, -2, 3, 4], dtype=torch.int8)}), r"shape \[4\] != expected \[3\]"),
        (_raw(GOOD, numel="4"), "shape"),
        (_raw(GOOD, bits="12"), "8 or 16"),
        (_raw(GOOD, chunk_size="512"), "chunk_size"),
        (_raw(GOOD, numel="-3"), "numel"),
        (_raw({**GOOD, "extra": torch.zeros(1)}), "expected"),
        (_raw({**GOOD, "exponents": torch.tensor([40], dtype=torch.uint8)}), "exceeds the cap"),
        (_raw({**GOOD, "values": torch.tensor([1, -128, 3], dtype=torch.int8)}), "out of range"),
        (bytes(save(GOOD)), "metadata 'bits' missing"),
        (_raw(GOOD) + b"\x00\x00", "trailing"),
    ],
)
def test_from_bytes_rejects_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        QuantizedGradient.from_safetensors_bytes(data)


def test_from_bytes_rejects_wrong_size_and_oversized_payloads() -> None:
    data = _raw(GOOD)
    assert QuantizedGradient.from_safetensors_bytes(data, expected_numel=3).values.tolist() == [1, -2, 3]
    with pytest.raises(ValueError, match="task layout has 4"):
        QuantizedGradient.from_safetensors_bytes(data, expected_numel=4)
    with pytest.raises(ValueError, match="more than the limit"):
        QuantizedGradient.from_safetensors_bytes(data, max_bytes=len(data) - 1)
    padded_header = json.dumps({"__metadata__": {"pad": "x" * (2 << 20)}}).encode()
    with pytest.raises(ValueError, match="more than the limit"):
        QuantizedGradient.from_safetensors_bytes(
            struct.pack("<Q", len(padded_header)) + padded_header, expected_numel=3
        )
