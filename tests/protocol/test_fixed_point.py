"""The Q32 grid, Q16 coefficients, exact sums and the strict safetensors reader."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save

from syncline.protocol import fixed_point as fp

UNIT = 2.0**-32


def test_to_fixed_rounds_half_to_even() -> None:
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.25, 0.75], dtype=torch.float64) * UNIT
    assert fp.to_fixed(x).tolist() == [0, 2, 2, 0, -2, -2, 0, 1]


def test_to_fixed_known_values_and_dtypes() -> None:
    assert fp.to_fixed(torch.tensor([1.0, -0.5, 0.0])).tolist() == [1 << 32, -(1 << 31), 0]
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        assert fp.to_fixed(torch.tensor([0.375], dtype=dtype)).tolist() == [3 << 29]
    assert fp.to_fixed(torch.ones(2, 3)).shape == (2, 3)


@given(st.lists(st.floats(-(2.0**29), 2.0**29, allow_nan=False, width=32), min_size=1, max_size=50))
@settings(max_examples=60)
def test_to_fixed_matches_python_round(values: list[float]) -> None:
    expected = [round(v * 2**32) for v in values]  # Python round is half-to-even too
    assert fp.to_fixed(torch.tensor(values, dtype=torch.float32)).tolist() == expected


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), 2.0**30, -(2.0**30)])
def test_to_fixed_rejects_non_finite_and_huge(bad: float) -> None:
    with pytest.raises(ValueError, match="to_fixed"):
        fp.to_fixed(torch.tensor([0.0, bad]))


def test_to_fixed_rejects_integers() -> None:
    with pytest.raises(ValueError, match="floating"):
        fp.to_fixed(torch.tensor([1, 2]))


def test_from_fixed_inverts_exactly_on_the_grid() -> None:
    q = torch.tensor([0, 1 << 32, -(3 << 30), 12345 << 20], dtype=torch.int64)
    back = fp.from_fixed(q)
    assert back.dtype == torch.float32
    assert back.tolist() == [0.0, 1.0, -0.75, 12345 / 4096]
    assert torch.equal(fp.to_fixed(back), q)
    with pytest.raises(ValueError, match="int64"):
        fp.from_fixed(torch.tensor([1.0]))


def test_q16_floor() -> None:
    assert fp.q16(700_000) == 45875  # 0.7 * 65536 = 45875.2
    assert fp.q16(900_000) == 58982  # 58982.4
    assert fp.q16(1_000_000) == 65536
    assert fp.q16(1) == 0
    assert fp.q16(16) == 1  # 16 * 65536 / 1e6 = 1.048
    for bad in (-1, True, 1.5):
        with pytest.raises(ValueError, match="ppm"):
            fp.q16(bad)  # type: ignore[arg-type]


@given(st.lists(st.integers(-(2**62), 2**62), min_size=1, max_size=20), st.integers(1, 2**40))
def test_floor_div_matches_python(values: list[int], divisor: int) -> None:
    out = fp.floor_div(torch.tensor(values, dtype=torch.int64), divisor)
    assert out.tolist() == [v // divisor for v in values]


@given(st.lists(st.integers(-(2**62), 2**62 - 1), min_size=1, max_size=20))
def test_right_shift_is_floor(values: list[int]) -> None:
    """The protocol relies on ``>>`` being an arithmetic (floor) shift in torch and numpy."""
    t = torch.tensor(values, dtype=torch.int64)
    assert (t >> 16).tolist() == [v >> 16 for v in values]
    assert (np.array(values, dtype=np.int64) >> 16).tolist() == [v >> 16 for v in values]


def test_int64_be_bytes() -> None:
    t = torch.tensor([-1, 1, -(2**63), 0x0102030405060708], dtype=torch.int64)
    assert fp.int64_be_bytes(t) == b"\xff" * 8 + b"\x00" * 7 + b"\x01" + b"\x80" + b"\x00" * 7 + bytes(range(1, 9))
    with pytest.raises(ValueError, match="int64"):
        fp.int64_be_bytes(torch.tensor([1], dtype=torch.int32))


@given(st.lists(st.lists(st.integers(0, 2**62 - 1), min_size=3, max_size=3), min_size=1, max_size=40))
def test_exact_sum_has_no_overflow(rows: list[list[int]]) -> None:
    a = np.array(rows, dtype=np.int64)
    assert list(fp.exact_sum(a, axis=0)) == [sum(r[j] for r in rows) for j in range(3)]
    assert list(fp.exact_sum(a, axis=1)) == [sum(r) for r in rows]


def test_exact_sum_rejects_other_dtypes() -> None:
    with pytest.raises(ValueError, match="int64"):
        fp.exact_sum(np.zeros(3, dtype=np.int32))


def test_check_abs_bound_catches_int64_min() -> None:
    fp.check_abs_bound(torch.tensor([(1 << 41) - 1, -(1 << 41) + 1]), 1 << 41, "x")
    for bad in (1 << 41, -(1 << 41), -(2**63)):
        with pytest.raises(ValueError, match=r"x: values must satisfy \|x\| < 2\*\*41"):
            fp.check_abs_bound(torch.tensor([0, bad]), 1 << 41, "x")


def test_pad_chunks() -> None:
    a = np.arange(600, dtype=np.int64).reshape(2, 300)
    c = fp.pad_chunks(a)
    assert c.shape == (2, 2, fp.CHUNK_SIZE)
    assert c[1, 1, 43] == 599 and c[1, 1, 44] == 0
    assert fp.num_chunks(256) == 1 and fp.num_chunks(257) == 2 and fp.num_chunks(1) == 1


# ------------------------------------------------------------------ strict safetensors


def _payload(**tensors: torch.Tensor) -> bytes:
    return bytes(save(tensors, metadata={"k": "v"}))


EXPECTED = {"a": (torch.int64, (3,)), "b": (torch.uint8, (2,))}


def test_read_safetensors_accepts_the_exact_layout() -> None:
    data = _payload(a=torch.tensor([1, -2, 3]), b=torch.tensor([7, 8], dtype=torch.uint8))
    tensors, meta = fp.read_safetensors(data, EXPECTED)
    assert tensors["a"].tolist() == [1, -2, 3] and tensors["b"].tolist() == [7, 8]
    assert meta == {"k": "v"}


@pytest.mark.parametrize(
    ("tensors", "reason"),
    [
        ({"a": torch.tensor([1, 2, 3], dtype=torch.int32), "b": torch.zeros(2, dtype=torch.uint8)}, "dtype"),
        ({"a": torch.tensor([1, 2]), "b": torch.zeros(2, dtype=torch.uint8)}, "shape"),
        ({"a": torch.tensor([1, 2, 3])}, "expected"),
        ({"a": torch.tensor([1, 2, 3]), "b": torch.zeros(2, dtype=torch.uint8), "c": torch.zeros(1)}, "expected"),
    ],
)
def test_read_safetensors_rejects_wrong_tensors(tensors: dict[str, torch.Tensor], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        fp.read_safetensors(_payload(**tensors), EXPECTED)


def test_read_safetensors_rejects_malformed_payloads() -> None:
    good = _payload(a=torch.tensor([1, -2, 3]), b=torch.tensor([7, 8], dtype=torch.uint8))
    with pytest.raises(ValueError, match="limit"):
        fp.read_safetensors(good, EXPECTED, max_bytes=len(good) - 1)
    with pytest.raises(ValueError, match="trailing"):
        fp.read_safetensors(good + b"\x00", EXPECTED)
    with pytest.raises(ValueError, match="too short"):
        fp.read_safetensors(b"\x01", EXPECTED)
    with pytest.raises(ValueError, match="header length"):
        fp.read_safetensors(struct.pack("<Q", 1 << 40) + b"{}", EXPECTED)
    header = b"not json"
    with pytest.raises(ValueError, match="not JSON"):
        fp.read_safetensors(struct.pack("<Q", len(header)) + header, EXPECTED)
    # Overlapping spans: both tensors claim the same bytes.
    hdr = {
        "a": {"dtype": "I64", "shape": [3], "data_offsets": [0, 24]},
        "b": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
    }
    raw = json.dumps(hdr).encode()
    with pytest.raises(ValueError, match="gaps or overlaps"):
        fp.read_safetensors(struct.pack("<Q", len(raw)) + raw + bytes(26), EXPECTED)
