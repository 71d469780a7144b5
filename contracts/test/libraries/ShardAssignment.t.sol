// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {TestBase} from "../base/TestBase.sol";
import {ShardAssignment} from "../../src/libraries/ShardAssignment.sol";

/// @notice The deterministic shard split: disjoint, complete, balanced, contiguous.
contract ShardAssignmentTest is TestBase {
    function test_maskFor_fourOverTen_succeeds() public pure {
        vm.assertEq(ShardAssignment.maskFor(10, 4, 0), 0x3, "[0,2)");
        vm.assertEq(ShardAssignment.maskFor(10, 4, 1), 0x1c, "[2,5)");
        vm.assertEq(ShardAssignment.maskFor(10, 4, 2), 0x60, "[5,7)");
        vm.assertEq(ShardAssignment.maskFor(10, 4, 3), 0x380, "[7,10)");
    }

    function test_maskFor_oneTrainerAllShards_succeeds() public pure {
        vm.assertEq(ShardAssignment.maskFor(256, 1, 0), type(uint256).max, "all 256 shards");
        vm.assertEq(ShardAssignment.maskFor(1, 1, 0), 1, "the single shard");
        vm.assertEq(ShardAssignment.maskFor(10, 1, 0), 0x3ff, "all 10 shards");
    }

    function test_maskFor_lastPositionReaches256_succeeds() public pure {
        // end == 256: (1 << 256) is 0, the unchecked subtraction must yield the top bits.
        vm.assertEq(ShardAssignment.maskFor(256, 64, 63), uint256(0xf) << 252, "top four shards");
        vm.assertEq(ShardAssignment.maskFor(256, 2, 1), type(uint256).max << 128, "upper half");
        vm.assertEq(ShardAssignment.maskFor(256, 256, 255), uint256(1) << 255, "the top shard alone");
    }

    function test_maskFor_oneShardEach_succeeds() public pure {
        for (uint256 p = 0; p < 64; ++p) {
            vm.assertEq(ShardAssignment.maskFor(64, 64, p), uint256(1) << p, "shard p for position p");
        }
    }

    function testFuzz_maskFor_partition(uint256 shardCount, uint256 active) public pure {
        shardCount = bound(shardCount, 1, ShardAssignment.MAX_SHARDS);
        active = bound(active, 1, shardCount);
        uint256 union;
        uint256 nextStart;
        uint256 minSize = type(uint256).max;
        uint256 maxSize;
        for (uint256 p = 0; p < active; ++p) {
            uint256 mask = ShardAssignment.maskFor(shardCount, active, p);
            vm.assertEq(union & mask, 0, "masks of all positions are disjoint");
            union |= mask;
            uint256 size = _popcount(mask);
            vm.assertGt(size, 0, "every position gets a shard when shardCount >= active");
            // Contiguous, in position order: exactly the bits [nextStart, nextStart + size).
            vm.assertEq(mask, _fullMask(nextStart + size) & ~_fullMask(nextStart), "contiguous range in order");
            nextStart += size;
            if (size < minSize) minSize = size;
            if (size > maxSize) maxSize = size;
            vm.assertEq(uint256(ShardAssignment.count(mask)), size, "count = popcount");
        }
        vm.assertEq(union, _fullMask(shardCount), "cover exactly shardCount bits");
        vm.assertEq(_popcount(union), shardCount, "shardCount bits set");
        vm.assertLe(maxSize - minSize, 1, "sizes differ by at most one");
        vm.assertEq(minSize, shardCount / active, "smallest = floor(S/n)");
    }

    function test_count_edges_succeeds() public pure {
        vm.assertEq(uint256(ShardAssignment.count(0)), 0, "empty");
        vm.assertEq(uint256(ShardAssignment.count(1)), 1, "one");
        vm.assertEq(uint256(ShardAssignment.count(uint256(1) << 255)), 1, "top bit");
        vm.assertEq(uint256(ShardAssignment.count(type(uint256).max)), 256, "all bits");
    }

    function testFuzz_count_matchesPopcount(uint256 mask) public pure {
        vm.assertEq(uint256(ShardAssignment.count(mask)), _popcount(mask), "count");
    }
}
