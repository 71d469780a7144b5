// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title ShardAssignment
/// @notice Deterministic split of a dataset's shards over the active trainers: the trainer at
/// position p of n (fragment order, evicted trainers skipped) gets the contiguous shard range
/// [floor(p*S/n), floor((p+1)*S/n)) as a bitmask (bit i = shard i). With S >= n every trainer
/// gets at least one shard, and sizes differ by at most one.
library ShardAssignment {
    /// @notice Largest shard count a bitmask can hold.
    uint256 internal constant MAX_SHARDS = 256;

    /// @notice Shard bitmask of position `position` among `active` trainers over `shardCount` shards.
    function maskFor(uint256 shardCount, uint256 active, uint256 position) internal pure returns (uint256 mask) {
        uint256 start = (position * shardCount) / active;
        uint256 end = ((position + 1) * shardCount) / active;
        // unchecked: shifts never overflow in Solidity; `1 << 256` is 0, and 0 - (1 << start) wraps
        // to "all bits from start upward", which is exactly the mask wanted when end == 256.
        unchecked {
            mask = (uint256(1) << end) - (uint256(1) << start);
        }
    }

    /// @notice Number of set bits (the fragment's size in shards).
    function count(uint256 mask) internal pure returns (uint16 n) {
        // unchecked: at most 256 iterations, n <= 256.
        unchecked {
            while (mask != 0) {
                mask &= mask - 1;
                ++n;
            }
        }
    }
}
