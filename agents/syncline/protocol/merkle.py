"""Binary Merkle trees over indexed items, reproducible in Solidity.

leaf(i, h)      = keccak256(uint256(i) || h)              (abi.encodePacked(uint256, bytes32))
node(l, r)      = keccak256(l || r)
An odd node at the end of a level is carried up unchanged. The root of a single leaf is the leaf.
Binding the index into the leaf means a chunk cannot be replayed at another position.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from syncline.protocol.hashing import Keccak256, keccak


def leaf_hash(index: int, content_hash: bytes) -> bytes:
    if len(content_hash) != 32:
        raise ValueError(f"content hash must be 32 bytes, got {len(content_hash)}")
    return keccak(index.to_bytes(32, "big") + content_hash)


def _parent(left: bytes, right: bytes) -> bytes:
    return keccak(left + right)


def leaf_hashes(content_hashes: Sequence[bytes], first_index: int = 0) -> list[bytes]:
    """``leaf_hash(first_index + i, h_i)`` for every content hash, vectorized.

    The 64-byte messages ``uint256(index) || h`` are laid out in one buffer by numpy; only the
    hash calls loop (this is the hot path of every commitment over millions of chunks).
    """
    count = len(content_hashes)
    if count == 0:
        return []
    joined = b"".join(content_hashes)
    if len(joined) != 32 * count:
        raise ValueError("content hashes must be 32 bytes each")
    messages = np.zeros((count, 64), dtype=np.uint8)
    messages[:, 24:32] = (
        np.arange(first_index, first_index + count, dtype=np.uint64).astype(">u8").view(np.uint8).reshape(count, 8)
    )
    messages[:, 32:] = np.frombuffer(joined, dtype=np.uint8).reshape(count, 32)
    view = memoryview(messages.tobytes())
    return [Keccak256(view[i : i + 64]).digest() for i in range(0, 64 * count, 64)]


def root_of_leaves(leaves: Sequence[bytes]) -> bytes:
    """Merkle root of already-hashed leaves."""
    if not leaves:
        raise ValueError("a Merkle tree needs at least one leaf")
    level = list(leaves)
    while len(level) > 1:
        carried = level[-1] if len(level) % 2 else None
        view = memoryview(b"".join(level[: len(level) - (carried is not None)]))
        level = [Keccak256(view[i : i + 64]).digest() for i in range(0, len(view), 64)]
        if carried is not None:
            level.append(carried)
    return level[0]


def root(content_hashes: Sequence[bytes]) -> bytes:
    """Merkle root over content hashes, leaf i binding index i."""
    return root_of_leaves(leaf_hashes(content_hashes))


def block_root(content_hashes: Sequence[bytes], first_index: int) -> bytes:
    """Root of the block of leaves ``first_index ..`` (see :func:`root_of_blocks`)."""
    return root_of_leaves(leaf_hashes(content_hashes, first_index))


def root_of_blocks(block_roots: Sequence[bytes]) -> bytes:
    """Root of a tree whose leaves come in aligned blocks of ``2**k`` (the last may be short).

    With ``B = 2**k`` and block ``j`` holding leaves ``[j*B, (j+1)*B)``, the root over all leaves
    equals ``root_of_leaves`` over the blocks' own roots (each block root is
    ``root_of_leaves`` of its leaves, the short last block included, since the carry rule
    lifts its lone top node unchanged). So blocks can be hashed independently, in other
    processes, and combined here.
    """
    return root_of_leaves(block_roots)


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
