// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "./base/Vm.sol";

import {SynclineTest} from "./base/SynclineTest.sol";
import {Vm} from "./base/Vm.sol";
import {ISynclineEvents} from "../src/ISynclineEvents.sol";
import {TaskSpec, TaskState, TaskStatus, TrainerRecord, RoundStatus} from "../src/SynclineTypes.sol";

/// @notice Enrollment, run start, shard assignment, eviction and slashing.
contract TrainerStakingTest is SynclineTest {
    // Default fixture: 4 trainers over 10 shards -> [0,2) [2,5) [5,7) [7,10).
    uint256 internal constant MASK4_0 = 0x3;
    uint256 internal constant MASK4_1 = 0x1c;
    uint256 internal constant MASK4_2 = 0x60;
    uint256 internal constant MASK4_3 = 0x380;
    // After one eviction: 3 trainers over 10 shards -> [0,3) [3,6) [6,10).
    uint256 internal constant MASK3_0 = 0x7;
    uint256 internal constant MASK3_1 = 0x38;
    uint256 internal constant MASK3_2 = 0x3c0;

    /// @dev Commits for every active trainer except `skip`.
    function _commitExcept(uint256 id, uint32 round, address skip) internal returns (uint256 mask) {
        address[] memory ts = market.getTrainers(id);
        for (uint256 i = 0; i < ts.length; ++i) {
            TrainerRecord memory r = market.getTrainer(id, ts[i]);
            if (r.evicted || ts[i] == skip) continue;
            _commit(id, round, ts[i]);
            mask |= uint256(1) << r.fragment;
        }
    }

    /// @dev Runs a round where `skip` does not commit; everything committed is accepted.
    function _roundWithout(uint256 id, uint32 round, address skip) internal {
        uint256 mask = _commitExcept(id, round, skip);
        _warpPastDeadline(id);
        _finalize(id, round, mask);
    }

    // ================================================================== enroll

    function test_enroll_firstTrainer_succeeds() public {
        uint256 id = _postDefault();
        uint256 escrowBefore = market.escrowOf(id);

        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.TrainerEnrolled(id, trainers[0], 0, STAKE);
        vm.prank(trainers[0]);
        uint16 fragment = market.enroll{value: STAKE}(id);

        vm.assertEq(uint256(fragment), 0, "first fragment");
        TrainerRecord memory r = market.getTrainer(id, trainers[0]);
        vm.assertTrue(r.enrolled, "enrolled");
        vm.assertFalse(r.evicted, "not evicted");
        vm.assertEq(uint256(r.fragment), 0, "record fragment");
        vm.assertEq(uint256(r.stake), STAKE, "record stake");
        vm.assertEq(uint256(r.slashed), 0, "record slashed");
        vm.assertEq(r.shardMask, 0, "no shards before start");
        TaskState memory t = market.getTaskState(id);
        vm.assertEq(uint256(t.enrolled), 1, "enrolled count");
        vm.assertEq(uint256(t.active), 1, "active count");
        vm.assertEq(t.stakeHeld, STAKE, "stakeHeld");
        vm.assertEq(uint256(t.status), uint256(TaskStatus.Enrolling), "still enrolling");
        vm.assertEq(market.escrowOf(id), escrowBefore + STAKE, "escrow grows by the stake");
    }

    function test_enroll_fragmentsInOrder_succeeds() public {
        uint256 id = _postDefault();
        for (uint256 i = 0; i < 3; ++i) {
            vm.assertEq(uint256(_enroll(id, trainers[i])), i, "sequential fragment");
        }
        address[] memory ts = market.getTrainers(id);
        vm.assertEq(ts.length, 3, "trainer count");
        for (uint256 i = 0; i < 3; ++i) {
            vm.assertEq(ts[i], trainers[i], "fragment order");
        }
        vm.assertEq(market.getTaskState(id).stakeHeld, 3 * uint256(STAKE), "stakeHeld");
    }

    function test_enroll_stakeTooLow_reverts() public {
        uint256 id = _postDefault();
        vm.prank(trainers[0]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongStake.selector, STAKE - 1, STAKE));
        market.enroll{value: STAKE - 1}(id);
    }

    function test_enroll_stakeTooHigh_reverts() public {
        uint256 id = _postDefault();
        vm.prank(trainers[0]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongStake.selector, STAKE + 1, STAKE));
        market.enroll{value: STAKE + 1}(id);
    }

    function testFuzz_enroll_wrongStake_reverts(uint256 value) public {
        value = bound(value, 0, 100 ether);
        vm.assume(value != STAKE);
        uint256 id = _postDefault();
        vm.prank(trainers[0]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongStake.selector, value, STAKE));
        market.enroll{value: value}(id);
    }

    function test_enroll_atDeadline_succeeds() public {
        uint256 id = _postDefault();
        warpTo(market.getSpec(id).enrollmentDeadline);
        vm.assertEq(uint256(_enroll(id, trainers[0])), 0, "enrolled at the deadline");
    }

    function test_enroll_afterDeadline_reverts() public {
        uint256 id = _postDefault();
        uint64 deadline = market.getSpec(id).enrollmentDeadline;
        warpTo(deadline + 1);
        vm.prank(trainers[0]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineEnrollmentClosed.selector, id, deadline));
        market.enroll{value: STAKE}(id);
    }

    function test_enroll_twice_reverts() public {
        uint256 id = _postDefault();
        _enroll(id, trainers[0]);
        vm.prank(trainers[0]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineAlreadyEnrolled.selector, id, trainers[0]));
        market.enroll{value: STAKE}(id);
        vm.assertEq(uint256(market.getTaskState(id).enrolled), 1, "counted once");
    }

    function test_enroll_witness_reverts() public {
        uint256 id = _postDefault();
        vm.prank(witnesses[1]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWitnessCannotTrain.selector, id, witnesses[1]));
        market.enroll{value: STAKE}(id);
    }

    function test_enroll_unknownTask_reverts() public {
        vm.prank(trainers[0]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, 1));
        market.enroll{value: STAKE}(1);
    }

    function test_enroll_afterAutoStart_reverts() public {
        uint256 id = _postAndStart();
        vm.prank(trainers[MAX_TRAINERS]);
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, id, TaskStatus.Running, TaskStatus.Enrolling
            )
        );
        market.enroll{value: STAKE}(id);
    }

    function test_enroll_reachesMax_autoStarts_succeeds() public {
        uint256 id = _postDefault();
        _enrollMany(id, MAX_TRAINERS - 1);
        _assertStatus(id, TaskStatus.Enrolling, "not yet started");
        bytes32 init = market.getSpec(id).initialStateRoot;
        uint64 now_ = uint64(block.timestamp);

        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.TrainerEnrolled(id, trainers[3], 3, STAKE);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RunStarted(id, MAX_TRAINERS, init);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ShardsAssigned(id, trainers[0], 0, MASK4_0);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ShardsAssigned(id, trainers[1], 1, MASK4_1);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ShardsAssigned(id, trainers[2], 2, MASK4_2);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ShardsAssigned(id, trainers[3], 3, MASK4_3);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RoundOpened(id, 0, now_, now_ + ROUND_DURATION);
        _enroll(id, trainers[3]);

        TaskState memory t = market.getTaskState(id);
        vm.assertEq(uint256(t.status), uint256(TaskStatus.Running), "running");
        vm.assertEq(uint256(t.roundOpenedAt), now_, "round 0 opened now");
        vm.assertEq(uint256(t.currentRound), 0, "round 0");
        vm.assertEq(uint256(t.active), MAX_TRAINERS, "all active");
        vm.assertEq(market.getTrainer(id, trainers[1]).shardMask, MASK4_1, "stored mask");
        vm.assertEq(market.getRound(id, 0).openedAt, now_, "getRound shows the open round's start");
        _assertShardPartition(id);
    }

    // ================================================================== startRun

    function test_startRun_atDeadline_reverts() public {
        uint256 id = _postDefault();
        _enrollMany(id, MIN_TRAINERS);
        uint64 deadline = market.getSpec(id).enrollmentDeadline;
        warpTo(deadline);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineEnrollmentStillOpen.selector, id, deadline));
        market.startRun(id);
    }

    function test_startRun_underfilled_reverts() public {
        uint256 id = _postDefault();
        _enroll(id, trainers[0]);
        warpTo(market.getSpec(id).enrollmentDeadline + 1);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnderfilled.selector, id, 1, MIN_TRAINERS));
        market.startRun(id);
    }

    function test_startRun_unknownTask_reverts() public {
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, 3));
        market.startRun(3);
    }

    function test_startRun_alreadyRunning_reverts() public {
        uint256 id = _postAndStart();
        warpTo(market.getSpec(id).enrollmentDeadline + 1);
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, id, TaskStatus.Running, TaskStatus.Enrolling
            )
        );
        market.startRun(id);
    }

    function test_startRun_atMinTrainers_succeeds() public {
        uint256 id = _postDefault();
        _enrollMany(id, MIN_TRAINERS);
        warpTo(market.getSpec(id).enrollmentDeadline + 1);
        uint64 now_ = uint64(block.timestamp);

        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RunStarted(id, MIN_TRAINERS, keccak256("initial-state"));
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ShardsAssigned(id, trainers[0], 0, 0x1f);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ShardsAssigned(id, trainers[1], 1, 0x3e0);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RoundOpened(id, 0, now_, now_ + ROUND_DURATION);
        vm.prank(stranger); // anyone may start
        market.startRun(id);

        _assertStatus(id, TaskStatus.Running, "running");
        vm.assertEq(uint256(market.getTaskState(id).roundOpenedAt), now_, "opened at start");
        _assertShardPartition(id);
    }

    function testFuzz_startRun_trainersAndShards(uint16 maxT, uint16 n, uint16 shards) public {
        maxT = uint16(bound(maxT, 1, 64));
        n = uint16(bound(n, 1, maxT));
        shards = uint16(bound(shards, maxT, 256));
        TaskSpec memory s = _defaultSpec();
        s.minTrainers = 1;
        s.maxTrainers = maxT;
        s.shardCount = shards;
        uint256 id = _post(s, POOL);
        _enrollMany(id, n);
        if (n < maxT) {
            _assertStatus(id, TaskStatus.Enrolling, "waits for the deadline");
            warpTo(s.enrollmentDeadline + 1);
            market.startRun(id);
        }
        _assertStatus(id, TaskStatus.Running, "running");
        _assertShardPartition(id);
        address[] memory ts = market.getTrainers(id);
        for (uint256 p = 0; p < n; ++p) {
            uint256 size = _popcount(market.getTrainer(id, ts[p]).shardMask);
            vm.assertGe(size, shards / n, "at least floor(S/n)");
            vm.assertLe(size, (shards + n - 1) / n, "at most ceil(S/n)");
        }
    }

    function test_getTrainer_unenrolled_succeeds() public {
        uint256 id = _postDefault();
        TrainerRecord memory r = market.getTrainer(id, stranger);
        vm.assertFalse(r.enrolled, "unknown account is not enrolled");
        vm.assertEq(uint256(r.stake), 0, "no stake");
    }

    // ================================================================== eviction and slashing

    function test_closeRound_singleMiss_notEvicted_succeeds() public {
        uint256 id = _postAndStart();
        uint256 mask = _commitExcept(id, 0, trainers[1]);
        _warpPastDeadline(id);
        _prepareQuorum(id, 0, mask);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RoundMissed(id, 0, trainers[1], 1);
        _closeQuorum(id, 0, mask);

        TrainerRecord memory r = market.getTrainer(id, trainers[1]);
        vm.assertFalse(r.evicted, "one miss is tolerated (maxMissedRounds = 1)");
        vm.assertEq(uint256(r.missed), 1, "missed");
        vm.assertEq(uint256(r.consecutiveMissed), 1, "consecutive");
        vm.assertEq(uint256(r.stake), STAKE, "no slash");
        vm.assertEq(r.shardMask, MASK4_1, "shards unchanged");
        vm.assertEq(uint256(market.getTrainer(id, trainers[0]).missed), 0, "committer did not miss");
    }

    function test_evict_consecutiveMisses_slashesAndRebalances_succeeds() public {
        uint256 id = _postAndStart();
        _roundWithout(id, 0, trainers[1]);
        uint256 escrowBefore = market.escrowOf(id);
        uint256 poolBefore = market.getTaskState(id).rewardPool;
        uint256 slash = (uint256(STAKE) * SLASH_BPS) / 10_000;
        vm.assertEq(slash, STAKE / 4, "25% of the stake");

        uint256 mask = _commitExcept(id, 1, trainers[1]);
        _warpPastDeadline(id);
        vm.recordLogs();
        _prepareQuorum(id, 1, mask);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RoundMissed(id, 1, trainers[1], 2);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.TrainerEvicted(id, trainers[1], 1);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.StakeSlashed(id, trainers[1], slash, STAKE - slash);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ShardsAssigned(id, trainers[0], 0, MASK3_0);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ShardsAssigned(id, trainers[2], 2, MASK3_1);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ShardsAssigned(id, trainers[3], 3, MASK3_2);
        _closeQuorum(id, 1, mask);
        Vm.Log[] memory logs = vm.getRecordedLogs();

        // Exactly the three remaining trainers got new shards, and together they cover all of them.
        bytes32 topic = ISynclineEvents.ShardsAssigned.selector;
        vm.assertEq(_countLogs(logs, topic), 3, "ShardsAssigned for the 3 remaining trainers only");
        uint256 union;
        for (uint256 i = 0; i < logs.length; ++i) {
            if (logs[i].emitter != address(market) || logs[i].topics[0] != topic) continue;
            address who = address(uint160(uint256(logs[i].topics[2])));
            vm.assertTrue(who != trainers[1], "evicted trainer gets no shards");
            (, uint256 m) = abi.decode(logs[i].data, (uint16, uint256));
            vm.assertEq(union & m, 0, "disjoint");
            union |= m;
        }
        vm.assertEq(union, _fullMask(SHARDS), "covers every shard");

        TrainerRecord memory r = market.getTrainer(id, trainers[1]);
        vm.assertTrue(r.evicted, "evicted");
        vm.assertEq(r.shardMask, 0, "no shards");
        vm.assertEq(uint256(r.stake), STAKE - slash, "remaining stake");
        vm.assertEq(uint256(r.slashed), slash, "slashed");
        vm.assertEq(uint256(r.missed), 2, "missed");
        TaskState memory t = market.getTaskState(id);
        vm.assertEq(uint256(t.active), 3, "active");
        vm.assertEq(uint256(t.enrolled), 4, "enrolled unchanged");
        vm.assertEq(t.rewardPool, poolBefore + slash, "slash goes to the pool");
        vm.assertEq(t.stakeHeld, 4 * uint256(STAKE) - slash, "stakeHeld");
        vm.assertEq(market.escrowOf(id), escrowBefore, "slash and fees stay in the task escrow");
        _assertShardPartition(id);
    }

    function test_evict_evictedCannotCommit_reverts() public {
        uint256 id = _postAndStart();
        _roundWithout(id, 0, trainers[1]);
        _roundWithout(id, 1, trainers[1]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotActiveTrainer.selector, id, trainers[1]));
        _commitSigned(trainers[1], _rawCommitment(id, 2, 1, bytes32(uint256(1)), bytes32(uint256(2))));
    }

    function test_evict_rebalancedWeightsAtCommit_succeeds() public {
        uint256 id = _postAndStart();
        _roundWithout(id, 0, trainers[1]);
        _roundWithout(id, 1, trainers[1]);
        _commitAll(id, 2);
        vm.assertEq(uint256(court.getSubmission(id, 2, 0).weight), 3, "fragment 0 weight after rebalance");
        vm.assertEq(uint256(court.getSubmission(id, 2, 2).weight), 3, "fragment 2 weight after rebalance");
        vm.assertEq(uint256(court.getSubmission(id, 2, 3).weight), 4, "fragment 3 weight after rebalance");
        vm.assertEq(uint256(court.getSubmission(id, 0, 3).weight), 3, "round 0 weight kept");
        vm.assertEq(uint256(court.getSubmission(id, 0, 2).weight), 2, "round 0 weight kept");
    }

    function test_evict_interruptedMisses_notEvicted_succeeds() public {
        uint256 id = _postAndStart();
        _roundWithout(id, 0, trainers[2]);
        _runRound(id, 1);
        vm.assertEq(uint256(market.getTrainer(id, trainers[2]).consecutiveMissed), 0, "commit resets the streak");
        _roundWithout(id, 2, trainers[2]);
        TrainerRecord memory r = market.getTrainer(id, trainers[2]);
        vm.assertFalse(r.evicted, "never more than one consecutive miss");
        vm.assertEq(uint256(r.missed), 2, "two misses in total");
        vm.assertEq(uint256(r.consecutiveMissed), 1, "streak of one");
        vm.assertEq(uint256(r.slashed), 0, "no slash");
    }

    function test_evict_zeroMaxMissed_firstMiss_succeeds() public {
        TaskSpec memory s = _defaultSpec();
        s.maxMissedRounds = 0;
        uint256 id = _post(s, POOL);
        _bondAll(id);
        _enrollMany(id, MAX_TRAINERS);
        _roundWithout(id, 0, trainers[3]);
        TrainerRecord memory r = market.getTrainer(id, trainers[3]);
        vm.assertTrue(r.evicted, "evicted on the first miss");
        vm.assertEq(uint256(r.slashed), STAKE / 4, "slashed");
        _assertShardPartition(id);
    }

    function test_evict_fullSlash_succeeds() public {
        TaskSpec memory s = _defaultSpec();
        s.evictionSlashBps = 10_000;
        uint256 id = _post(s, POOL);
        _bondAll(id);
        _enrollMany(id, MAX_TRAINERS);
        _roundWithout(id, 0, trainers[0]);
        uint256 mask = _commitExcept(id, 1, trainers[0]);
        _warpPastDeadline(id);
        _prepareQuorum(id, 1, mask);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.StakeSlashed(id, trainers[0], STAKE, 0);
        _closeQuorum(id, 1, mask);
        vm.assertEq(uint256(market.getTrainer(id, trainers[0]).stake), 0, "whole stake slashed");
        vm.assertEq(market.getTaskState(id).rewardPool, POOL + STAKE, "pool got the whole stake");
    }

    function test_evict_zeroSlash_noSlashEvent_succeeds() public {
        TaskSpec memory s = _defaultSpec();
        s.evictionSlashBps = 0;
        uint256 id = _post(s, POOL);
        _bondAll(id);
        _enrollMany(id, MAX_TRAINERS);
        _roundWithout(id, 0, trainers[0]);
        uint256 mask = _commitExcept(id, 1, trainers[0]);
        _warpPastDeadline(id);
        vm.recordLogs();
        _finalize(id, 1, mask);
        Vm.Log[] memory logs = vm.getRecordedLogs();
        vm.assertEq(_countLogs(logs, ISynclineEvents.TrainerEvicted.selector), 1, "evicted");
        vm.assertEq(_countLogs(logs, ISynclineEvents.StakeSlashed.selector), 0, "nothing slashed, no event");
        vm.assertEq(uint256(market.getTrainer(id, trainers[0]).stake), STAKE, "stake intact");
        vm.assertEq(market.getTaskState(id).rewardPool, POOL, "pool unchanged");
    }

    function test_evict_onCarryForward_succeeds() public {
        uint256 id = _postAndStart();
        _commitExcept(id, 0, trainers[2]);
        _warpPastGrace(id);
        market.carryForward(id, 0);
        _commitExcept(id, 1, trainers[2]);
        _warpPastGrace(id);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.TrainerEvicted(id, trainers[2], 1);
        market.carryForward(id, 1);
        vm.assertTrue(market.getTrainer(id, trainers[2]).evicted, "carried rounds count as misses too");
        _assertShardPartition(id);
    }

    function test_evict_allButOne_thenTheLastMissesAlone_succeeds() public {
        uint256 id = _postAndStart();
        // Only trainers[0] commits: the other three miss rounds 0 and 1 and are evicted.
        for (uint32 r = 0; r < 2; ++r) {
            _commit(id, r, trainers[0]);
            _warpPastGrace(id);
            market.carryForward(id, r);
        }
        vm.assertEq(uint256(market.getTaskState(id).active), 1, "one active trainer");
        // Now nobody commits: a round with no commitment at all is an outage, not a miss.
        _warpPastGrace(id);
        vm.recordLogs();
        market.carryForward(id, 2);
        Vm.Log[] memory logs = vm.getRecordedLogs();
        vm.assertEq(_countLogs(logs, ISynclineEvents.RoundMissed.selector), 0, "no miss in an empty round");
        vm.assertEq(_countLogs(logs, ISynclineEvents.TrainerEvicted.selector), 0, "the last trainer stays");
        TaskState memory t = market.getTaskState(id);
        vm.assertEq(uint256(t.active), 1, "still one active trainer");
        vm.assertEq(t.rewardPool, POOL + 3 * (STAKE / 4), "three slashes in the pool");
    }

    function testFuzz_evict_slashAmount(uint128 stake, uint16 bps) public {
        stake = uint128(bound(stake, 2, 1_000_000 ether));
        bps = uint16(bound(bps, 0, 10_000));
        TaskSpec memory s = _defaultSpec();
        s.trainerStake = stake;
        s.evictionSlashBps = bps;
        s.maxMissedRounds = 0;
        uint256 pool = _deterredPool(s, POOL);
        uint256 id = _post(s, pool);
        _bondAll(id);
        _enrollMany(id, MAX_TRAINERS);
        uint256 escrowBefore = market.escrowOf(id);
        uint256 mask = _commitExcept(id, 0, trainers[2]);
        _warpPastDeadline(id);
        _finalize(id, 0, mask);

        uint256 expected = (uint256(stake) * bps) / 10_000;
        TrainerRecord memory r = market.getTrainer(id, trainers[2]);
        vm.assertTrue(r.evicted, "evicted");
        vm.assertEq(uint256(r.slashed), expected, "slash = stake * bps / 1e4");
        vm.assertEq(uint256(r.stake) + r.slashed, stake, "slashed + stake == trainerStake");
        vm.assertLe(uint256(r.slashed), stake, "slash never exceeds the stake");
        TaskState memory t = market.getTaskState(id);
        vm.assertEq(t.rewardPool, pool + expected, "pool");
        vm.assertEq(t.stakeHeld, 4 * uint256(stake) - expected, "stakeHeld");
        vm.assertEq(market.escrowOf(id), escrowBefore, "value stays in the task");
    }
}
