// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "./base/Vm.sol";

import {SynclineTest} from "./base/SynclineTest.sol";
import {Vm} from "./base/Vm.sol";
import {ISynclineEvents} from "../src/ISynclineEvents.sol";
import {
    TaskState,
    TrainerRecord,
    WitnessRecord,
    RoundRecord,
    RoundStatus,
    TaskStatus,
    TrainingReceipt
} from "../src/SynclineTypes.sol";

/// @notice Issue 26 item 10: a machine too slow for the round. When nobody committed by a round's
/// deadline the deadline extends once (to `ROUND_EXTENSION` more round durations); commits in the
/// extension are recorded and counted late; a round nobody committed to by then closes empty: no
/// vote, no witness fee, no miss for anyone.
contract RoundDeadlineTest is SynclineTest {
    uint64 internal constant EXTENSION = 3;

    uint256 internal id;

    function setUp() public override {
        super.setUp();
        id = _postAndStart();
    }

    function _first(uint256 taskId) internal view returns (uint64) {
        return uint64(_deadline(taskId));
    }

    function _extended(uint256 taskId) internal view returns (uint64) {
        return _first(taskId) + EXTENSION * ROUND_DURATION;
    }

    function _lateError(uint256 taskId, uint32 round, uint64 deadline) internal pure returns (bytes memory) {
        return abi.encodeWithSelector(ISynclineEvents.SynclineSubmissionLate.selector, taskId, round, deadline);
    }

    // ================================================================== the extension

    function test_commitDeadline_beforeFirstDeadline_isRoundDuration() public view {
        vm.assertEq(court.commitDeadline(id), _first(id), "first deadline");
    }

    function test_noCommitByDeadline_extendsOnce_lateCommitRecorded() public {
        uint64 first = _first(id);
        uint64 extended = _extended(id);
        warpTo(first + 1);
        vm.assertEq(court.commitDeadline(id), extended, "extended once nobody committed");

        // Votes wait for the extended deadline (the round is still open).
        Vm.Log[] memory logs;
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineRoundStillOpen.selector, id, uint32(0), extended)
        );
        _vote(id, 0, witnesses[0], _stateRoot(id, 0), _aggRoot(id, 0), 0);

        address late = trainers[1];
        uint16 f = market.getTrainer(id, late).fragment;
        vm.recordLogs();
        _commit(id, 0, late);
        logs = vm.getRecordedLogs();
        vm.assertEq(_countLogs(logs, ISynclineEvents.SubmissionLate.selector), 1, "SubmissionLate");
        vm.assertEq(_countLogs(logs, ISynclineEvents.SubmissionCommitted.selector), 1, "still committed");
        RoundRecord memory rr = market.getRound(id, 0);
        vm.assertEq(rr.lateMask, uint256(1) << f, "lateMask");
        vm.assertEq(rr.committedMask, uint256(1) << f, "committedMask");
        vm.assertEq(_receipt(id).trainers[f].late, 1, "receipt: late");
        // The extension is not extended again by a late commit.
        vm.assertEq(court.commitDeadline(id), extended, "still the one extension");

        // Others may still commit late until the extended deadline, not after.
        warpTo(extended);
        _commit(id, 0, trainers[2]);
        warpTo(extended + 1);
        uint16 f3 = market.getTrainer(id, trainers[3]).fragment;
        bytes memory sig = _signC(trainers[3], _commitment(id, 0, f3));
        vm.expectRevert(_lateError(id, 0, extended));
        vm.prank(trainers[3]);
        market.commitSubmission(_commitment(id, 0, f3), sig);
    }

    function test_onTimeCommit_noExtension_laterCommitReverts() public {
        uint64 first = _first(id);
        warpTo(first);
        _commit(id, 0, trainers[0]);
        warpTo(first + 1);
        vm.assertEq(court.commitDeadline(id), first, "no extension: someone was on time");
        uint16 f = market.getTrainer(id, trainers[1]).fragment;
        bytes memory sig = _signC(trainers[1], _commitment(id, 0, f));
        vm.expectRevert(_lateError(id, 0, first));
        vm.prank(trainers[1]);
        market.commitSubmission(_commitment(id, 0, f), sig);
        vm.assertEq(market.getRound(id, 0).lateMask, 0, "nothing late");
    }

    // ================================================================== the empty round

    function test_emptyRound_noVote_carryForwardCloses_noFee_noMiss() public {
        uint64 extended = _extended(id);
        TaskState memory before = market.getTaskState(id);
        warpTo(extended + 1);
        // Witnesses do not vote on an empty round: there is nothing to vote on, and no fee.
        vm.expectRevert(ISynclineEvents.SynclineNothingToVote.selector);
        _vote(id, 0, witnesses[0], _stateRoot(id, 0), _aggRoot(id, 0), 0);
        vm.recordLogs();
        vm.prank(witnesses[0]);
        market.carryForward(id, 0);
        Vm.Log[] memory logs = vm.getRecordedLogs();
        vm.assertEq(_countLogs(logs, ISynclineEvents.SynclineRoundEmpty.selector), 1, "SynclineRoundEmpty");
        vm.assertEq(_countLogs(logs, ISynclineEvents.VoteCast.selector), 0, "no vote on an empty round");
        vm.assertEq(_countLogs(logs, ISynclineEvents.RoundMissed.selector), 0, "no miss");

        _assertRoundStatus(id, 0, RoundStatus.CarriedForward, "empty round carried");
        TaskState memory t = market.getTaskState(id);
        vm.assertEq(t.stateRoot, before.stateRoot, "state carried forward");
        vm.assertEq(t.currentRound, 1, "next round open");
        vm.assertEq(t.feesEarned, 0, "no fee earned");
        vm.assertEq(t.feeBudget, before.feeBudget, "budget untouched");
        vm.assertEq(t.roundsFinalized, 0, "nothing finalized");
        vm.assertEq(t.roundsCarried, 1, "one carried");
        for (uint256 i = 0; i < MAX_TRAINERS; ++i) {
            TrainerRecord memory r = market.getTrainer(id, trainers[i]);
            vm.assertEq(r.missed, 0, "no miss");
        }
        WitnessRecord memory w = market.getWitness(id, witnesses[0]);
        vm.assertEq(w.votes, 0, "no vote counted");
        vm.assertEq(w.fees, 0, "no fee");
    }

    function test_emptyRound_carryForward_waitsForExtendedDeadline() public {
        uint64 extended = _extended(id);
        warpTo(_first(id) + GRACE + 1); // the old earliest carry-forward
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineGraceWindowOpen.selector, id, uint32(0), extended)
        );
        market.carryForward(id, 0);
        warpTo(extended + 1);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.SynclineRoundEmpty(id, 0, market.getTaskState(id).stateRoot);
        vm.prank(stranger);
        market.carryForward(id, 0);
        _assertRoundStatus(id, 0, RoundStatus.CarriedForward, "carried");
    }

    function test_lateRound_finalizes_paidLikeAnyOther_receiptCountsLate() public {
        warpTo(_first(id) + 10);
        uint256 mask = _commitAll(id, 0); // all late: early close once complete
        _finalize(id, 0, mask);
        _assertRoundStatus(id, 0, RoundStatus.Finalized, "finalized");
        vm.assertEq(market.getTaskState(id).feesEarned, uint256(FEE) * THRESHOLD, "fees for a real round");
        for (uint32 r = 1; r < ROUNDS; ++r) {
            _runRound(id, r);
        }
        _warpAndSeal(id);
        TrainingReceipt memory rc = _receipt(id);
        for (uint256 i = 0; i < rc.trainers.length; ++i) {
            vm.assertEq(rc.trainers[i].late, 1, "one late commit each");
            vm.assertEq(rc.trainers[i].accepted, ROUNDS, "all accepted");
            vm.assertEq(rc.trainers[i].missed, 0, "no miss");
        }
    }

    // ================================================================== money, fuzzed

    /// @dev Per round a mode: 0 on time, 1 late (in the extension), 2 nobody commits. Honest
    /// trainers are paid pro rata for accepted work, witnesses a fee only for rounds with work,
    /// the sponsor gets back the rest; nobody's money is lost or created.
    function testFuzz_deadlineModes_moneyPath(uint8 m0, uint8 m1, uint8 m2, uint32 lateBy) public {
        uint8[3] memory modes = [m0 % 3, m1 % 3, m2 % 3];
        lateBy = uint32(bound(lateBy, 1, EXTENSION * ROUND_DURATION));
        uint256 balanceBefore = address(market).balance;
        uint256 worked = 0;
        uint256 lateRounds = 0;
        for (uint32 r = 0; r < ROUNDS; ++r) {
            uint64 first = _first(id);
            if (modes[r] == 2) {
                warpTo(_extended(id) + 1);
                market.carryForward(id, r);
                _assertRoundStatus(id, r, RoundStatus.CarriedForward, "empty");
                continue;
            }
            warpTo(modes[r] == 0 ? first : first + lateBy);
            uint256 mask = _commitAll(id, r);
            _finalize(id, r, mask);
            _assertRoundStatus(id, r, RoundStatus.Finalized, "finalized");
            worked += 1;
            if (modes[r] == 1) lateRounds += 1;
        }
        _warpAndSeal(id);
        TaskState memory t = market.getTaskState(id);
        TrainingReceipt memory rc = _receipt(id);
        uint256 rewards = 0;
        uint256 totalWeight = 0;
        for (uint256 i = 0; i < rc.trainers.length; ++i) {
            totalWeight += rc.trainers[i].acceptedWeight;
        }
        vm.assertEq(totalWeight, worked * SHARDS, "every shard of every worked round credited");
        for (uint256 i = 0; i < rc.trainers.length; ++i) {
            vm.assertEq(rc.trainers[i].late, lateRounds, "late count");
            vm.assertEq(rc.trainers[i].missed, 0, "no miss for anyone");
            vm.assertEq(rc.trainers[i].slashed, 0, "honest: no slash");
            vm.assertEq(rc.trainers[i].stakeRefund, STAKE, "stake back");
            vm.assertEq(rc.trainers[i].accepted, worked, "accepted per worked round");
            uint256 expected = worked == 0 ? 0 : POOL * rc.trainers[i].acceptedWeight / totalWeight;
            vm.assertEq(rc.trainers[i].reward, expected, "pro rata reward");
            rewards += rc.trainers[i].reward;
        }
        uint256 fees = 0;
        for (uint256 i = 0; i < rc.witnesses.length; ++i) {
            vm.assertEq(rc.witnesses[i].fees, i < THRESHOLD ? uint256(FEE) * worked : 0, "fee per worked round");
            vm.assertEq(rc.witnesses[i].slashed, 0, "honest witness");
            fees += rc.witnesses[i].fees;
        }
        uint256 budget = uint256(FEE) * THRESHOLD * ROUNDS;
        vm.assertEq(t.sponsorRefund, (POOL - rewards) + (budget - fees), "sponsor gets the rest");
        vm.assertEq(uint256(t.status), uint256(TaskStatus.Sealed), "sealed");
        // Every wei held is owed to someone: credits after the seal add up to the balance.
        address[] memory all = _allActors();
        uint256 credits = 0;
        for (uint256 i = 0; i < all.length; ++i) {
            credits += market.creditOf(all[i]);
        }
        vm.assertEq(credits, address(market).balance, "balance = credits");
        vm.assertEq(address(market).balance, balanceBefore, "no wei created or lost");
    }
}
