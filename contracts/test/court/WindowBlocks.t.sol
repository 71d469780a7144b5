// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {CourtTestBase} from "./CourtTestBase.sol";
import {ISynclineEvents} from "../../src/ISynclineEvents.sol";
import {AggregationRule, ChallengeKind, ChallengeStatus, TaskStatus} from "../../src/SynclineTypes.sol";

/// @notice Issue 27 item 5: every window an honest party must meet has a minimum in blocks as well
/// as in seconds (`MIN_CHALLENGE_BLOCKS` = 50, 10 minutes of 12-second slots). A block producer
/// who skews timestamps forward (here: `vm.warp` with no new blocks) cannot close a response
/// window, the filing window or the seal's wait faster than the chain makes blocks.
contract WindowBlocksTest is CourtTestBase {
    /// @dev `SynclineStorage.MIN_CHALLENGE_BLOCKS` (internal there: no getter).
    uint64 internal constant MIN_CHALLENGE_BLOCKS = 50;

    uint256 internal taskId;

    function setUp() public override {
        super.setUp();
        taskId = _startRule(AggregationRule.Mean);
        _commitAll(taskId, 0, ALL);
        _finalize(taskId, 0, keccak256("state-0"), ALL);
    }

    /// An accused trainer's response window lasts `MIN_CHALLENGE_BLOCKS / 2` blocks whatever the
    /// timestamps say: a claim cannot be expired (convicting the silent accused) before, and the
    /// accused can still answer; one block later its silence convicts.
    function test_responseWindow_lastsItsBlocks() public {
        uint256 opened = block.number;
        uint256 id = _challengeTraining(taskId, 0, 3, 9);
        (uint64 respondBy,,,, uint64 respondByBlock) = court.availabilityDemand(id);
        vm.assertEq(respondByBlock, opened + MIN_CHALLENGE_BLOCKS / 2, "half the minimum in blocks");
        // the producer skews time past the response window and the whole claim: no block yet
        vm.warp(court.getChallenge(id).deadline + 1);
        vm.prank(stranger);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineChallengeDeadline.selector, id, respondBy));
        court.expireChallenge(id);
        vm.roll(respondByBlock);
        vm.prank(stranger);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineChallengeDeadline.selector, id, respondBy));
        court.expireChallenge(id);
        // the last block of the window: the accused still answers (and is not convicted by silence)
        uint256 other = _challengeTraining(taskId, 0, 2, 9);
        (,,,, uint64 otherBlock) = court.availabilityDemand(other);
        vm.roll(otherBlock);
        vm.warp(block.timestamp + 1 days);
        vm.prank(trainers[2]);
        court.answerTraining(other);
        // one block past: the silent accused is convicted
        vm.roll(respondByBlock + 1);
        vm.prank(stranger);
        court.expireChallenge(id);
        _assertChallenge(id, ChallengeKind.TrainingFraud, ChallengeStatus.Upheld, STAKE);
        vm.assertTrue(market.getTrainer(taskId, trainers[3]).evicted, "the silent accused is evicted");
        vm.assertFalse(market.getTrainer(taskId, trainers[2]).evicted, "the one that answered is not");
        _assertMoney();
    }

    /// Once the window has passed in time but not in blocks, an answer is still accepted; past both,
    /// it is refused.
    function test_answerTraining_closedOnlyPastTimeAndBlocks() public {
        uint256 id = _challengeTraining(taskId, 0, 3, 9);
        (uint64 respondBy,,,, uint64 respondByBlock) = court.availabilityDemand(id);
        vm.roll(respondByBlock + 1); // blocks past, time not: open
        vm.warp(respondBy);
        uint256 snap = vm.snapshotState();
        vm.prank(trainers[3]);
        court.answerTraining(id);
        vm.revertToState(snap);
        vm.warp(respondBy + 1); // both past: closed
        vm.prank(trainers[3]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineAvailabilityClosed.selector, id, respondBy));
        court.answerTraining(id);
    }

    /// A claim against a closed round may be filed until both `challengeWindow` seconds and
    /// `MIN_CHALLENGE_BLOCKS` blocks have passed since it closed.
    function test_filingWindow_lastsItsBlocks() public {
        uint64 closedAt = market.getRound(taskId, 0).closedAt;
        uint64 closedBlock = market.getRound(taskId, 0).closedBlock;
        vm.assertEq(closedBlock, block.number, "the close's block is recorded");
        uint64 until = closedAt + CHALLENGE_WINDOW;
        vm.warp(until + 1 days); // time long past, blocks not
        vm.roll(closedBlock + MIN_CHALLENGE_BLOCKS);
        uint256 id = _challengeTraining(taskId, 0, 3, 9);
        vm.assertEq(uint256(court.getChallenge(id).status), uint256(ChallengeStatus.Open), "filed in the last block");
        vm.roll(closedBlock + MIN_CHALLENGE_BLOCKS + 1);
        vm.prank(challenger);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineChallengeWindowClosed.selector, taskId, 0, until));
        court.challengeTraining{value: CHALLENGE_BOND}(taskId, 0, 2, 9);
    }

    /// The task seals only once its last round's filing window has passed in blocks too.
    function test_seal_waitsForTheBlocks() public {
        _commitAll(taskId, 1, ALL);
        _finalize(taskId, 1, keccak256("state-1"), ALL);
        _assertStatus(taskId, TaskStatus.AwaitingSeal, "run over");
        uint64 until = market.getTaskState(taskId).lastClosedAt + CHALLENGE_WINDOW;
        uint64 lastBlock = market.getTaskState(taskId).lastClosedBlock;
        vm.assertEq(lastBlock, block.number, "the last close's block is recorded");
        vm.warp(until + 1 days);
        vm.roll(lastBlock + MIN_CHALLENGE_BLOCKS - 1);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineChallengeWindowOpen.selector, taskId, until));
        market.seal(taskId);
        vm.roll(lastBlock + MIN_CHALLENGE_BLOCKS);
        _seal(taskId);
    }

    /// Fuzz: whatever timestamps a producer sets, a silent accused is never convicted before
    /// `MIN_CHALLENGE_BLOCKS / 2` blocks have passed, nor before half the window in time.
    function testFuzz_silence_convictsOnlyPastTimeAndBlocks(uint32 dt, uint8 dBlocks) public {
        uint256 opened = block.number;
        uint64 openedAt = uint64(block.timestamp);
        uint256 id = _challengeTraining(taskId, 0, 3, 9);
        vm.warp(uint256(openedAt) + dt);
        vm.roll(opened + dBlocks);
        bool pastTime = uint256(dt) > CHALLENGE_WINDOW / 2;
        bool pastBlocks = uint256(dBlocks) > MIN_CHALLENGE_BLOCKS / 2;
        vm.prank(stranger);
        if (!(pastTime && pastBlocks)) vm.expectRevert();
        court.expireChallenge(id);
        if (pastTime && pastBlocks) {
            _assertChallenge(id, ChallengeKind.TrainingFraud, ChallengeStatus.Upheld, STAKE);
        }
    }
}
