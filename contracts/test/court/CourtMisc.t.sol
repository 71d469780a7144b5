// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {CourtTestBase} from "./CourtTestBase.sol";
import {ISynclineEvents} from "../../src/ISynclineEvents.sol";
import {ISynclineCourt} from "../../src/ISynclineCourt.sol";
import {
    TaskStatus,
    AggregationRule,
    Commitment,
    Vote,
    AggregationProof,
    TrainingReceipt
} from "../../src/SynclineTypes.sol";

/// @notice The court module refuses direct calls, the market delegates exactly the court's
/// functions, and the views (`getChallenge`, `challengeCount`, `getReceipt`).
contract CourtMiscTest is CourtTestBase {
    function _directCalls() internal pure returns (bytes[] memory calls) {
        Commitment memory c;
        Vote memory v;
        AggregationProof memory p;
        calls = new bytes[](8);
        calls[0] = abi.encodeCall(ISynclineCourt.proveTrainerEquivocation, (c, "", c, ""));
        calls[1] = abi.encodeCall(ISynclineCourt.proveWitnessEquivocation, (v, "", v, ""));
        calls[2] = abi.encodeCall(ISynclineCourt.proveAggregationFraud, (p));
        calls[3] = abi.encodeCall(ISynclineCourt.challengeCensorship, (1, 0, 0));
        calls[4] = abi.encodeCall(ISynclineCourt.answerCensorship, (1, 0, "", new bytes32[](0)));
        calls[5] = abi.encodeCall(ISynclineCourt.resolveCensorship, (1));
        calls[6] = abi.encodeCall(ISynclineCourt.challengeTraining, (1, 0, 0, 0));
        calls[7] = abi.encodeCall(ISynclineCourt.refereeVote, (1, true));
    }

    /// Every state-changing court function called on the module itself (not through the
    /// market) reverts `SynclineCourtDirectCall`, whatever its arguments.
    function test_directCall_reverts() public {
        bytes[] memory calls = _directCalls();
        bytes memory expected = abi.encodeWithSelector(ISynclineEvents.SynclineCourtDirectCall.selector);
        for (uint256 i = 0; i < calls.length; ++i) {
            vm.prank(challenger);
            (bool ok, bytes memory ret) = courtModule.call(calls[i]);
            vm.assertFalse(ok, "direct call accepted");
            vm.assertEq(ret, expected, "SynclineCourtDirectCall");
        }
        (bool ok2, bytes memory ret2) = courtModule.call(abi.encodeCall(ISynclineCourt.expireChallenge, (1)));
        vm.assertFalse(ok2, "expire accepted");
        vm.assertEq(ret2, expected, "expire: SynclineCourtDirectCall");
        // With the bond attached, the payable ones refuse it too.
        for (uint256 i = 0; i < 3; ++i) {
            vm.prank(challenger);
            (bool ok, bytes memory ret) = courtModule.call{value: CHALLENGE_BOND}(calls[i]);
            vm.assertFalse(ok, "direct call with value accepted");
            vm.assertEq(ret, expected, "SynclineCourtDirectCall with value");
        }
        vm.prank(challenger);
        (bool ok3, bytes memory ret3) = courtModule.call{value: CHALLENGE_BOND}(calls[6]);
        vm.assertFalse(ok3, "challengeTraining with value");
        vm.assertEq(ret3, expected, "challengeTraining: SynclineCourtDirectCall");
        vm.assertEq(courtModule.balance, 0, "the module holds nothing");
    }

    /// Even with a live task on the market, the module's own storage is empty and untouched.
    function test_directCall_withLiveTask_reverts() public {
        uint256 taskId = _startRule(AggregationRule.Mean);
        _commitAll(taskId, 0, ALL);
        _finalize(taskId, 0, keccak256("s"), 0x0f);
        vm.prank(challenger);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineCourtDirectCall.selector));
        ISynclineCourt(courtModule).challengeCensorship{value: CHALLENGE_BOND}(taskId, 0, 4);
        vm.assertEq(ISynclineCourt(courtModule).challengeCount(), 0, "module storage unused");
        // Through the market the same call works.
        _challengeCensorship(taskId, 0, 4);
        vm.assertEq(court.challengeCount(), 1, "one challenge on the market");
    }

    function test_getChallenge_unknown_reverts() public {
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownChallenge.selector, 0));
        court.getChallenge(0);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownChallenge.selector, 1));
        court.getChallenge(1);
        vm.assertEq(court.challengeCount(), 0, "none");
    }

    /// A selector neither the market nor the court knows is refused (the court has no fallback).
    function test_unknownSelector_reverts() public {
        (bool ok,) = address(market).call(abi.encodeWithSelector(bytes4(0xdeadbeef), uint256(1)));
        vm.assertFalse(ok, "unknown selector accepted");
        (ok,) = address(market).call{value: 1}(hex"00");
        vm.assertFalse(ok, "short calldata with value accepted");
    }

    /// The market refuses a court address without code (its fallback would delegate to nothing).
    function test_marketNeedsCourtCode() public {
        bytes memory code =
            abi.encodePacked(vm.getCode("SynclineMarket.sol:SynclineMarket"), abi.encode(address(0x1234)));
        address deployed;
        assembly ("memory-safe") {
            deployed := create(0, add(code, 0x20), mload(code))
        }
        vm.assertEq(deployed, address(0), "deployed with a code-less court");
    }

    function test_getReceipt_lifecycle() public {
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, 1));
        court.getReceipt(1);
        uint256 taskId = _post(_spec(AggregationRule.Mean));
        TrainingReceipt memory r = court.getReceipt(taskId);
        vm.assertEq(uint256(r.status), uint256(TaskStatus.Enrolling), "enrolling");
        vm.assertEq(r.trainers.length, 0, "no trainers");
        vm.assertEq(r.witnesses.length, N_WITNESSES, "witnesses listed");
        vm.assertEq(r.witnesses[0].bond, 0, "not bonded yet");
        vm.assertEq(r.rewardPool, POOL, "pool");
        _bondAll(taskId);
        _enrollMany(taskId, N_TRAINERS);
        _commitAll(taskId, 0, ALL);
        _finalize(taskId, 0, keccak256("s0"), ALL);
        r = court.getReceipt(taskId);
        vm.assertEq(uint256(r.status), uint256(TaskStatus.Running), "running");
        vm.assertEq(r.trainers.length, N_TRAINERS, "trainers");
        vm.assertEq(r.trainers[0].stakeRefund, 0, "no refund while running");
        vm.assertEq(r.trainers[0].accepted, 1, "accepted");
        vm.assertEq(r.witnesses[0].bond, WITNESS_BOND, "bond posted");
        vm.assertEq(r.witnesses[0].fees, FEE, "fee");
        vm.assertEq(r.roundsFinalized, 1, "finalized");
        vm.assertEq(r.finalStateRoot, keccak256("s0"), "state root");
        _carry(taskId, 1);
        _seal(taskId);
        r = court.getReceipt(taskId);
        vm.assertEq(uint256(r.status), uint256(TaskStatus.Sealed), "sealed");
        vm.assertEq(r.trainers[0].stakeRefund, STAKE, "refund");
        vm.assertEq(r.trainers[0].reward, POOL / 5, "reward");
        vm.assertEq(r.rewardPool, POOL, "sealed pool");
        vm.assertEq(r.roundsCarried, 1, "carried");
        vm.assertEq(r.sponsorRefund, 2 * FEE, "unspent fee budget");
    }
}
