"""Merkle trees over indexed items: roots, proofs and verification (Hypothesis properties)."""

from __future__ import annotations

import pytest
from eth_utils import keccak
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from syncline.protocol import merkle
from syncline.protocol.spec import DatasetManifest

hashes32 = st.binary(min_size=32, max_size=32)
leaf_lists = st.lists(hashes32, min_size=1, max_size=40)


@st.composite
def tree_and_index(draw: st.DrawFn) -> tuple[list[bytes], int]:
    items = draw(leaf_lists)
    return items, draw(st.integers(0, len(items) - 1))


def reference_root(items: list[bytes]) -> bytes:
    """Independent implementation of the documented construction (odd node carried up)."""
    level = [keccak(i.to_bytes(32, "big") + h) for i, h in enumerate(items)]
    while len(level) > 1:
        pairs = [level[i : i + 2] for i in range(0, len(level), 2)]
        level = [keccak(p[0] + p[1]) if len(p) == 2 else p[0] for p in pairs]
    return level[0]


@settings(max_examples=150)
@given(leaf_lists)
def test_root_matches_reference_construction(items: list[bytes]) -> None:
    assert merkle.root(items) == reference_root(items)
    assert merkle.root_of_leaves([merkle.leaf_hash(i, h) for i, h in enumerate(items)]) == merkle.root(items)


@given(hashes32)
def test_single_leaf_root_is_the_leaf_hash(item: bytes) -> None:
    r = merkle.root([item])
    assert r == merkle.leaf_hash(0, item) == keccak((0).to_bytes(32, "big") + item)
    assert merkle.proof([item], 0) == []
    assert merkle.verify(r, 0, item, [], 1)
    assert not merkle.verify(r, 0, item, [item], 1)


@settings(max_examples=150)
@given(leaf_lists)
def test_every_leaf_proof_verifies(items: list[bytes]) -> None:
    r = merkle.root(items)
    for i, h in enumerate(items):
        path = merkle.proof(items, i)
        assert len(path) <= max(1, len(items) - 1).bit_length()
        assert merkle.verify(r, i, h, path, len(items))


@settings(max_examples=150)
@given(tree_and_index(), st.data())
def test_wrong_index_fails(tree: tuple[list[bytes], int], data: st.DataObject) -> None:
    items, i = tree
    r, path = merkle.root(items), merkle.proof(items, i)
    j = data.draw(st.integers(-2, len(items) + 2).filter(lambda x: x != i))
    assert not merkle.verify(r, j, items[i], path, len(items))
    # the same content at another position is a different leaf: duplicate data cannot be replayed
    if 0 <= j < len(items):
        assert not merkle.verify(r, j, items[i], merkle.proof(items, j), len(items)) or items[j] == items[i]


@settings(max_examples=150)
@given(tree_and_index(), hashes32)
def test_wrong_content_fails(tree: tuple[list[bytes], int], other: bytes) -> None:
    items, i = tree
    assume(other != items[i])
    r, path = merkle.root(items), merkle.proof(items, i)
    assert not merkle.verify(r, i, other, path, len(items))


@settings(max_examples=150)
@given(tree_and_index(), st.data())
def test_tampered_path_fails(tree: tuple[list[bytes], int], data: st.DataObject) -> None:
    items, i = tree
    r, path = merkle.root(items), merkle.proof(items, i)
    n = len(items)
    # an extra sibling
    extra = data.draw(hashes32)
    assert not merkle.verify(r, i, items[i], [*path, extra], n)
    assert not merkle.verify(r, i, items[i], [extra, *path], n)
    if path:
        # a dropped sibling
        k = data.draw(st.integers(0, len(path) - 1))
        assert not merkle.verify(r, i, items[i], path[:k] + path[k + 1 :], n)
        # one flipped bit in one sibling
        byte = data.draw(st.integers(0, 31))
        bit = data.draw(st.integers(0, 7))
        flipped = bytearray(path[k])
        flipped[byte] ^= 1 << bit
        assert not merkle.verify(r, i, items[i], [*path[:k], bytes(flipped), *path[k + 1 :]], n)
        # siblings in another order
        if len(path) > 1 and len(set(path)) > 1:
            assert not merkle.verify(r, i, items[i], list(reversed(path)), n) or path == list(reversed(path))


@settings(max_examples=100)
@given(tree_and_index(), hashes32)
def test_wrong_root_fails(tree: tuple[list[bytes], int], other_root: bytes) -> None:
    items, i = tree
    r = merkle.root(items)
    assume(other_root != r)
    assert not merkle.verify(other_root, i, items[i], merkle.proof(items, i), len(items))


@given(leaf_lists, st.data())
def test_changing_any_item_changes_the_root(items: list[bytes], data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(items) - 1))
    other = data.draw(hashes32.filter(lambda h: h != items[i]))
    changed = [*items[:i], other, *items[i + 1 :]]
    assert merkle.root(changed) != merkle.root(items)
    assert merkle.root([*items, items[-1]]) != merkle.root(items)  # appending a duplicate changes it too


def test_known_small_trees() -> None:
    a, b, c = (keccak(text=x) for x in "abc")
    la, lb, lc = (merkle.leaf_hash(i, h) for i, h in enumerate((a, b, c)))
    assert merkle.root([a, b]) == keccak(la + lb)
    assert merkle.root([a, b, c]) == keccak(keccak(la + lb) + lc)
    assert merkle.proof([a, b, c], 2) == [keccak(la + lb)]
    assert merkle.proof([a, b, c], 0) == [lb, lc]


def test_edge_cases_raise() -> None:
    with pytest.raises(ValueError):
        merkle.root([])
    with pytest.raises(ValueError):
        merkle.leaf_hash(0, b"\x00" * 31)
    with pytest.raises(IndexError):
        merkle.proof([b"\x01" * 32], 1)
    with pytest.raises(IndexError):
        merkle.proof([b"\x01" * 32], -1)
    assert not merkle.verify(merkle.root([b"\x01" * 32]), 0, b"\x01" * 32, [], 0)


@given(st.lists(hashes32, min_size=1, max_size=12))
def test_dataset_root_is_the_merkle_root_of_shard_hashes(items: list[bytes]) -> None:
    manifest = DatasetManifest(shard_hashes=tuple("0x" + h.hex() for h in items))
    assert manifest.shard_count == len(items)
    assert manifest.root == "0x" + merkle.root(items).hex()


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 300), st.integers(0, 6), st.integers(0, 2**31 - 1))
def test_aligned_block_roots_combine_to_the_root(count: int, k: int, seed: int) -> None:
    """docs/protocol.md §3: the root over blocks of 2**k leaves' own roots is the tree's root."""
    import random

    rng = random.Random(seed)
    hashes = [rng.randbytes(32) for _ in range(count)]
    size = 1 << k
    blocks = [merkle.root_of_leaves(merkle.leaf_hashes(hashes[s : s + size], s)) for s in range(0, count, size)]
    assert merkle.root_of_blocks(blocks) == merkle.root(hashes)
    assert merkle.leaf_hashes(hashes, 0) == [merkle.leaf_hash(i, h) for i, h in enumerate(hashes)]
