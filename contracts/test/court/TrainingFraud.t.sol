// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "../base/Vm.sol";

import {CourtTestBase} from "./CourtTestBase.sol";
import {ISynclineEvents} from "../../src/ISynclineEvents.sol";
import {ISynclineCourt} from "../../src/ISynclineCourt.sol";
import {
    TaskSpec,
    TaskState,
    TaskStatus,
    AggregationRule,
    RoundStatus,
    TrainerRecord,
    Commitment,
    Vote,
    Challenge,
    ChallengeKind,
    ChallengeStatus
} from "../../src/SynclineTypes.sol";

/// @notice `challengeTraining`, `refereeVote`, `expireChallenge`: a 2-of-3 committee referees a
/// claim against an accepted submission (500 inner steps, checkpoints every 50: segments 0..10,
/// 10 being the derivation of the payload).
contract TrainingFraudTest is CourtTestBase {
    uint256 internal taskId;
    bytes32 internal constant REASON_REFEREE = "referee-fee";
    uint32 internal constant SEGMENTS = 10;

    function setUp() public override {
        super.setUp();
        taskId = _startRule(AggregationRule.Mean);
        _commitAll(taskId, 0, ALL);
        _finalize(taskId, 0, keccak256("state-0"), ALL);
    }

    function _challengeTraining(uint16 fragment, uint32 segment) internal returns (uint256) {
        return _challengeTraining(taskId, 0, fragment, segment);
    }

    function _expectChallengeRevert(uint256 task, uint32 round, uint16 fragment, uint32 segment, bytes memory err)
        internal
    {
        vm.prank(challenger);
        vm.expectRevert(err);
        court.challengeTraining{value: CHALLENGE_BOND}(task, round, fragment, segment);
    }

    function _expectRefereeRevert(uint256 id, address who, bool guilty, bytes memory err) internal {
        vm.prank(who);
        vm.expectRevert(err);
        court.refereeVote(id, guilty);
    }

    // ------------------------------------------------------------------ challenge

    function test_challengeTraining_opens() public {
        uint64 deadline = uint64(block.timestamp) + CHALLENGE_WINDOW;
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ChallengeOpened(
            1, taskId, 0, ChallengeKind.TrainingFraud, challenger, trainers[2], 2, 7, deadline
        );
        uint256 id = _challengeTraining(2, 7);
        Challenge memory c = court.getChallenge(id);
        vm.assertEq(uint256(c.status), uint256(ChallengeStatus.Open), "open");
        vm.assertEq(c.accused, trainers[2], "accused");
        vm.assertEq(c.segment, 7, "segment");
        vm.assertEq(c.fragment, 2, "fragment");
        vm.assertEq(market.getTaskState(taskId).openChallenges, 1, "open count");
        _assertMoney();
    }

    function test_challengeTraining_notAccepted_reverts() public {
        // Round 1: fragment 4 commits but is not accepted, fragment 3 does not commit.
        _commitAll(taskId, 1, 0x17);
        _finalize(taskId, 1, keccak256("state-1"), 0x07);
        uint16[3] memory frags = [uint16(3), 4, 999];
        for (uint256 i = 0; i < 3; ++i) {
            _expectChallengeRevert(
                taskId,
                1,
                frags[i],
                0,
                abi.encodeWithSelector(ISynclineEvents.SynclineNotAccepted.selector, taskId, 1, frags[i])
            );
        }
        // Revoked by an upheld challenge: nothing left to claim.
        uint256 id = _challengeTraining(1, 0);
        _referee(id, 0, true);
        _referee(id, 1, true);
        _expectChallengeRevert(
            taskId, 0, 1, 5, abi.encodeWithSelector(ISynclineEvents.SynclineNotAccepted.selector, taskId, 0, 1)
        );
    }

    function test_challengeTraining_segments() public {
        _challengeTraining(0, 0);
        _challengeTraining(0, SEGMENTS); // the payload derivation
        _expectChallengeRevert(
            taskId,
            0,
            0,
            SEGMENTS + 1,
            abi.encodeWithSelector(ISynclineEvents.SynclineBadSegment.selector, SEGMENTS + 1, SEGMENTS)
        );
        // 500 steps every 30: ceil(500 / 30) = 17 segments.
        TaskSpec memory s = _spec(AggregationRule.Mean);
        s.checkpointInterval = 30;
        uint256 task2 = _start(s);
        _commitAll(task2, 0, ALL);
        _finalize(task2, 0, keccak256("s"), ALL);
        _challengeTraining(task2, 0, 0, 17);
        _expectChallengeRevert(
            task2, 0, 0, 18, abi.encodeWithSelector(ISynclineEvents.SynclineBadSegment.selector, 18, 17)
        );
    }

    function testFuzz_challengeTraining_segment(uint32 segment) public {
        if (segment > SEGMENTS) {
            _expectChallengeRevert(
                taskId,
                0,
                1,
                segment,
                abi.encodeWithSelector(ISynclineEvents.SynclineBadSegment.selector, segment, SEGMENTS)
            );
        } else {
            uint256 id = _challengeTraining(1, segment);
            vm.assertEq(court.getChallenge(id).segment, segment, "segment");
        }
    }

    function test_challengeTraining_duplicate_reverts() public {
        uint256 id = _challengeTraining(2, 3);
        bytes32 key = keccak256(abi.encode(ChallengeKind.TrainingFraud, taskId, uint32(0), uint16(2), uint32(3)));
        _expectChallengeRevert(
            taskId, 0, 2, 3, abi.encodeWithSelector(ISynclineEvents.SynclineDuplicateChallenge.selector, key, id)
        );
        // Still a duplicate once it is resolved.
        warpTo(block.timestamp + CHALLENGE_WINDOW / 2);
        _referee(id, 0, false);
        _referee(id, 1, false);
        _expectChallengeRevert(
            taskId, 0, 2, 3, abi.encodeWithSelector(ISynclineEvents.SynclineDuplicateChallenge.selector, key, id)
        );
        // Another segment of the same submission is another claim.
        _challengeTraining(2, 4);
    }

    function test_challengeTraining_bondRoundWindowStatus_revert() public {
        vm.prank(challenger);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongBond.selector, 0, CHALLENGE_BOND));
        court.challengeTraining(taskId, 0, 0, 0);
        _expectChallengeRevert(
            taskId, 1, 0, 0, abi.encodeWithSelector(ISynclineEvents.SynclineRoundNotFinalized.selector, taskId, 1)
        );
        _carry(taskId, 1);
        _expectChallengeRevert(
            taskId, 1, 0, 0, abi.encodeWithSelector(ISynclineEvents.SynclineRoundNotFinalized.selector, taskId, 1)
        );
        uint64 until = market.getRound(taskId, 0).closedAt + CHALLENGE_WINDOW;
        warpTo(until + 1);
        _expectChallengeRevert(
            taskId,
            0,
            0,
            0,
            abi.encodeWithSelector(ISynclineEvents.SynclineChallengeWindowClosed.selector, taskId, 0, until)
        );
        _seal(taskId);
        _expectChallengeRevert(
            taskId,
            0,
            0,
            0,
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, taskId, TaskStatus.Sealed, TaskStatus.Running
            )
        );
    }

    // ------------------------------------------------------------------ upheld

    /// Two guilty votes: the trainer loses its whole stake, is evicted and loses the round's
    /// reward; the challenger gets bond + 50%; the seal pays everyone to the wei.
    function test_refereeVote_guiltyQuorum_upholds_andSettles() public {
        uint256 id = _challengeTraining(2, 4);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RefereeVoted(id, witnesses[0], true);
        _referee(id, 0, true);
        Challenge memory c = court.getChallenge(id);
        vm.assertEq(uint256(c.status), uint256(ChallengeStatus.Open), "one vote is not enough");
        vm.assertEq(c.guiltyVotes, 1, "guiltyVotes");

        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.StakeSlashed(taskId, trainers[2], STAKE, 0);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.TrainerEvicted(taskId, trainers[2], 0);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RewardRevoked(taskId, 0, trainers[2], 2);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ChallengeResolved(id, taskId, ChallengeStatus.Upheld, STAKE, STAKE / 2);
        _referee(id, 1, true);

        _assertChallenge(id, ChallengeKind.TrainingFraud, ChallengeStatus.Upheld, STAKE);
        TrainerRecord memory r = market.getTrainer(taskId, trainers[2]);
        vm.assertEq(r.stake, 0, "slashed to zero");
        vm.assertTrue(r.evicted, "evicted");
        vm.assertEq(r.acceptedWeight, 0, "reward revoked");
        TaskState memory t = market.getTaskState(taskId);
        vm.assertEq(t.openChallenges, 0, "closed");
        vm.assertEq(t.rewardPool, POOL + STAKE / 2, "pool keeps the other half");
        vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND + STAKE / 2, "challenger");
        // The third referee is too late to matter.
        _expectRefereeRevert(
            id,
            witnesses[2],
            false,
            abi.encodeWithSelector(ISynclineEvents.SynclineChallengeNotOpen.selector, id, ChallengeStatus.Upheld)
        );
        _assertMoney();

        uint256 rest = ALL & ~uint256(1 << 2);
        _commitAll(taskId, 1, rest);
        _finalize(taskId, 1, keccak256("state-1"), rest);
        _seal(taskId);
        uint256 pool = POOL + STAKE / 2;
        uint256 paid = _addTrainerPayouts(pool, [uint256(4), 5, 0, 4, 5], 1 << 2);
        _add(witnesses[0], 2 * FEE + WITNESS_BOND);
        _add(witnesses[1], 2 * FEE + WITNESS_BOND);
        _add(witnesses[2], WITNESS_BOND);
        _add(challenger, CHALLENGE_BOND + STAKE / 2);
        _add(sponsor, pool - paid);
        _checkExpected();
    }

    /// An open training claim blocks the seal until it is decided or expires.
    function test_openTrainingClaim_blocksSeal() public {
        _commitAll(taskId, 1, ALL);
        _finalize(taskId, 1, keccak256("state-1"), ALL);
        uint256 id = _challengeTraining(taskId, 1, 0, 0);
        warpTo(uint256(market.getTaskState(taskId).lastClosedAt) + CHALLENGE_WINDOW);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineChallengesOpen.selector, taskId, 1));
        market.seal(taskId);
        warpTo(court.getChallenge(id).deadline + 1);
        court.expireChallenge(id);
        _seal(taskId);
    }

    /// Upheld after the run completed: no shard rebalancing, the other round's reward stays.
    function test_refereeVote_upheldAwaitingSeal() public {
        _commitAll(taskId, 1, ALL);
        _finalize(taskId, 1, keccak256("state-1"), ALL);
        uint256 id = _challengeTraining(taskId, 1, 3, SEGMENTS);
        _referee(id, 2, true);
        _referee(id, 0, true);
        vm.assertEq(market.getTrainer(taskId, trainers[3]).acceptedWeight, WEIGHT, "round 0 kept");
        vm.assertEq(market.getTrainer(taskId, trainers[0]).shardMask, 0x003, "no rebalance");
        _seal(taskId);
        uint256 pool = POOL + STAKE / 2;
        uint256[N_TRAINERS] memory w = _weights(2 * WEIGHT);
        w[3] = WEIGHT;
        uint256 paid = _addTrainerPayouts(pool, w, 1 << 3);
        _add(witnesses[0], 2 * FEE + WITNESS_BOND);
        _add(witnesses[1], 2 * FEE + WITNESS_BOND);
        _add(witnesses[2], WITNESS_BOND);
        _add(challenger, CHALLENGE_BOND + STAKE / 2);
        _add(sponsor, pool - paid);
        _checkExpected();
    }

    /// A trainer already slashed to zero by an equivocation: the claim is still upheld (its reward
    /// for the round is revoked) but there is no bounty, only the bond back.
    function test_refereeVote_upheldNothingLeft_bondOnly() public {
        uint256 id = _challengeTraining(2, 1);
        Commitment memory a = _commitment(taskId, 1, 2, keccak256("a"));
        Commitment memory b = _commitment(taskId, 1, 2, keccak256("b"));
        bytes memory sa = _signC(trainers[2], a);
        bytes memory sb = _signC(trainers[2], b);
        vm.prank(stranger);
        court.proveTrainerEquivocation{value: CHALLENGE_BOND}(a, sa, b, sb);
        _referee(id, 0, true);
        _referee(id, 1, true);
        _assertChallenge(id, ChallengeKind.TrainingFraud, ChallengeStatus.Upheld, 0);
        vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND, "bond only");
        vm.assertEq(market.creditOf(stranger), CHALLENGE_BOND + STAKE / 2, "the equivocation proof took the stake");
        vm.assertEq(market.getTrainer(taskId, trainers[2]).acceptedWeight, 0, "round 0 revoked");
        _assertMoney();
    }

    // ------------------------------------------------------------------ rejected

    /// Guilty can no longer reach 2 of 3 once two referees say innocent: acquitted. Each referee
    /// that replayed (the guilty voter too) is paid bond / (2N); the claimant gets the rest back
    /// (issue 27 item 7: it loses at most half the bond).
    function test_refereeVote_innocent_rejects_refundsBond() public {
        uint256 id = _challengeTraining(1, 2);
        uint256 share = CHALLENGE_BOND / (2 * N_WITNESSES);
        _referee(id, 2, true);
        _referee(id, 0, false);
        vm.assertEq(uint256(court.getChallenge(id).status), uint256(ChallengeStatus.Open), "still open");
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ChallengeResolved(id, taskId, ChallengeStatus.Rejected, 0, 0);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(taskId, witnesses[0], share, REASON_REFEREE);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(taskId, witnesses[1], share, REASON_REFEREE);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(taskId, witnesses[2], share, REASON_REFEREE);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(taskId, challenger, CHALLENGE_BOND - 3 * share, REASON_BOND);
        _referee(id, 1, false);
        Challenge memory c = court.getChallenge(id);
        vm.assertEq(uint256(c.status), uint256(ChallengeStatus.Rejected), "rejected");
        vm.assertEq(c.guiltyVotes, 1, "guilty");
        vm.assertEq(c.innocentVotes, 2, "innocent");
        vm.assertEq(market.getTrainer(taskId, trainers[1]).stake, STAKE, "trainer untouched");
        vm.assertEq(market.getTaskState(taskId).openChallenges, 0, "closed");
        _assertMoney();

        _commitAll(taskId, 1, ALL);
        _finalize(taskId, 1, keccak256("state-1"), ALL);
        _seal(taskId);
        uint256 paid = _addTrainerPayouts(POOL, _weights(2 * WEIGHT), 0);
        _add(witnesses[0], 2 * FEE + WITNESS_BOND + share);
        _add(witnesses[1], 2 * FEE + WITNESS_BOND + share);
        _add(witnesses[2], WITNESS_BOND + share);
        _add(challenger, CHALLENGE_BOND - 3 * share);
        _add(sponsor, POOL - paid);
        _checkExpected();
    }

    /// A bond that does not split evenly: the dust stays with the claimant.
    function test_refereeVote_innocent_oddBond_dustToClaimant() public {
        TaskSpec memory s = _spec(AggregationRule.Mean);
        s.challengeBond = CHALLENGE_BOND + 1;
        s.rounds = 1;
        uint256 task2 = _start(s);
        _commitAll(task2, 0, ALL);
        _finalize(task2, 0, keccak256("s"), ALL);
        vm.prank(challenger);
        uint256 id = court.challengeTraining{value: CHALLENGE_BOND + 1}(task2, 0, 0, 0);
        _referee(id, 1, false);
        _referee(id, 2, false);
        uint256 share = (CHALLENGE_BOND + 1) / (2 * N_WITNESSES);
        vm.assertEq(market.getTaskState(task2).rewardPool, POOL, "nothing to the pool");
        _seal(task2);
        uint256 pool = POOL;
        uint256 paid = _addTrainerPayouts(pool, _weights(WEIGHT), 0);
        _add(witnesses[0], FEE + WITNESS_BOND);
        _add(witnesses[1], FEE + WITNESS_BOND + share);
        _add(witnesses[2], WITNESS_BOND + share);
        _add(challenger, CHALLENGE_BOND + 1 - 2 * share);
        _add(sponsor, pool - paid);
        // task 1 (the fixture) is still running: its escrow is counted by the money check.
        _checkExpected();
    }

    /// Fuzz: any voting order; the outcome is decided by whichever side reaches its bar first
    /// (2 guilty, or 2 innocent), and the money always balances.
    function testFuzz_refereeVote_anyOrder(uint8 order, uint8 verdicts) public {
        uint256 id = _challengeTraining(0, 0);
        uint256[3][6] memory perms = [
            [uint256(0), 1, 2],
            [uint256(0), 2, 1],
            [uint256(1), 0, 2],
            [uint256(1), 2, 0],
            [uint256(2), 0, 1],
            [uint256(2), 1, 0]
        ];
        uint256[3] memory p = perms[order % 6];
        uint256 guilty = 0;
        uint256 innocent = 0;
        ChallengeStatus expected = ChallengeStatus.Open;
        for (uint256 k = 0; k < 3; ++k) {
            bool g = (verdicts >> k) & 1 == 1;
            if (expected != ChallengeStatus.Open) {
                _expectRefereeRevert(
                    id,
                    witnesses[p[k]],
                    g,
                    abi.encodeWithSelector(ISynclineEvents.SynclineChallengeNotOpen.selector, id, expected)
                );
                continue;
            }
            _referee(id, p[k], g);
            if (g) ++guilty;
            else ++innocent;
            if (guilty == THRESHOLD) expected = ChallengeStatus.Upheld;
            else if (innocent > N_WITNESSES - THRESHOLD) expected = ChallengeStatus.Rejected;
        }
        vm.assertEq(uint256(court.getChallenge(id).status), uint256(expected), "outcome");
        vm.assertEq(market.getTaskState(taskId).openChallenges, 0, "always decided by 3 votes");
        if (expected == ChallengeStatus.Upheld) {
            vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND + STAKE / 2, "bounty");
        } else {
            uint256 fee = (guilty + innocent) * (CHALLENGE_BOND / (2 * N_WITNESSES));
            vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND - fee, "bond less bond / 2N per referee");
        }
        _assertMoney();
    }

    // ------------------------------------------------------------------ refereeVote reverts

    function test_refereeVote_reverts() public {
        uint256 id = _challengeTraining(0, 0);
        _expectRefereeRevert(
            id, stranger, true, abi.encodeWithSelector(ISynclineEvents.SynclineNotWitness.selector, taskId, stranger)
        );
        _expectRefereeRevert(
            id,
            trainers[0],
            false,
            abi.encodeWithSelector(ISynclineEvents.SynclineNotWitness.selector, taskId, trainers[0])
        );
        _referee(id, 0, true);
        _expectRefereeRevert(
            id,
            witnesses[0],
            true,
            abi.encodeWithSelector(ISynclineEvents.SynclineAlreadyRefereed.selector, id, witnesses[0])
        );
        _expectRefereeRevert(
            id,
            witnesses[0],
            false,
            abi.encodeWithSelector(ISynclineEvents.SynclineAlreadyRefereed.selector, id, witnesses[0])
        );
        _expectRefereeRevert(
            0, witnesses[1], true, abi.encodeWithSelector(ISynclineEvents.SynclineUnknownChallenge.selector, 0)
        );
        _expectRefereeRevert(
            id + 1,
            witnesses[1],
            true,
            abi.encodeWithSelector(ISynclineEvents.SynclineUnknownChallenge.selector, id + 1)
        );
    }

    function test_refereeVote_wrongKind_reverts() public {
        // Round 1 with fragment 4 left out: a censorship claim, then a referee vote on it.
        _commitAll(taskId, 1, ALL);
        _finalize(taskId, 1, keccak256("s1"), 0x0f);
        uint256 cid = _challengeCensorship(taskId, 1, 4);
        _expectRefereeRevert(
            cid,
            witnesses[0],
            true,
            abi.encodeWithSelector(ISynclineEvents.SynclineWrongChallengeKind.selector, cid, ChallengeKind.Censorship)
        );
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineWrongChallengeKind.selector, cid, ChallengeKind.Censorship)
        );
        court.expireChallenge(cid);
    }

    function test_refereeVote_deadline() public {
        uint256 id = _challengeTraining(0, 0);
        uint64 deadline = court.getChallenge(id).deadline;
        warpTo(deadline);
        _referee(id, 0, true);
        warpTo(deadline + 1);
        _expectRefereeRevert(
            id,
            witnesses[1],
            true,
            abi.encodeWithSelector(ISynclineEvents.SynclineChallengeDeadline.selector, id, deadline)
        );
    }

    /// A referee whose bond was slashed (proven equivocation) has nothing at stake: no verdict.
    function test_refereeVote_slashedWitness_reverts() public {
        uint256 id = _challengeTraining(0, 0);
        Vote memory a = Vote(taskId, 1, bytes32(0), keccak256("x"), keccak256("y"), 1, 0);
        Vote memory b = Vote(taskId, 1, bytes32(0), keccak256("x2"), keccak256("y"), 1, 0);
        bytes memory sa = _signV(witnesses[2], a);
        bytes memory sb = _signV(witnesses[2], b);
        vm.prank(stranger);
        court.proveWitnessEquivocation{value: CHALLENGE_BOND}(a, sa, b, sb);
        _expectRefereeRevert(
            id,
            witnesses[2],
            false,
            abi.encodeWithSelector(ISynclineEvents.SynclineWitnessUnbonded.selector, taskId, witnesses[2])
        );
        // The two bonded referees still decide.
        _referee(id, 0, false);
        _referee(id, 1, false);
        vm.assertEq(uint256(court.getChallenge(id).status), uint256(ChallengeStatus.Rejected), "rejected");
        _assertMoney();
    }

    // ------------------------------------------------------------------ expire

    function test_expireChallenge() public {
        uint256 id = _challengeTraining(3, 9);
        vm.prank(trainers[3]);
        court.answerTraining(id); // the segment is published: only the committee can decide now
        _referee(id, 0, true);
        uint64 deadline = court.getChallenge(id).deadline;
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineChallengeDeadline.selector, id, deadline));
        court.expireChallenge(id);
        warpTo(deadline);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineChallengeDeadline.selector, id, deadline));
        court.expireChallenge(id);
        warpTo(deadline + 1);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ChallengeResolved(id, taskId, ChallengeStatus.Expired, 0, 0);
        vm.prank(stranger);
        court.expireChallenge(id);
        _assertChallenge(id, ChallengeKind.TrainingFraud, ChallengeStatus.Expired, 0);
        // The referee that re-executed the segment is paid bond / (2N); the claimant gets the rest.
        uint256 share = CHALLENGE_BOND / (2 * N_WITNESSES);
        vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND - share, "unearned rest back");
        vm.assertEq(market.creditOf(witnesses[0]), share, "the voting referee paid");
        vm.assertEq(market.getTaskState(taskId).openChallenges, 0, "closed");
        vm.assertEq(market.getTrainer(taskId, trainers[3]).stake, STAKE, "trainer untouched");
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineChallengeNotOpen.selector, id, ChallengeStatus.Expired)
        );
        court.expireChallenge(id);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownChallenge.selector, 0));
        court.expireChallenge(0);
        (bool ok,) = address(market).call{value: 1}(abi.encodeCall(ISynclineCourt.refereeVote, (id, true)));
        vm.assertFalse(ok, "refereeVote takes no ether");
        _assertMoney();

        // The round's window has long closed, the seal goes ahead and pays as usual.
        _carry(taskId, 1);
        _seal(taskId);
        uint256 paid = _addTrainerPayouts(POOL, _weights(WEIGHT), 0);
        _add(witnesses[0], FEE + WITNESS_BOND + share);
        _add(witnesses[1], FEE + WITNESS_BOND);
        _add(witnesses[2], WITNESS_BOND);
        _add(challenger, CHALLENGE_BOND - share);
        _add(sponsor, POOL - paid + 2 * FEE);
        _checkExpected();
    }

    // ------------------------------------------------------------------ response window

    /// Checkpoints are published on demand: a trainer that does not answer a claim within half its
    /// window (it withheld the segment) is convicted like a guilty verdict; one that answers is not.
    function test_answerTraining_unanswered_upholds_answered_doesNot() public {
        uint256 id = _challengeTraining(3, 9);
        uint64 opened = court.getChallenge(id).openedAt;
        (uint64 respondBy,,, bool answered,) = court.availabilityDemand(id);
        vm.assertEq(respondBy, opened + CHALLENGE_WINDOW / 2, "response window");
        vm.assertFalse(answered, "not answered yet");
        // Before the response window ends nothing can be closed (the revert names it); after it,
        // silence convicts.
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineChallengeDeadline.selector, id, respondBy));
        court.expireChallenge(id);
        warpTo(respondBy + 1);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineAvailabilityClosed.selector, id, respondBy));
        vm.prank(trainers[3]);
        court.answerTraining(id);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.SegmentWithheld(id, taskId, 0, 3);
        vm.prank(stranger);
        court.expireChallenge(id);
        _assertChallenge(id, ChallengeKind.TrainingFraud, ChallengeStatus.Upheld, STAKE);
        vm.assertTrue(market.getTrainer(taskId, trainers[3]).evicted, "evicted");
        vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND + STAKE / 2, "bond back and half the slash");
        _assertMoney();

        // Another trainer answers in time: the claim runs to its deadline and merely expires.
        uint256 other = _challengeTraining(2, 0);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotAccused.selector, other, stranger));
        vm.prank(stranger);
        court.answerTraining(other);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.TrainingAnswered(other, trainers[2]);
        vm.prank(trainers[2]);
        court.answerTraining(other);
        (uint64 by,,,,) = court.availabilityDemand(other);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineAvailabilityClosed.selector, other, by));
        vm.prank(trainers[2]);
        court.answerTraining(other);
        warpTo(court.getChallenge(other).deadline + 1);
        court.expireChallenge(other);
        _assertChallenge(other, ChallengeKind.TrainingFraud, ChallengeStatus.Expired, 0);
        vm.assertEq(market.getTrainer(taskId, trainers[2]).stake, STAKE, "an answering trainer keeps its stake");
        _assertMoney();
    }

    /// A claim on a round that another proof voids meanwhile is still refereed on its own merits.
    function test_refereeVote_afterRoundVoided_slashesWithoutRevoking() public {
        _commitAll(taskId, 1, ALL);
        _finalize(taskId, 1, keccak256("s1"), 0x0f);
        vm.prank(stranger);
        uint256 cid = court.challengeCensorship{value: CHALLENGE_BOND}(taskId, 1, 4);
        warpTo(block.timestamp + 1 hours);
        uint256 id = _challengeTraining(taskId, 1, 0, 0);
        vm.prank(court.getChallenge(id).accused);
        court.answerTraining(id); // answered: left undecided, the claim expires
        warpTo(court.getChallenge(cid).deadline + 1);
        court.resolveCensorship(cid);
        vm.assertEq(uint256(market.getRound(taskId, 1).status), uint256(RoundStatus.Invalidated), "void");
        // w0 and w1 were slashed by the censorship ruling; only w2 can still referee: it can
        // neither reach 2 guilty votes nor 2 innocent ones, so the claim expires.
        _expectRefereeRevert(
            id,
            witnesses[0],
            true,
            abi.encodeWithSelector(ISynclineEvents.SynclineWitnessUnbonded.selector, taskId, witnesses[0])
        );
        _referee(id, 2, true);
        warpTo(court.getChallenge(id).deadline + 1);
        court.expireChallenge(id);
        uint256 share = CHALLENGE_BOND / (2 * N_WITNESSES); // issue 27: bond / (2N) per replaying referee
        vm.assertEq(market.creditOf(witnesses[2]), share, "w2 refereed: paid");
        vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND - share, "unearned rest back");
        _assertMoney();
    }
}
