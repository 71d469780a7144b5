"""The protocol's keccak is Ethereum's keccak256, byte for byte (eth_utils is the reference)."""

from __future__ import annotations

from eth_utils import keccak as reference
from hypothesis import given, settings
from hypothesis import strategies as st

from syncline.protocol.hashing import Keccak256, keccak


def test_known_vector() -> None:
    assert keccak(b"").hex() == "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470"


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=5_000), st.integers(0, 5_000))
def test_matches_eth_utils_whole_and_incremental(data: bytes, cut: int) -> None:
    assert keccak(data) == reference(data)
    assert keccak(memoryview(data)) == reference(data)
    h = Keccak256()
    h.update(data[:cut])
    h.update(data[cut:])
    assert h.digest() == reference(data)
