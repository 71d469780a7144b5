// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "./base/Vm.sol";

import {SynclineTest} from "./base/SynclineTest.sol";
import {Vm} from "./base/Vm.sol";
import {ISynclineEvents} from "../src/ISynclineEvents.sol";
import {
    TaskState,
    WitnessRecord,
    RoundRecord,
    RoundStatus,
    Commitment,
    TrainingReceipt
} from "../src/SynclineTypes.sol";

/// @notice Early close (issue 12): a round may be finalized before its deadline only once every
/// active (enrolled, non-evicted) trainer has committed; otherwise the deadline rule holds.
contract EarlyCloseTest is SynclineTest {
    uint256 internal constant ALL = 0xf; // MAX_TRAINERS = 4 fragments

    uint256 internal id;

    function setUp() public override {
        super.setUp();
        id = _postAndStart();
    }

    /// @dev The trainers whose fragment bit is set in `mask` commit for `round`.
    function _commitMask(uint256 taskId, uint32 round, uint256 mask) internal {
        address[] memory ts = market.getTrainers(taskId);
        for (uint256 i = 0; i < ts.length; ++i) {
            if (mask >> i & 1 == 1) _commit(taskId, round, ts[i]);
        }
    }

    function _expectStillOpen(uint256 taskId, uint32 round) internal {
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineRoundStillOpen.selector, taskId, round, uint64(_deadline(taskId))
            )
        );
    }

    /// @dev `trainer` signs two different commitments for `round` and a challenger proves the
    /// equivocation: the trainer is slashed and evicted.
    function _convict(uint256 taskId, uint32 round, address trainer) internal {
        uint16 f = market.getTrainer(taskId, trainer).fragment;
        Commitment memory a = _commitment(taskId, round, f);
        Commitment memory b = _commitment(taskId, round, f);
        b.payloadHash = keccak256("another payload");
        bytes memory sa = _signC(trainer, a);
        bytes memory sb = _signC(trainer, b);
        vm.prank(stranger);
        court.proveTrainerEquivocation{value: CHALLENGE_BOND}(a, sa, b, sb);
    }

    // ================================================================== the rule

    function test_earlyClose_allCommitted_finalizesBeforeDeadline_succeeds() public {
        uint64 opened = market.getTaskState(id).roundOpenedAt;
        warpTo(opened + 10 minutes);
        uint256 mask = _commitAll(id, 0);
        warpTo(opened + 12 minutes);
        uint64 now_ = uint64(block.timestamp);
        vm.assertLt(now_, _deadline(id), "before the deadline");

        _prepareQuorum(id, 0, mask);
        vm.expectEmit(true, true, true, true, address(market));
        bytes32 root = _stateRoot(id, 0);
        bytes32 agg = _aggRoot(id, 0);
        emit ISynclineEvents.RoundFinalized(id, 0, _result(root, agg, mask), root, agg, mask);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RoundOpened(id, 1, now_, now_ + ROUND_DURATION);
        _closeQuorum(id, 0, mask);

        RoundRecord memory rr = market.getRound(id, 0);
        vm.assertEq(uint256(rr.status), uint256(RoundStatus.Finalized), "finalized early");
        vm.assertEq(uint256(rr.openedAt), opened, "openedAt");
        vm.assertEq(uint256(rr.closedAt), now_, "closed when the quorum formed");
        TaskState memory t = market.getTaskState(id);
        vm.assertEq(uint256(t.currentRound), 1, "next round open");
        vm.assertEq(uint256(t.roundOpenedAt), now_, "next round opened at once, with a full round duration");
        vm.assertEq(t.stateRoot, _stateRoot(id, 0), "state advanced");
        // Trainers start the next round at once.
        _commit(id, 1, trainers[0]);
        vm.assertEq(market.getRound(id, 1).committedMask, 1, "next round takes commitments");
    }

    function test_earlyClose_oneMissing_reverts() public {
        _commitMask(id, 0, 0x7);
        warpTo(_deadline(id));
        _expectStillOpen(id, 0);
        _vote(id, 0, witnesses[0], _stateRoot(id, 0), _aggRoot(id, 0), 0x7);
        vm.assertEq(court.voteOf(id, 0, witnesses[0]), bytes32(0), "no vote recorded");
        // The deadline rule still holds for the slow trainer: it commits at the deadline, then
        // the round has all its work.
        _commit(id, 0, trainers[3]);
        _finalize(id, 0, ALL);
        _assertRoundStatus(id, 0, RoundStatus.Finalized, "finalized once complete");
    }

    function test_earlyClose_nobodyCommitted_reverts() public {
        _expectStillOpen(id, 0);
        _vote(id, 0, witnesses[0], _stateRoot(id, 0), _aggRoot(id, 0), 0);
    }

    function test_earlyClose_lastCommitEmitsWorkComplete() public {
        vm.recordLogs();
        _commitMask(id, 0, 0x7);
        vm.assertEq(
            _countLogs(vm.getRecordedLogs(), ISynclineEvents.RoundWorkComplete.selector), 0, "incomplete: no event"
        );
        vm.assertFalse(court.roundWorkComplete(id, 0), "not complete");
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RoundWorkComplete(id, 0, ALL);
        _commit(id, 0, trainers[3]);
        vm.assertTrue(court.roundWorkComplete(id, 0), "complete");
        // A relayed copy of a commitment changes nothing and emits nothing.
        vm.recordLogs();
        _commit(id, 0, trainers[3]);
        vm.assertEq(vm.getRecordedLogs().length, 0, "relayed copy: no event");
    }

    function test_roundWorkComplete_views() public {
        vm.assertEq(court.activeMask(id), ALL, "four active trainers");
        vm.assertFalse(court.roundWorkComplete(id, 0), "nothing committed");
        _commitAll(id, 0);
        vm.assertTrue(court.roundWorkComplete(id, 0), "all committed");
        vm.assertFalse(court.roundWorkComplete(id, 1), "not the open round");
        _finalize(id, 0, ALL);
        vm.assertFalse(court.roundWorkComplete(id, 0), "closed round");
        vm.assertFalse(court.roundWorkComplete(id, 1), "new round: nothing committed");

        uint256 enrolling = _postDefault();
        vm.assertFalse(court.roundWorkComplete(enrolling, 0), "not running");
        vm.assertEq(court.activeMask(enrolling), 0, "nobody enrolled");
        _enroll(enrolling, trainers[0]);
        vm.assertEq(court.activeMask(enrolling), 1, "one enrolled");

        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, 99));
        court.roundWorkComplete(99, 0);
    }

    // ================================================================== evicted trainers

    /// A trainer evicted for missed rounds does not block the early close of later rounds.
    function test_earlyClose_evictedForMissedRounds_doesNotBlock_succeeds() public {
        // MAX_MISSED = 1: trainer 3 misses rounds 0 and 1 and is evicted when round 1 closes.
        for (uint32 r = 0; r < 2; ++r) {
            _commitMask(id, r, 0x7);
            _warpPastDeadline(id);
            _finalize(id, r, 0x7);
        }
        vm.assertTrue(market.getTrainer(id, trainers[3]).evicted, "evicted");
        vm.assertEq(court.activeMask(id), 0x7, "three active");
        _commitMask(id, 2, 0x3);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RoundWorkComplete(id, 2, 0x7);
        _commit(id, 2, trainers[2]);
        _finalize(id, 2, 0x7);
        _assertRoundStatus(id, 2, RoundStatus.Finalized, "closed early without the evicted trainer");
    }

    /// The eviction of the last trainer still to commit (a proven fault) completes the round.
    function test_earlyClose_convictedUncommittedTrainer_completesRound_succeeds() public {
        _commitMask(id, 0, 0x7);
        vm.assertFalse(court.roundWorkComplete(id, 0), "trainer 3 still to commit");
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RoundWorkComplete(id, 0, 0x7);
        _convict(id, 0, trainers[3]);
        vm.assertTrue(court.roundWorkComplete(id, 0), "complete without the evicted trainer");
        _finalize(id, 0, 0x7);
        _assertRoundStatus(id, 0, RoundStatus.Finalized, "closed early");
    }

    /// A committed trainer that is evicted stops counting; the active trainers still to commit
    /// still block the early close.
    function test_earlyClose_convictedCommittedTrainer_othersStillBlock_reverts() public {
        _commitMask(id, 0, 0x3); // trainers 0 and 1
        vm.recordLogs();
        _convict(id, 0, trainers[0]);
        vm.assertEq(_countLogs(vm.getRecordedLogs(), ISynclineEvents.RoundWorkComplete.selector), 0, "no event");
        vm.assertEq(court.activeMask(id), 0xe, "trainer 0 inactive");
        _commit(id, 0, trainers[2]);
        // committedMask = 0x7 and three trainers are active, but trainer 3 has not committed.
        vm.assertFalse(court.roundWorkComplete(id, 0), "trainer 3 still to commit");
        _expectStillOpen(id, 0);
        _vote(id, 0, witnesses[0], _stateRoot(id, 0), _aggRoot(id, 0), 0x6);
        _commit(id, 0, trainers[3]);
        vm.assertTrue(court.roundWorkComplete(id, 0), "complete");
        _finalize(id, 0, 0xe);
        _assertRoundStatus(id, 0, RoundStatus.Finalized, "closed early");
    }

    /// An eviction for missed rounds, made while a round closes, emits no work-complete event for
    /// the closing round (its status is already set).
    function test_earlyClose_evictionAtClose_emitsNothing() public {
        _commitMask(id, 0, 0x7);
        _warpPastDeadline(id);
        _finalize(id, 0, 0x7);
        _commitMask(id, 1, 0x7);
        _warpPastDeadline(id);
        vm.recordLogs();
        _finalize(id, 1, 0x7); // evicts trainer 3
        Vm.Log[] memory logs = vm.getRecordedLogs();
        vm.assertEq(_countLogs(logs, ISynclineEvents.TrainerEvicted.selector), 1, "evicted");
        vm.assertEq(_countLogs(logs, ISynclineEvents.RoundWorkComplete.selector), 0, "no work-complete event");
        vm.assertFalse(court.roundWorkComplete(id, 2), "round 2: nothing committed yet");
    }

    // ================================================================== what does not change

    /// Early votes that disagree leave the round open; carry-forward still waits for the grace window.
    function test_earlyClose_noQuorum_carryForwardStillWaits() public {
        _commitAll(id, 0);
        _vote(id, 0, witnesses[0], _stateRoot(id, 0), _aggRoot(id, 0), ALL);
        _vote(id, 0, witnesses[1], keccak256("other"), _aggRoot(id, 0), ALL);
        _assertRoundStatus(id, 0, RoundStatus.Pending, "no quorum yet");
        uint64 earliest = uint64(_deadline(id)) + GRACE;
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineGraceWindowOpen.selector, id, uint32(0), earliest)
        );
        market.carryForward(id, 0);
        // The third witness completes a quorum early.
        _vote(id, 0, witnesses[2], _stateRoot(id, 0), _aggRoot(id, 0), ALL);
        _assertRoundStatus(id, 0, RoundStatus.Finalized, "finalized early by 2 of 3");
        WitnessRecord memory w1 = market.getWitness(id, witnesses[1]);
        vm.assertEq(uint256(w1.dissents), 1, "dissent recorded");
    }

    /// Honest payouts are the same whether the rounds close early or at their deadlines.
    function test_earlyClose_honestPayoutsUnchanged() public {
        uint256 late = _postAndStart();
        for (uint32 r = 0; r < ROUNDS; ++r) {
            uint256 mask = _commitAll(id, r);
            _finalize(id, r, mask); // early: no time passes
            vm.assertEq(uint256(market.getRound(id, r).closedAt), T0, "closed early");
        }
        _runAllRounds(late); // each round at its deadline
        _warpToSeal(late);
        market.seal(id);
        market.seal(late);
        TrainingReceipt memory a = _receipt(id);
        TrainingReceipt memory b = _receipt(late);
        vm.assertEq(uint256(a.roundsFinalized), ROUNDS, "all rounds finalized early");
        vm.assertEq(a.sponsorRefund, b.sponsorRefund, "sponsor refund");
        for (uint256 i = 0; i < a.trainers.length; ++i) {
            vm.assertEq(a.trainers[i].reward, b.trainers[i].reward, "reward");
            vm.assertEq(a.trainers[i].stakeRefund, b.trainers[i].stakeRefund, "stake refund");
            vm.assertEq(uint256(a.trainers[i].accepted), ROUNDS, "accepted every round");
            vm.assertEq(uint256(a.trainers[i].missed), 0, "missed nothing");
        }
        for (uint256 i = 0; i < a.witnesses.length; ++i) {
            vm.assertEq(a.witnesses[i].fees, b.witnesses[i].fees, "witness fees");
            vm.assertEq(a.witnesses[i].slashed, 0, "no witness slashed for voting early");
        }
    }

    // ================================================================== fuzz

    /// Before the deadline a vote counts iff every active trainer committed; after it, always.
    function testFuzz_earlyClose_onlyWhenAllCommitted(uint256 committed, uint256 offset) public {
        committed = bound(committed, 0, ALL);
        uint64 opened = market.getTaskState(id).roundOpenedAt;
        offset = bound(offset, 0, 2 * uint256(ROUND_DURATION));
        _commitMask(id, 0, committed);
        warpTo(opened + offset);
        // Nobody committed: the round extends once (RoundDeadline.t.sol), and there is nothing to vote on.
        if (committed == 0) return;
        bool allowed = committed == ALL || offset > ROUND_DURATION;
        if (!allowed) {
            _expectStillOpen(id, 0);
            _vote(id, 0, witnesses[0], _stateRoot(id, 0), _aggRoot(id, 0), committed);
            vm.assertEq(court.voteOf(id, 0, witnesses[0]), bytes32(0), "no vote");
            return;
        }
        _finalize(id, 0, committed);
        _assertRoundStatus(id, 0, RoundStatus.Finalized, "finalized");
        vm.assertEq(uint256(market.getRound(id, 0).closedAt), opened + offset, "closedAt");
    }

    /// With a random set of trainers evicted by proven faults and a random set of the others
    /// committed, an early vote counts iff every non-evicted trainer committed.
    function testFuzz_earlyClose_evictedDoNotBlock(uint256 evicted, uint256 committed, uint256 offset) public {
        evicted = bound(evicted, 0, ALL - 1); // at least one trainer stays active
        committed = bound(committed, 0, ALL) & ~evicted;
        for (uint256 i = 0; i < MAX_TRAINERS; ++i) {
            if (evicted >> i & 1 == 1) _convict(id, 0, trainers[i]);
        }
        uint256 active = ALL & ~evicted;
        vm.assertEq(court.activeMask(id), active, "activeMask");
        _commitMask(id, 0, committed);
        uint64 opened = market.getTaskState(id).roundOpenedAt;
        warpTo(opened + bound(offset, 0, ROUND_DURATION));
        bool complete = committed == active;
        vm.assertEq(court.roundWorkComplete(id, 0), complete, "roundWorkComplete");
        if (!complete) {
            _expectStillOpen(id, 0);
            _vote(id, 0, witnesses[0], _stateRoot(id, 0), _aggRoot(id, 0), committed);
            return;
        }
        _finalize(id, 0, committed);
        _assertRoundStatus(id, 0, RoundStatus.Finalized, "finalized early");
    }
}
