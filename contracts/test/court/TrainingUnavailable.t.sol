// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "../base/Vm.sol";

import {CourtTestBase} from "./CourtTestBase.sol";
import {ISynclineEvents} from "../../src/ISynclineEvents.sol";
import {AggregationRule, Vote, Challenge, ChallengeKind, ChallengeStatus} from "../../src/SynclineTypes.sol";

/// @notice Issue 27 items 1 and 7 on a 2-of-3 committee (bond 0.1 ETH): a trainer that answers a
/// training claim but never publishes the segment is convicted at the deadline on `Unavailable`
/// verdicts (`refereeUnavailable`); a claim that is not upheld costs its claimant at most the
/// replaying referees' fee, `bond / (2N)` each (at most half the bond).
contract TrainingUnavailableTest is CourtTestBase {
    uint256 internal taskId;
    bytes32 internal constant REASON_REFEREE = "referee-fee";
    /// What each replaying referee is paid of a claim that is not upheld: bond / (2N).
    uint256 internal constant SHARE = CHALLENGE_BOND / (2 * N_WITNESSES);

    function setUp() public override {
        super.setUp();
        taskId = _startRule(AggregationRule.Mean);
        _commitAll(taskId, 0, ALL);
        _finalize(taskId, 0, keccak256("state-0"), ALL);
    }

    /// A claim against fragment 3's segment 9, answered by its trainer.
    function _answered() internal returns (uint256 id) {
        id = _challengeTraining(taskId, 0, 3, 9);
        vm.prank(trainers[3]);
        court.answerTraining(id);
    }

    function _unavailable(uint256 id, uint256 w) internal {
        vm.prank(witnesses[w]);
        court.refereeUnavailable(id);
    }

    function _expectUnavailableRevert(uint256 id, address who, bytes memory err) internal {
        vm.prank(who);
        vm.expectRevert(err);
        court.refereeUnavailable(id);
    }

    function _unavailableVotes(uint256 id) internal view returns (uint16 n) {
        (,, n,,) = court.availabilityDemand(id);
    }

    function _expire(uint256 id) internal {
        warpTo(court.getChallenge(id).deadline + 1);
        vm.prank(stranger);
        court.expireChallenge(id);
    }

    // ------------------------------------------------------------------ conviction

    /// Answered, never published: two `Unavailable` verdicts convict at the deadline (not before),
    /// like a guilty verdict: slashed, evicted, the claimant paid bond + half the slash.
    function test_unavailable_convictsAtExpiry() public {
        uint256 id = _answered();
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RefereeUnavailable(id, witnesses[0]);
        _unavailable(id, 0);
        _unavailable(id, 1);
        vm.assertEq(_unavailableVotes(id), 2, "two standing Unavailable verdicts");
        vm.assertEq(uint256(court.getChallenge(id).status), uint256(ChallengeStatus.Open), "decided only at expiry");
        uint64 deadline = court.getChallenge(id).deadline;
        warpTo(deadline);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineChallengeDeadline.selector, id, deadline));
        court.expireChallenge(id);
        warpTo(deadline + 1);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.SegmentUnavailable(id, taskId, 0, 3, 2);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ChallengeResolved(id, taskId, ChallengeStatus.Upheld, STAKE, STAKE / 2);
        vm.prank(stranger);
        court.expireChallenge(id);
        _assertChallenge(id, ChallengeKind.TrainingFraud, ChallengeStatus.Upheld, STAKE);
        vm.assertTrue(market.getTrainer(taskId, trainers[3]).evicted, "evicted");
        vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND + STAKE / 2, "bond back and half the slash");
        vm.assertEq(market.creditOf(witnesses[0]), 0, "no fee for an Unavailable verdict");
        vm.assertEq(market.getTaskState(taskId).openChallenges, 0, "closed");
        _assertMoney();
    }

    /// One guilty replay and one `Unavailable` verdict also reach the threshold at the deadline.
    function test_unavailablePlusGuilty_convictsAtExpiry() public {
        uint256 id = _answered();
        _referee(id, 2, true);
        _unavailable(id, 0);
        vm.assertEq(uint256(court.getChallenge(id).status), uint256(ChallengeStatus.Open), "1 guilty < 2");
        _expire(id);
        _assertChallenge(id, ChallengeKind.TrainingFraud, ChallengeStatus.Upheld, STAKE);
        vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND + STAKE / 2, "upheld as today");
        _assertMoney();
    }

    /// One `Unavailable` verdict alone stays under the threshold: the claim expires.
    function test_oneUnavailable_expires() public {
        uint256 id = _answered();
        _unavailable(id, 1);
        _expire(id);
        _assertChallenge(id, ChallengeKind.TrainingFraud, ChallengeStatus.Expired, 0);
        vm.assertEq(market.getTrainer(taskId, trainers[3]).stake, STAKE, "trainer untouched");
        vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND, "nobody replayed: the whole bond back");
        _assertMoney();
    }

    // ------------------------------------------------------------------ replaced by a replay verdict

    /// The data showed up: an `Unavailable` verdict replaced by an innocent replay no longer counts,
    /// and the claim expires (no conviction); the replaying referee is paid bond / (2N).
    function test_unavailable_replacedByInnocent_noConviction() public {
        uint256 id = _answered();
        _unavailable(id, 0);
        _unavailable(id, 1);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RefereeVoted(id, witnesses[1], false);
        _referee(id, 1, false);
        vm.assertEq(_unavailableVotes(id), 1, "one Unavailable verdict left");
        // A replay verdict is final: no way back to Unavailable, nor a second replay.
        _expectUnavailableRevert(
            id, witnesses[1], abi.encodeWithSelector(ISynclineEvents.SynclineAlreadyRefereed.selector, id, witnesses[1])
        );
        vm.prank(witnesses[1]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineAlreadyRefereed.selector, id, witnesses[1]));
        court.refereeVote(id, true);
        _expire(id);
        _assertChallenge(id, ChallengeKind.TrainingFraud, ChallengeStatus.Expired, 0);
        vm.assertEq(market.getTrainer(taskId, trainers[3]).stake, STAKE, "trainer untouched");
        vm.assertFalse(market.getTrainer(taskId, trainers[3]).evicted, "not evicted");
        vm.assertEq(market.creditOf(witnesses[1]), SHARE, "the replaying referee paid bond / 2N");
        vm.assertEq(market.creditOf(witnesses[0]), 0, "no fee for an Unavailable verdict");
        vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND - SHARE, "the claimant gets the rest");
        _assertMoney();
    }

    /// Both `Unavailable` verdicts replaced by innocent replays: acquitted at once (2 innocent),
    /// the claimant loses 2 x bond / 6.
    function test_unavailable_replacedByInnocent_acquits() public {
        uint256 id = _answered();
        _unavailable(id, 0);
        _unavailable(id, 1);
        _referee(id, 0, false);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ChallengeResolved(id, taskId, ChallengeStatus.Rejected, 0, 0);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(taskId, witnesses[0], SHARE, REASON_REFEREE);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(taskId, witnesses[1], SHARE, REASON_REFEREE);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(taskId, challenger, CHALLENGE_BOND - 2 * SHARE, REASON_BOND);
        _referee(id, 1, false);
        vm.assertEq(_unavailableVotes(id), 0, "none left");
        _assertChallenge(id, ChallengeKind.TrainingFraud, ChallengeStatus.Rejected, 0);
        vm.assertEq(market.getTrainer(taskId, trainers[3]).stake, STAKE, "trainer untouched");
        _assertMoney();
    }

    /// An `Unavailable` verdict replaced by a guilty replay counts once, as guilty: with a second
    /// guilty replay the claim is upheld at once.
    function test_unavailable_replacedByGuilty_countsOnce() public {
        uint256 id = _answered();
        _unavailable(id, 0);
        _referee(id, 0, true);
        vm.assertEq(_unavailableVotes(id), 0, "replaced");
        vm.assertEq(court.getChallenge(id).guiltyVotes, 1, "one guilty");
        _referee(id, 1, true);
        _assertChallenge(id, ChallengeKind.TrainingFraud, ChallengeStatus.Upheld, STAKE);
        _assertMoney();
    }

    // ------------------------------------------------------------------ refused

    /// Before the accused answers, a failed fetch says nothing (its response window is running):
    /// refused. After the claim's deadline: refused. Twice: refused.
    function test_unavailable_beforeAnswer_afterDeadline_twice_revert() public {
        uint256 id = _challengeTraining(taskId, 0, 3, 9);
        uint256 silent = _challengeTraining(taskId, 0, 2, 0);
        _expectUnavailableRevert(
            id, witnesses[0], abi.encodeWithSelector(ISynclineEvents.SynclineTrainingNotAnswered.selector, id)
        );
        vm.prank(trainers[3]);
        court.answerTraining(id);
        _unavailable(id, 0);
        _expectUnavailableRevert(
            id, witnesses[0], abi.encodeWithSelector(ISynclineEvents.SynclineAlreadyRefereed.selector, id, witnesses[0])
        );
        // An unanswered claim never takes an Unavailable verdict (its silence alone convicts).
        warpTo(court.getChallenge(silent).openedAt + CHALLENGE_WINDOW / 2 + 1);
        _expectUnavailableRevert(
            silent, witnesses[0], abi.encodeWithSelector(ISynclineEvents.SynclineTrainingNotAnswered.selector, silent)
        );
        uint64 deadline = court.getChallenge(id).deadline;
        warpTo(deadline + 1);
        _expectUnavailableRevert(
            id, witnesses[1], abi.encodeWithSelector(ISynclineEvents.SynclineChallengeDeadline.selector, id, deadline)
        );
    }

    /// Only a bonded committee witness: a stranger, a trainer or a slashed witness is refused; a
    /// claim of another kind or an unknown one too.
    function test_unavailable_nonWitness_reverts() public {
        uint256 id = _answered();
        _expectUnavailableRevert(
            id, stranger, abi.encodeWithSelector(ISynclineEvents.SynclineNotWitness.selector, taskId, stranger)
        );
        _expectUnavailableRevert(
            id, trainers[0], abi.encodeWithSelector(ISynclineEvents.SynclineNotWitness.selector, taskId, trainers[0])
        );
        Vote memory a = Vote(taskId, 1, bytes32(0), keccak256("x"), keccak256("y"), 1, 0);
        Vote memory b = Vote(taskId, 1, bytes32(0), keccak256("x2"), keccak256("y"), 1, 0);
        bytes memory sa = _signV(witnesses[2], a);
        bytes memory sb = _signV(witnesses[2], b);
        vm.prank(stranger);
        uint256 equivocation = court.proveWitnessEquivocation{value: CHALLENGE_BOND}(a, sa, b, sb);
        _expectUnavailableRevert(
            id, witnesses[2], abi.encodeWithSelector(ISynclineEvents.SynclineWitnessUnbonded.selector, taskId, witnesses[2])
        );
        _expectUnavailableRevert(
            equivocation,
            witnesses[0],
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongChallengeKind.selector, equivocation, ChallengeKind.WitnessEquivocation
            )
        );
        _expectUnavailableRevert(
            99, witnesses[0], abi.encodeWithSelector(ISynclineEvents.SynclineUnknownChallenge.selector, 99)
        );
        vm.assertEq(_unavailableVotes(id), 0, "nothing counted");
    }

    // ------------------------------------------------------------------ item 7: the claimant's cost

    /// Acquitted after all three replayed (1 guilty, 2 innocent): each referee gets bond / 6, the
    /// claimant exactly half the bond back (the most it can lose).
    function test_acquittal_claimantLosesAtMostHalf() public {
        uint256 id = _answered();
        _referee(id, 2, true);
        _referee(id, 0, false);
        _referee(id, 1, false);
        _assertChallenge(id, ChallengeKind.TrainingFraud, ChallengeStatus.Rejected, 0);
        for (uint256 w = 0; w < N_WITNESSES; ++w) {
            vm.assertEq(market.creditOf(witnesses[w]), SHARE, "bond / 2N per replaying referee");
        }
        vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND - 3 * SHARE, "half the bond back");
        vm.assertGe(market.creditOf(challenger), CHALLENGE_BOND / 2, "at most half lost");
        _assertMoney();
    }

    /// Fuzz: any referee behaviour (none, guilty, innocent, Unavailable, Unavailable then a replay)
    /// on an answered claim, closed by the votes or at expiry. Not upheld: the claimant gets back the
    /// bond less bond / (2N) per replaying referee (>= half the bond). Upheld: bond + half the slash.
    function testFuzz_answeredClaim_claimantCost(uint16 acts, uint8 order) public {
        uint256 id = _answered();
        uint256[3][6] memory perms = [
            [uint256(0), 1, 2],
            [uint256(0), 2, 1],
            [uint256(1), 0, 2],
            [uint256(1), 2, 0],
            [uint256(2), 0, 1],
            [uint256(2), 1, 0]
        ];
        uint256[3] memory p = perms[order % 6];
        for (uint256 k = 0; k < 3; ++k) {
            if (court.getChallenge(id).status != ChallengeStatus.Open) break;
            uint256 act = (acts >> (3 * k)) % 6; // 0 none, 1 guilty, 2 innocent, 3 U, 4 U->guilty, 5 U->innocent
            uint256 w = p[k];
            if (act >= 3) _unavailable(id, w);
            if (act == 1 || act == 4) _referee(id, w, true);
            if (act == 2 || act == 5) _referee(id, w, false);
        }
        if (court.getChallenge(id).status == ChallengeStatus.Open) _expire(id);
        Challenge memory c = court.getChallenge(id);
        if (c.status == ChallengeStatus.Upheld) {
            vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND + STAKE / 2, "bond + bounty");
        } else {
            uint256 replays = uint256(c.guiltyVotes) + c.innocentVotes;
            vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND - replays * SHARE, "bond less the fees");
            vm.assertGe(market.creditOf(challenger), CHALLENGE_BOND / 2, "at most half the bond lost");
            vm.assertEq(market.getTrainer(taskId, trainers[3]).stake, STAKE, "not convicted");
        }
        _assertMoney();
    }
}
