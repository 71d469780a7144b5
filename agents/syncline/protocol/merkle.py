"""Binary Merkle trees over indexed items, reproducible in Solidity.

leaf(i, h)      = keccak256(uint256(i) || h)              (abi.encodePacked(uint256, bytes32))
node(l, r)      = keccak256(l || r)
An odd node at the end of a level is carried up unchanged. The root of a single leaf is the leaf.
Binding the index into the leaf means a chunk cannot be replayed at another position.
"""

from __future__ import annotations

from collections.abc import Sequence

from syncline.protocol.hashing import keccak


def leaf_hash(index: int, content_hash: bytes) -> bytes:
    if len(content_hash) != 32:
        raise ValueError(f"content hash must be 32 bytes, got {len(content_hash)}")
    return keccak(index.to_bytes(32, "big") + content_hash)


def _parent(left: bytes, right: bytes) -> bytes:
    return keccak(left + right)


def root_of_leaves(leaves: Sequence[bytes]) -> bytes:
    """Merkle root of already-hashed leaves."""
    if not leaves:
        raise ValueError("a Merkle tree needs at least one leaf")
    level = list(leaves)
    while len(level) > 1:
        nxt = [_parent(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def root(content_hashes: Sequence[bytes]) -> bytes:
    """Merkle root over content hashes, leaf i binding index i."""
    return root_of_leaves([leaf_hash(i, h) for i, h in enumerate(content_hashes)])


def proof(content_hashes: Sequence[bytes], index: int) -> list[bytes]:
    """Sibling path for leaf ``index`` (levels where the node is carried up contribute nothing)."""
    if not 0 <= index < len(content_hashes):
        raise IndexError(f"leaf {index} out of range 0..{len(content_hashes) - 1}")
    level = [leaf_hash(i, h) for i, h in enumerate(content_hashes)]
    path: list[bytes] = []
    pos = index
    while len(level) > 1:
        sibling = pos ^ 1
        if sibling < len(level):
            path.append(level[sibling])
        nxt = [_parent(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
        pos //= 2
    return path


def verify(root_hash: bytes, index: int, content_hash: bytes, path: Sequence[bytes], leaf_count: int) -> bool:
    """Check ``path`` proves ``content_hash`` at ``index`` in a tree of ``leaf_count`` leaves."""
    if not 0 <= index < leaf_count:
        return False
    node = leaf_hash(index, content_hash)
    pos, width, used = index, leaf_count, 0
    while width > 1:
        sibling = pos ^ 1
        if sibling < width:
            if used >= len(path):
                return False
            node = _parent(path[used], node) if pos & 1 else _parent(node, path[used])
            used += 1
        pos //= 2
        width = (width + 1) // 2
    return used == len(path) and node == root_hash
