// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "../base/Vm.sol";

import {CourtTestBase} from "./CourtTestBase.sol";
import {TaskSpec, TaskState, TaskStatus, AggregationRule, ChallengeStatus} from "../../src/SynclineTypes.sol";

/// @dev Gas-metering cheatcodes (not in the shared minimal `Vm` interface): the long run that
/// sets a test up costs more than a test's gas limit; only the measured calls are metered.
interface VmGasMetering {
    function pauseGasMetering() external;
    function resumeGasMetering() external;
}

/// @notice Every call that closes a game fits in a 30M-gas block at the spec's maximal bounds:
/// 64 trainers, 32 witnesses (all voting every round, k = 32), hourly rounds and a 7-day
/// challenge window, so a ruling on round 0 lands ~170 finalized rounds later. Each closing call
/// is sent with at most the block's gas (less the transaction base cost) and must succeed; its
/// gas is measured with `gasleft()` and logged.
/// Run: `forge test --match-path contracts/test/court/ClosingGas.t.sol -vv`.
contract ClosingGasTest is CourtTestBase {
    event log_named_uint(string key, uint256 val);

    uint256 internal constant BLOCK_GAS = 30_000_000;
    /// Transaction base cost plus a generous calldata allowance.
    uint256 internal constant TX_OVERHEAD = 21_000 + 20_000;
    uint16 internal constant MAX_T = 64;
    uint256 internal constant MAX_W = 32;
    uint32 internal constant LONG_ROUNDS = 200;
    uint64 internal constant LONG_WINDOW = 7 days;

    uint256 internal taskId;
    uint256 internal allMask;

    function setUp() public override {
        super.setUp();
        for (uint256 i = witnesses.length; i < MAX_W; ++i) {
            witnesses.push(_actor(string.concat("witness", _itoa(i))));
        }
        for (uint256 i = trainers.length; i < MAX_T; ++i) {
            trainers.push(_actor(string.concat("trainer", _itoa(i))));
        }
        TaskSpec memory s = _spec(AggregationRule.Mean);
        s.witnesses = _witnessArray();
        s.threshold = uint8(MAX_W);
        s.minTrainers = MAX_T;
        s.maxTrainers = MAX_T;
        s.shardCount = 2 * MAX_T;
        s.rounds = LONG_ROUNDS;
        s.roundDuration = 1 hours;
        s.challengeWindow = LONG_WINDOW;
        s.maxMissedRounds = 1000;
        taskId = _start(s);
        allMask = type(uint64).max;
    }

    /// @dev Every trainer commits round `r`, every witness votes `mask` (k = all of them).
    function _longRound(uint32 r, uint256 mask) internal {
        VmGasMetering(address(vm)).pauseGasMetering();
        _commitAll(taskId, r, allMask);
        _pastDeadline(taskId);
        bytes32 root = keccak256(abi.encode("long-state", r));
        for (uint256 w = 0; w < MAX_W; ++w) {
            _vote(taskId, r, w, root, mask);
        }
        VmGasMetering(address(vm)).resumeGasMetering();
    }

    /// @dev Sends `data` to the market with the block's gas at most; returns the gas it used.
    function _closingCall(string memory what, bytes memory data) internal returns (uint256 used) {
        uint256 g = gasleft();
        (bool ok, bytes memory ret) = address(market).call{gas: BLOCK_GAS - TX_OVERHEAD}(data);
        used = g - gasleft();
        emit log_named_uint(what, used);
        if (!ok) {
            assembly {
                revert(add(ret, 32), mload(ret))
            }
        }
        vm.assertLe(used + TX_OVERHEAD, BLOCK_GAS, string.concat(what, " fits a block"));
    }

    /// A censorship ruling on round 0 voids every round finalized since: on the old code this
    /// one call needed ~45M gas, so the claim could never close and `seal` reverted forever. Now
    /// the ruling voids a first batch, `continueInvalidation` the rest, and the seal waits for it.
    function test_resolveCensorship_afterLongRun_fitsBlock() public {
        _longRound(0, allMask & ~uint256(1 << 63));
        uint256 id = _challengeCensorship(taskId, 0, 63);
        uint32 r = 1;
        while (block.timestamp <= court.getChallenge(id).deadline) {
            _longRound(r++, allMask);
        }
        emit log_named_uint("rounds finalized after round 0", r - 1);
        _closingCall("resolveCensorship (upheld, 32 slashed)", abi.encodeCall(court.resolveCensorship, (id)));
        vm.assertEq(uint256(court.getChallenge(id).status), uint256(ChallengeStatus.Upheld), "upheld");
        _assertMoney();

        // The rollback still holds the seal; anyone carries it on, one bounded batch a call.
        uint256 batches = 0;
        (, uint32 next, uint32 end) = court.invalidation(taskId);
        while (next < end) {
            vm.assertGt(market.getTaskState(taskId).openChallenges, 0, "a pending rollback holds the seal");
            _closingCall("continueInvalidation (one batch)", abi.encodeCall(court.continueInvalidation, (taskId)));
            (, next, end) = court.invalidation(taskId);
            ++batches;
        }
        emit log_named_uint("continueInvalidation batches", batches);
        TaskState memory t = market.getTaskState(taskId);
        vm.assertEq(t.openChallenges, 0, "rollback done");
        vm.assertEq(t.roundsInvalidated, r, "every round since round 0 voided");
        vm.assertEq(t.totalWeight, 0, "no reward left from voided rounds");
        _assertMoney();

        while (market.getTaskState(taskId).status == TaskStatus.Running) {
            _carry(taskId, market.getTaskState(taskId).currentRound);
        }
        _warpToSeal(taskId);
        _closingCall("seal (64 trainers, 32 witnesses)", abi.encodeCall(market.seal, (taskId)));
        vm.assertEq(market.escrowOf(taskId), 0, "sealed: nothing locked");
        _assertMoney();
    }

    /// The deciding referee vote convicts, evicts and rebalances 64 trainers' shards.
    function test_lastRefereeVote_fitsBlock() public {
        _longRound(0, allMask);
        uint256 id = _challengeTraining(taskId, 0, 5, 0);
        for (uint256 w = 0; w + 1 < MAX_W; ++w) {
            _referee(id, w, true);
        }
        vm.prank(witnesses[MAX_W - 1]);
        _closingCall("refereeVote (deciding guilty vote, 64 trainers)", abi.encodeCall(court.refereeVote, (id, true)));
        vm.assertEq(uint256(court.getChallenge(id).status), uint256(ChallengeStatus.Upheld), "upheld");
        _assertMoney();
    }

    /// An undecided training claim expires, paying the 31 referees that voted.
    function test_expireChallenge_fitsBlock() public {
        _longRound(0, allMask);
        uint256 id = _challengeTraining(taskId, 0, 5, 0);
        vm.prank(court.getChallenge(id).accused);
        court.answerTraining(id);
        for (uint256 w = 0; w + 1 < MAX_W; ++w) {
            _referee(id, w, true);
        }
        warpTo(court.getChallenge(id).deadline + 1);
        _closingCall("expireChallenge (31 referees paid)", abi.encodeCall(court.expireChallenge, (id)));
        _assertMoney();
    }

    /// An unanswered claim convicts the silent trainer (slash, evict, rebalance 63 trainers).
    function test_expireChallenge_unanswered_fitsBlock() public {
        _longRound(0, allMask);
        uint256 id = _challengeTraining(taskId, 0, 5, 0);
        (uint64 respondBy,,,,) = court.availabilityDemand(id);
        warpTo(respondBy + 1);
        _closingCall("expireChallenge (unanswered: conviction)", abi.encodeCall(court.expireChallenge, (id)));
        vm.assertEq(uint256(court.getChallenge(id).status), uint256(ChallengeStatus.Upheld), "upheld");
        _assertMoney();
    }

    /// A run that never fills refunds 63 trainers and 32 witness bonds in one call.
    function test_cancelUnderfilled_fitsBlock() public {
        TaskSpec memory s = _spec(AggregationRule.Mean);
        s.witnesses = _witnessArray();
        s.threshold = uint8(MAX_W);
        s.minTrainers = MAX_T;
        s.maxTrainers = MAX_T;
        s.shardCount = 2 * MAX_T;
        uint256 t2 = _post(s);
        _bondAll(t2);
        _enrollMany(t2, MAX_T - 1);
        warpTo(s.enrollmentDeadline + 1);
        _closingCall("cancelUnderfilled (63 trainers, 32 witnesses)", abi.encodeCall(market.cancelUnderfilled, (t2)));
        vm.assertEq(market.escrowOf(t2), 0, "cancelled: nothing locked");
        _assertMoney();
    }
}
