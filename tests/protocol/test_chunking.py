"""Chunk encodings, Merkle roots over chunks, and single-chunk proofs."""

from __future__ import annotations

import struct

import pytest
import torch
from eth_utils import keccak
from hypothesis import given, settings
from hypothesis import strategies as st

from syncline.protocol import chunking, merkle
from syncline.protocol.fixed_point import CHUNK_SIZE
from syncline.protocol.quantization import QuantizedGradient, quantize


def qgrad(numel: int, bits: int = 8, seed: int = 0) -> QuantizedGradient:
    g = torch.Generator().manual_seed(seed)
    return quantize(torch.randn(numel, generator=g) * 1e-2, bits)


def test_gradient_chunk_bytes_by_hand() -> None:
    qg8 = QuantizedGradient(8, torch.tensor([1, -1, 127], dtype=torch.int8), torch.tensor([3], dtype=torch.uint8))
    assert chunking.gradient_chunk_contents(qg8) == [b"\x08\x03\x01\xff\x7f"]
    qg16 = QuantizedGradient(16, torch.tensor([-2, 300], dtype=torch.int16), torch.tensor([26], dtype=torch.uint8))
    assert chunking.gradient_chunk_contents(qg16) == [b"\x10\x1a\xff\xfe\x01\x2c"]


@pytest.mark.parametrize("bits", [8, 16])
def test_gradient_root_matches_an_independent_encoding(bits: int) -> None:
    qg = qgrad(3 * CHUNK_SIZE + 17, bits)
    fmt = ">b" if bits == 8 else ">h"
    hashes = []
    for c, e in enumerate(qg.exponents.tolist()):
        vals = qg.values.tolist()[c * CHUNK_SIZE : (c + 1) * CHUNK_SIZE]
        hashes.append(keccak(bytes([bits, e]) + b"".join(struct.pack(fmt, v) for v in vals)))
    assert chunking.gradient_chunk_hashes(qg) == hashes
    assert chunking.gradient_chunk_root(qg) == merkle.root(hashes)
    assert [len(c) for c in chunking.gradient_chunk_contents(qg)] == [2 + CHUNK_SIZE * bits // 8] * 3 + [
        2 + 17 * bits // 8
    ]


@given(st.integers(0, 4 * CHUNK_SIZE + 9), st.integers(1, 100), st.sampled_from([8, 16]))
@settings(max_examples=40)
def test_gradient_root_changes_when_any_value_changes(index: int, bump: int, bits: int) -> None:
    qg = qgrad(4 * CHUNK_SIZE + 10, bits, seed=index)
    values = qg.values.clone()
    limit = 127 if bits == 8 else 32767
    old = int(values[index])
    values[index] = old - bump if old + bump > limit else old + bump
    changed = QuantizedGradient(bits, values, qg.exponents)
    assert chunking.gradient_chunk_root(changed) != chunking.gradient_chunk_root(qg)
    # Only the leaf of the touched chunk changes.
    before, after = chunking.gradient_chunk_hashes(qg), chunking.gradient_chunk_hashes(changed)
    assert [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b] == [index // CHUNK_SIZE]


def test_gradient_root_changes_with_exponent_and_width() -> None:
    qg = qgrad(300)
    exps = qg.exponents.clone()
    exps[1] = (int(exps[1]) + 1) % 30
    assert chunking.gradient_chunk_root(QuantizedGradient(8, qg.values, exps)) != chunking.gradient_chunk_root(qg)
    wide = QuantizedGradient(16, qg.values.to(torch.int16), qg.exponents)
    assert chunking.gradient_chunk_root(wide) != chunking.gradient_chunk_root(qg)


@pytest.mark.parametrize("chunks", [1, 2, 5, 8])
def test_every_chunk_proof_verifies_and_tampering_fails(chunks: int) -> None:
    qg = qgrad(chunks * CHUNK_SIZE - 3)
    contents = chunking.gradient_chunk_contents(qg)
    hashes = chunking.gradient_chunk_hashes(qg)
    root = chunking.gradient_chunk_root(qg)
    for i, content in enumerate(contents):
        proof = chunking.chunk_proof(hashes, i)
        assert chunking.verify_chunk(root, i, content, proof, chunks)
        tampered = content[:-1] + bytes([content[-1] ^ 1])
        assert not chunking.verify_chunk(root, i, tampered, proof, chunks)
        if chunks > 1:
            assert not chunking.verify_chunk(root, (i + 1) % chunks, content, proof, chunks)
            assert not chunking.verify_chunk(root, i, content, proof[:-1], chunks)
        bits, exponent, values = chunking.decode_gradient_chunk(content)
        assert bits == 8 and exponent == int(qg.exponents[i])
        assert values.tolist() == qg.values.tolist()[i * CHUNK_SIZE : (i + 1) * CHUNK_SIZE]


def state(numel: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    w = torch.randint(-(2**45), 2**45, (numel,), generator=g)
    m = torch.randint(-(2**45), 2**45, (numel,), generator=g)
    return w, m


def test_state_chunk_layout_by_hand() -> None:
    w = torch.tensor([1, -1], dtype=torch.int64)
    m = torch.tensor([2, -(2**40)], dtype=torch.int64)
    expected = struct.pack(">4q", 1, -1, 2, -(2**40))
    assert chunking.state_chunk_contents(w, m) == [expected]
    assert chunking.state_chunk_root(w, m) == merkle.root([keccak(expected)])


def test_state_chunks_pair_weights_and_momentum_slices() -> None:
    w, m = state(2 * CHUNK_SIZE + 5)
    contents = chunking.state_chunk_contents(w, m)
    assert [len(c) for c in contents] == [16 * CHUNK_SIZE, 16 * CHUNK_SIZE, 16 * 5]
    for i, content in enumerate(contents):
        dw, dm = chunking.decode_state_chunk(content)
        start, stop = chunking.chunk_bounds(i, w.numel())
        assert torch.equal(dw, w[start:stop]) and torch.equal(dm, m[start:stop])


@given(st.integers(0, 3 * CHUNK_SIZE - 1), st.booleans())
@settings(max_examples=30)
def test_state_root_changes_when_any_value_changes(index: int, in_momentum: bool) -> None:
    w, m = state(3 * CHUNK_SIZE)
    root = chunking.state_chunk_root(w, m)
    w2, m2 = w.clone(), m.clone()
    (m2 if in_momentum else w2)[index] += 1
    assert chunking.state_chunk_root(w2, m2) != root
    # Swapping weights and momentum is a different commitment too.
    assert chunking.state_chunk_root(m, w) != root


def test_state_proofs() -> None:
    w, m = state(5 * CHUNK_SIZE + 1)
    hashes = chunking.state_chunk_hashes(w, m)
    root = chunking.state_chunk_root(w, m)
    contents = chunking.state_chunk_contents(w, m)
    for i in range(6):
        assert chunking.verify_chunk(root, i, contents[i], chunking.chunk_proof(hashes, i), 6)
    assert not chunking.verify_chunk(root, 2, contents[3], chunking.chunk_proof(hashes, 2), 6)


def test_state_input_validation() -> None:
    with pytest.raises(ValueError, match="equal, nonzero size"):
        chunking.state_chunk_root(torch.zeros(3, dtype=torch.int64), torch.zeros(4, dtype=torch.int64))
    with pytest.raises(ValueError, match="int64"):
        chunking.state_chunk_root(torch.zeros(3), torch.zeros(3))
    with pytest.raises(IndexError):
        chunking.chunk_bounds(2, 2 * CHUNK_SIZE)
    with pytest.raises(ValueError, match="not a gradient chunk"):
        chunking.decode_gradient_chunk(b"\x04\x00\x00")
    with pytest.raises(ValueError, match="16-bit"):
        chunking.decode_gradient_chunk(b"\x10\x00\x00")
    with pytest.raises(ValueError, match="state chunk"):
        chunking.decode_state_chunk(b"\x00" * 15)
