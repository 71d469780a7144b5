// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title ChunkMerkle
/// @notice Membership proofs for the protocol's chunk trees (`syncline/protocol/merkle.py`):
/// `leaf(i, h) = keccak256(uint256 i || h)`, `node(l, r) = keccak256(l || r)` by position, and an
/// odd node at the end of a level is carried up unchanged. The leaf count is part of the
/// verification (it decides where nodes are carried), so callers pass the count the task fixes.
library ChunkMerkle {
    /// @notice Whether `path` proves `contentHash` at leaf `index` of a `leafCount`-leaf tree with root `root`.
    function verify(bytes32 root, uint256 index, uint256 leafCount, bytes32 contentHash, bytes32[] calldata path)
        internal
        pure
        returns (bool)
    {
        if (index >= leafCount) return false;
        bytes32 node = keccak256(abi.encodePacked(index, contentHash));
        uint256 pos = index;
        uint256 width = leafCount;
        uint256 used = 0;
        while (width > 1) {
            if ((pos ^ 1) < width) {
                if (used >= path.length) return false;
                bytes32 sibling = path[used++];
                node = pos & 1 == 1 ? _hashPair(sibling, node) : _hashPair(node, sibling);
            }
            pos >>= 1;
            width = (width + 1) >> 1;
        }
        return used == path.length && node == root;
    }

    function _hashPair(bytes32 left, bytes32 right) private pure returns (bytes32 h) {
        // assembly: keccak256 of the two words in scratch space (no memory allocation).
        assembly ("memory-safe") {
            mstore(0x00, left)
            mstore(0x20, right)
            h := keccak256(0x00, 0x40)
        }
    }
}
