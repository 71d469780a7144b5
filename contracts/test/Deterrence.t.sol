// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {SynclineTest} from "./base/SynclineTest.sol";
import {ISynclineEvents} from "../src/ISynclineEvents.sol";
import {ISynclineTaskPosting} from "../src/ISynclineTaskPosting.sol";
import {TaskSpec} from "../src/SynclineTypes.sol";

/// @notice postTask's deterrence rule (docs/protocol.md "Deterrence"): with
/// `R = ceil(rewardPool / (rounds * minTrainers))`, a spec is accepted iff
/// `trainerStake * spotCheckPpm >= 2 * R * 1e6` and `1 <= spotCheckPpm <= 1e6`.
contract DeterrenceTest is SynclineTest {
    function _posting() internal view returns (ISynclineTaskPosting) {
        return ISynclineTaskPosting(address(market));
    }

    function _reward(TaskSpec memory s, uint256 pool) internal pure returns (uint256) {
        uint256 n = uint256(s.rounds) * s.minTrainers;
        return (pool + n - 1) / n;
    }

    function _doesNotDeter(TaskSpec memory s, uint256 pool) internal pure returns (bytes memory) {
        return abi.encodeWithSelector(
            ISynclineEvents.SynclineStakeDoesNotDeter.selector, s.trainerStake, s.spotCheckPpm, _reward(s, pool)
        );
    }

    function _tryPost(TaskSpec memory s, uint256 pool, bytes memory err) internal returns (uint256 id) {
        uint256 value = pool + _feeBudget(s);
        vm.deal(sponsor, value);
        vm.prank(sponsor);
        if (err.length != 0) vm.expectRevert(err);
        id = _posting().postTask{value: value}(s);
    }

    /// The sponsor defaults' shape: 8 rounds, 3 trainers, a 3 ETH pool.
    function _defaultsShape() internal view returns (TaskSpec memory s) {
        s = _defaultSpec();
        s.rounds = 8;
        s.minTrainers = 3;
        s.maxTrainers = 3;
    }

    function test_constants_readFromTheMarket() public view {
        vm.assertEq(_posting().DETERRENCE_MARGIN(), 2, "margin");
        vm.assertEq(_posting().SPOT_CHECK_PPM_SCALE(), 1_000_000, "ppm scale");
    }

    /// Issue 27 item 3: a 1 wei stake against a 3 ETH pool was accepted; even drawing every
    /// submission it deters nothing.
    function test_postTask_oneWeiStakeThreeEthPool_reverts() public {
        TaskSpec memory s = _defaultsShape();
        s.trainerStake = 1;
        _tryPost(s, 3 ether, _doesNotDeter(s, 3 ether));
    }

    /// At the sponsor defaults (R = 0.125 ETH, stake 1 ETH) the old rate (3810 ppm) reverts and
    /// the derived one (250_000 ppm = 2R/stake) posts.
    function test_postTask_sponsorDefaults_derivedRatePosts() public {
        TaskSpec memory s = _defaultsShape();
        s.trainerStake = 1 ether;
        s.spotCheckPpm = 3810;
        _tryPost(s, 3 ether, _doesNotDeter(s, 3 ether));
        s.spotCheckPpm = 250_000;
        uint256 id = _tryPost(s, 3 ether, "");
        vm.assertEq(market.getSpec(id).spotCheckPpm, 250_000, "ppm stored");
        vm.assertEq(market.getTaskState(id).rewardPool, 3 ether, "pool escrowed");
        s.spotCheckPpm = 249_999;
        _tryPost(s, 3 ether, _doesNotDeter(s, 3 ether));
    }

    /// Exactly at the formula passes; one wei of stake less reverts (R rounded up).
    function test_postTask_boundary_exact() public {
        TaskSpec memory s = _defaultSpec();
        uint256 pool = 10 ether + 1; // R = ceil(pool / 6) = 1.6666... ETH + 1 wei
        s.spotCheckPpm = 400_000;
        uint256 r = _reward(s, pool);
        vm.assertEq(r, 1_666_666_666_666_666_667, "R rounds up");
        // stake * 400_000 == 2 * R * 1e6  <=>  stake == 5 R
        s.trainerStake = uint128(5 * r);
        _tryPost(s, pool, "");
        s.trainerStake = uint128(5 * r - 1);
        _tryPost(s, pool, _doesNotDeter(s, pool));
    }

    function test_postTask_zeroPpm_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.spotCheckPpm = 0;
        _tryPost(
            s, POOL, abi.encodeWithSelector(ISynclineEvents.SynclineSpecFieldInvalid.selector, "spotCheckPpm")
        );
    }

    function test_postTask_ppmAboveScale_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.spotCheckPpm = 1_000_001;
        _tryPost(
            s, POOL, abi.encodeWithSelector(ISynclineEvents.SynclineSpecFieldInvalid.selector, "spotCheckPpm")
        );
    }

    /// postTask accepts iff the inequality holds, over stake, pool, rounds, minTrainers and ppm.
    function testFuzz_postTask_acceptsIffDeters(
        uint128 stake,
        uint256 pool,
        uint32 rounds,
        uint16 minTrainers,
        uint32 ppm
    ) public {
        TaskSpec memory s = _defaultSpec();
        s.trainerStake = uint128(bound(stake, 1, type(uint128).max));
        s.rounds = uint32(bound(rounds, 1, 10_000));
        s.minTrainers = uint16(bound(minTrainers, 1, SHARDS));
        s.maxTrainers = s.minTrainers;
        s.spotCheckPpm = uint32(bound(ppm, 1, 1_000_000));
        pool = bound(pool, 1, 1_000_000_000 ether);
        uint256 r = _reward(s, pool);
        bool deters = uint256(s.trainerStake) * s.spotCheckPpm >= 2 * r * 1_000_000;
        uint256 id = _tryPost(s, pool, deters ? bytes("") : _doesNotDeter(s, pool));
        if (deters) vm.assertEq(market.getTaskState(id).rewardPool, pool, "posted with its pool");
    }
}
