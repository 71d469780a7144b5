// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title MerkleRef
/// @notice A test-side reference of the protocol's chunk trees, written after
/// `agents/syncline/protocol/merkle.py` (level by level, not like `ChunkMerkle.verify`):
/// `leaf(i, h) = keccak256(uint256 i || h)`, `node(l, r) = keccak256(l || r)` by position, an odd
/// node at the end of a level carried up unchanged, the root of a single leaf is the leaf.
library MerkleRef {
    function leaf(uint256 index, bytes32 contentHash) internal pure returns (bytes32) {
        return keccak256(abi.encodePacked(index, contentHash));
    }

    function parent(bytes32 left, bytes32 right) internal pure returns (bytes32) {
        return keccak256(abi.encodePacked(left, right));
    }

    /// @dev `merkle.root`: the root over content hashes, leaf i binding index i.
    function root(bytes32[] memory contentHashes) internal pure returns (bytes32) {
        uint256 n = contentHashes.length;
        require(n > 0, "MerkleRef: no leaves");
        bytes32[] memory level = new bytes32[](n);
        for (uint256 i = 0; i < n; ++i) {
            level[i] = leaf(i, contentHashes[i]);
        }
        while (n > 1) {
            uint256 m = 0;
            for (uint256 i = 0; i + 1 < n; i += 2) {
                level[m++] = parent(level[i], level[i + 1]);
            }
            if (n % 2 == 1) level[m++] = level[n - 1];
            n = m;
        }
        return level[0];
    }

    /// @dev `merkle.proof`: the sibling path of leaf `index` (carried levels contribute nothing).
    function proof(bytes32[] memory contentHashes, uint256 index) internal pure returns (bytes32[] memory path) {
        uint256 n = contentHashes.length;
        require(index < n, "MerkleRef: index out of range");
        bytes32[] memory level = new bytes32[](n);
        for (uint256 i = 0; i < n; ++i) {
            level[i] = leaf(i, contentHashes[i]);
        }
        bytes32[] memory buf = new bytes32[](256);
        uint256 used = 0;
        uint256 pos = index;
        while (n > 1) {
            if ((pos ^ 1) < n) buf[used++] = level[pos ^ 1];
            uint256 m = 0;
            for (uint256 i = 0; i + 1 < n; i += 2) {
                level[m++] = parent(level[i], level[i + 1]);
            }
            if (n % 2 == 1) level[m++] = level[n - 1];
            n = m;
            pos /= 2;
        }
        path = new bytes32[](used);
        for (uint256 i = 0; i < used; ++i) {
            path[i] = buf[i];
        }
    }

    /// @dev The root a valid `path` for `contentHash` at `index` of a `leafCount`-leaf tree leads
    /// to (the proof of a leaf does not depend on the leaf, so one path serves many trees that
    /// differ only there; the gas tests use this to avoid rebuilding 3,907-leaf trees).
    function rootFromPath(uint256 index, uint256 leafCount, bytes32 contentHash, bytes32[] memory path)
        internal
        pure
        returns (bytes32 node)
    {
        node = leaf(index, contentHash);
        uint256 used = 0;
        uint256 pos = index;
        uint256 width = leafCount;
        while (width > 1) {
            if ((pos ^ 1) < width) {
                bytes32 sibling = path[used++];
                node = pos % 2 == 1 ? parent(sibling, node) : parent(node, sibling);
            }
            pos /= 2;
            width = (width + 1) / 2;
        }
        require(used == path.length, "MerkleRef: path length");
    }

    /// @dev Content hashes of a list of chunks.
    function hashes(bytes[] memory chunks) internal pure returns (bytes32[] memory out) {
        out = new bytes32[](chunks.length);
        for (uint256 i = 0; i < chunks.length; ++i) {
            out[i] = keccak256(chunks[i]);
        }
    }
}
