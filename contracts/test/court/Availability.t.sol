// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "../base/Vm.sol";

import {CourtTestBase} from "./CourtTestBase.sol";
import {MerkleRef} from "./MerkleRef.sol";
import {ISynclineEvents} from "../../src/ISynclineEvents.sol";
import {TaskSpec, AggregationRule, RoundStatus, ChallengeKind, ChallengeStatus} from "../../src/SynclineTypes.sol";

/// @notice The data-availability sub-game of a censorship claim (`demandAvailability`,
/// `answerAvailability`, `resolveCensorship`), the defender rule of `answerCensorship`, re-bonding
/// after a slash, and the referees' pay when a training claim expires. Fixture as `CensorshipTest`:
/// round 0 of a Mean task, fragments 0 and 1 accepted by witnesses 0 and 1 (witness 2 did not
/// vote), fragment 3 committed well-formed chunks and was left out (withheld, or censored),
/// fragment 4 committed a malformed chunk 1 and was left out.
contract AvailabilityTest is CourtTestBase {
    uint256 internal taskId;
    uint256 internal constant ACCEPTED = 0x03;

    function setUp() public override {
        super.setUp();
        taskId = _startRule(AggregationRule.Mean);
        _commit(taskId, 0, 0, _gradRoot(0, 0));
        _commit(taskId, 0, 1, _gradRoot(0, 1));
        _commit(taskId, 0, 3, _gradRoot(0, 3));
        _commit(taskId, 0, 4, _root(_f4Chunks()));
        _finalize(taskId, 0, keccak256("state-0"), ACCEPTED);
    }

    function _f4Chunks() internal pure returns (bytes[] memory chunks) {
        chunks = _gradChunks(0, 4);
        chunks[1] = _malform(chunks[1], 0);
    }

    function _demand(uint256 id, uint256 w, uint32 ci) internal {
        vm.prank(witnesses[w]);
        court.demandAvailability(id, ci);
    }

    function _answerAvailability(uint256 id, address by, bytes[] memory chunks, uint32 ci) internal {
        bytes32[] memory proof = MerkleRef.proof(MerkleRef.hashes(chunks), ci);
        vm.prank(by);
        court.answerAvailability(id, chunks[ci], proof);
    }

    function _pastAll(uint256 id) internal {
        (uint64 d,,,,) = court.availabilityDemand(id);
        uint256 until = court.getChallenge(id).deadline;
        if (d > until) until = d;
        warpTo(until + 1);
    }

    // ------------------------------------------------------------------ withheld payload

    /// The trainer withheld its payload (or its claimant is its own second address): both voters
    /// demand chunk 0, nobody opens it; the claim fails, its bond pays the demanders, both keep
    /// their bonds and fees, and the submission can never be claimed again.
    function test_withheldPayload_unanswered_rejects_votersKeepBonds() public {
        uint256 id = _challengeCensorship(taskId, 0, 3);
        uint64 respondBy = uint64(block.timestamp) + CHALLENGE_WINDOW / 2;
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.AvailabilityDemanded(id, witnesses[0], 0, respondBy);
        _demand(id, 0, 0);
        _demand(id, 1, 2);
        (uint64 deadline, uint32 ci, uint16 demanders, bool answered,) = court.availabilityDemand(id);
        vm.assertEq(deadline, respondBy, "window of the first demand");
        vm.assertEq(ci, 0, "chunk of the first demand");
        vm.assertEq(demanders, 2, "both demanded");
        vm.assertFalse(answered, "not answered");

        // One claim per submission: nobody can claim it again while this one runs (and its
        // window is over once this one is decided).
        bytes32 key = keccak256(abi.encode(ChallengeKind.Censorship, taskId, uint32(0), uint16(3)));
        vm.prank(stranger);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineDuplicateChallenge.selector, key, id));
        court.challengeCensorship{value: CHALLENGE_BOND}(taskId, 0, 3);

        uint64 claimDeadline = court.getChallenge(id).deadline;
        warpTo(claimDeadline);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineChallengeDeadline.selector, id, claimDeadline));
        court.resolveCensorship(id);
        warpTo(claimDeadline + 1);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.SubmissionUnavailable(taskId, 0, 3, id);
        vm.prank(stranger);
        court.resolveCensorship(id);
        _assertChallenge(id, ChallengeKind.Censorship, ChallengeStatus.Rejected, 0);
        vm.assertEq(market.creditOf(witnesses[0]), CHALLENGE_BOND / 2, "w0 paid half the bond");
        vm.assertEq(market.creditOf(witnesses[1]), CHALLENGE_BOND / 2, "w1 paid half the bond");
        vm.assertEq(market.creditOf(challenger), 0, "claimant lost its bond");
        vm.assertEq(uint256(market.getRound(taskId, 0).status), uint256(RoundStatus.Finalized), "round stands");
        vm.assertEq(market.getWitness(taskId, witnesses[0]).bond, WITNESS_BOND, "w0 bond kept");
        vm.assertEq(market.getWitness(taskId, witnesses[1]).bond, WITNESS_BOND, "w1 bond kept");
        _assertMoney();


        _carry(taskId, 1);
        _seal(taskId);
        uint256 paid = _addTrainerPayouts(POOL, [uint256(2), 2, 0, 0, 0], 0);
        _add(witnesses[0], FEE + WITNESS_BOND + CHALLENGE_BOND / 2);
        _add(witnesses[1], FEE + WITNESS_BOND + CHALLENGE_BOND / 2);
        _add(witnesses[2], WITNESS_BOND);
        _add(sponsor, POOL - paid + 2 * FEE);
        _checkExpected();
    }

    /// The demanded chunk is opened and it is malformed: the exclusion was justified.
    function test_answerAvailability_malformedChunk_rejects() public {
        uint256 id = _challengeCensorship(taskId, 0, 4);
        _demand(id, 0, 1);
        _answerAvailability(id, stranger, _f4Chunks(), 1);
        _assertChallenge(id, ChallengeKind.Censorship, ChallengeStatus.Rejected, 0);
        vm.assertEq(market.creditOf(witnesses[0]), CHALLENGE_BOND, "the demander gets the bond");
        vm.assertEq(market.creditOf(stranger), 0, "the opener gets nothing");
        vm.assertEq(market.getTaskState(taskId).openChallenges, 0, "closed");
        _assertMoney();
    }

    // ------------------------------------------------------------------ shown after the vote

    /// The trainer opens the demanded chunk in time: the data exists but was shown only after the
    /// vote. Nothing moves (issue 27 item 6): the round stands, nobody is slashed, no fee is given
    /// up, the trainer is NOT credited the round (showing data late earns nothing), and the claim
    /// expires with its bond back to the claimant.
    function test_answeredLate_expires_nobodySlashedNorCredited() public {
        uint256 id = _challengeCensorship(taskId, 0, 3);
        _demand(id, 0, 2);
        _demand(id, 1, 0);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.AvailabilityAnswered(id, trainers[3], 2);
        _answerAvailability(id, trainers[3], _gradChunks(0, 3), 2);
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineAvailabilityClosed.selector, id, uint64(block.timestamp) + CHALLENGE_WINDOW / 2
            )
        );
        _answerAvailability(id, trainers[3], _gradChunks(0, 3), 2);
        _pastAll(id);
        uint256 weightBefore = market.getTaskState(taskId).totalWeight;
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.AvailabilityShownLate(id, taskId, 0, 3);
        court.resolveCensorship(id);
        _assertChallenge(id, ChallengeKind.Censorship, ChallengeStatus.Expired, 0);
        vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND, "bond back");
        vm.assertEq(market.getWitness(taskId, witnesses[0]).bond, WITNESS_BOND, "w0 bond kept");
        vm.assertEq(market.getWitness(taskId, witnesses[1]).bond, WITNESS_BOND, "w1 bond kept");
        vm.assertEq(market.getWitness(taskId, witnesses[0]).fees, FEE, "w0 fee kept");
        vm.assertEq(market.getWitness(taskId, witnesses[1]).fees, FEE, "w1 fee kept");
        vm.assertEq(market.getTaskState(taskId).totalWeight, weightBefore, "the late trainer is not credited");
        vm.assertEq(uint256(market.getRound(taskId, 0).status), uint256(RoundStatus.Finalized), "round stands");
        _assertMoney();

        _carry(taskId, 1);
        _seal(taskId);
        uint256 paid = _addTrainerPayouts(POOL, [uint256(2), 2, 0, 0, 0], 0);
        _add(witnesses[0], FEE + WITNESS_BOND);
        _add(witnesses[1], FEE + WITNESS_BOND);
        _add(witnesses[2], WITNESS_BOND);
        _add(challenger, CHALLENGE_BOND);
        _add(sponsor, POOL - paid + 2 * FEE);
        _checkExpected();
    }

    /// The issue 27 item 6 scenario: a voter of the round is itself the claimant (its challenger
    /// saw the payload only after the vote). It cannot defend its own claim; the trainer opens the
    /// demanded chunk. The claimant-voter keeps its bond and fee, and gets its claim bond back.
    function test_answeredLate_claimantVoterKeepsBondAndFee() public {
        vm.deal(witnesses[0], CHALLENGE_BOND);
        vm.prank(witnesses[0]);
        uint256 id = court.challengeCensorship{value: CHALLENGE_BOND}(taskId, 0, 3);
        _demand(id, 1, 0);
        _answerAvailability(id, trainers[3], _gradChunks(0, 3), 0);
        _pastAll(id);
        court.resolveCensorship(id);
        _assertChallenge(id, ChallengeKind.Censorship, ChallengeStatus.Expired, 0);
        vm.assertEq(market.getWitness(taskId, witnesses[0]).bond, WITNESS_BOND, "claimant-voter not slashed");
        vm.assertEq(market.getWitness(taskId, witnesses[0]).fees, FEE, "claimant-voter keeps its fee");
        vm.assertEq(market.getWitness(taskId, witnesses[1]).fees, FEE, "demander keeps its fee");
        vm.assertEq(market.creditOf(witnesses[0]), CHALLENGE_BOND, "claim bond back");
        vm.assertEq(market.creditOf(trainers[3]), 0, "the withholder gets nothing");
        _assertMoney();
    }

    /// A late-availability expiry followed by a rollback of the same round (another claim nobody
    /// defended): the rollback reverses each voter's fee exactly once and the round's accepted work.
    function test_answeredLate_thenRollback() public {
        uint256 id3 = _challengeCensorship(taskId, 0, 3);
        uint256 id4 = _challengeCensorship(taskId, 0, 4);
        _demand(id3, 0, 0);
        _demand(id3, 1, 0);
        _answerAvailability(id3, trainers[3], _gradChunks(0, 3), 0);
        _pastAll(id3);
        court.resolveCensorship(id3);
        vm.assertEq(market.getWitness(taskId, witnesses[0]).fees, FEE, "fee kept");
        court.resolveCensorship(id4);
        _assertChallenge(id4, ChallengeKind.Censorship, ChallengeStatus.Upheld, 2 * uint256(WITNESS_BOND));
        vm.assertEq(uint256(market.getRound(taskId, 0).status), uint256(RoundStatus.Invalidated), "rolled back");
        vm.assertEq(market.getWitness(taskId, witnesses[0]).fees, 0, "fee reversed once by the rollback");
        vm.assertEq(market.getTaskState(taskId).totalWeight, 0, "accepted work reversed with the round");
        vm.assertEq(market.getTaskState(taskId).openChallenges, 0, "everything closed");
        _assertMoney();
        _carry(taskId, 1);
        _seal(taskId);
    }

    /// A voter that neither demanded nor defended is not slashed either once the data is shown:
    /// the chain cannot tell it from a voter that fetched nothing because nothing was there.
    function test_answeredLate_silentVoterKeepsBond() public {
        uint256 id = _challengeCensorship(taskId, 0, 3);
        _demand(id, 0, 1);
        _answerAvailability(id, stranger, _gradChunks(0, 3), 1);
        _pastAll(id);
        court.resolveCensorship(id);
        _assertChallenge(id, ChallengeKind.Censorship, ChallengeStatus.Expired, 0);
        vm.assertEq(market.getWitness(taskId, witnesses[0]).bond, WITNESS_BOND, "demander kept its bond");
        vm.assertEq(market.getWitness(taskId, witnesses[1]).bond, WITNESS_BOND, "silent voter kept its bond");
        vm.assertEq(uint256(market.getRound(taskId, 0).status), uint256(RoundStatus.Finalized), "no rollback");
        vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND, "bond back, no bounty");
        _assertMoney();
    }

    /// A late voter may still join after the answer, until the claim's deadline.
    function test_demandAvailability_joinAfterAnswer() public {
        uint256 id = _challengeCensorship(taskId, 0, 3);
        _demand(id, 0, 1);
        _answerAvailability(id, trainers[3], _gradChunks(0, 3), 1);
        _demand(id, 1, 0);
        _pastAll(id);
        court.resolveCensorship(id);
        _assertChallenge(id, ChallengeKind.Censorship, ChallengeStatus.Expired, 0);
        vm.assertEq(market.getWitness(taskId, witnesses[1]).bond, WITNESS_BOND, "joined: kept");
    }

    function test_demandAvailability_reverts() public {
        uint256 id = _challengeCensorship(taskId, 0, 3);
        // Not a voter of the result (w2 did not vote), a stranger, the claimant.
        address[3] memory who = [witnesses[2], stranger, challenger];
        for (uint256 i = 0; i < 3; ++i) {
            vm.prank(who[i]);
            vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotDefender.selector, id, who[i]));
            court.demandAvailability(id, 0);
        }
        vm.prank(witnesses[0]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineBadOpening.selector, taskId, 0, 3));
        court.demandAvailability(id, 3);
        _demand(id, 0, 0);
        vm.prank(witnesses[0]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineAlreadyDemanded.selector, id, witnesses[0]));
        court.demandAvailability(id, 0);
        // No demand: nothing to answer.
        uint256 id4 = _challengeCensorship(taskId, 0, 4);
        bytes[] memory chunks = _f4Chunks();
        bytes32[] memory proof = MerkleRef.proof(MerkleRef.hashes(chunks), 1);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineAvailabilityClosed.selector, id4, 0));
        court.answerAvailability(id4, chunks[1], proof);
        uint64 claimDeadline = court.getChallenge(id).deadline;
        warpTo(claimDeadline + 1);
        vm.prank(witnesses[1]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineChallengeDeadline.selector, id, claimDeadline));
        court.demandAvailability(id, 0);
    }

    /// The claimant, a stranger or a non-voter cannot answer a censorship claim (the claimant
    /// used to take its own bond back this way).
    function test_answerCensorship_onlyVoters() public {
        uint256 id = _challengeCensorship(taskId, 0, 4);
        bytes[] memory chunks = _f4Chunks();
        bytes32[] memory proof = MerkleRef.proof(MerkleRef.hashes(chunks), 1);
        address[4] memory who = [challenger, stranger, witnesses[2], trainers[4]];
        for (uint256 i = 0; i < 4; ++i) {
            vm.prank(who[i]);
            vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotDefender.selector, id, who[i]));
            court.answerCensorship(id, 1, chunks[1], proof);
        }
        vm.prank(witnesses[1]);
        court.answerCensorship(id, 1, chunks[1], proof);
        vm.assertEq(market.creditOf(witnesses[1]), CHALLENGE_BOND, "the defending voter is paid");
    }

    /// A demand still running holds the ruling back until its response window ends.
    function test_resolveCensorship_waitsForResponseWindow() public {
        uint256 id = _challengeCensorship(taskId, 0, 3);
        uint64 claimDeadline = court.getChallenge(id).deadline;
        warpTo(claimDeadline - 1);
        _demand(id, 0, 0);
        (uint64 respondBy,,,,) = court.availabilityDemand(id);
        warpTo(claimDeadline + 1);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineChallengeDeadline.selector, id, respondBy));
        court.resolveCensorship(id);
        _answerAvailability(id, trainers[3], _gradChunks(0, 3), 0);
        court.resolveCensorship(id);
        vm.assertEq(market.getWitness(taskId, witnesses[1]).bond, WITNESS_BOND, "silent voter kept its bond");
    }

    // ------------------------------------------------------------------ path forward

    /// Slashed witnesses re-bond and the run finalizes again (N=3, k=2 with two slashed).
    function test_bondWitness_afterSlash_rebonds() public {
        TaskSpec memory s = _spec(AggregationRule.Mean);
        s.rounds = 4;
        uint256 t2 = _start(s);
        _commitAll(t2, 0, ALL);
        _finalize(t2, 0, keccak256("s0"), ALL & ~uint256(1 << 3));
        uint256 id = _challengeCensorship(t2, 0, 3);
        warpTo(court.getChallenge(id).deadline + 1);
        court.resolveCensorship(id);
        vm.assertEq(market.getWitness(t2, witnesses[0]).bond, 0, "slashed");
        _carry(t2, 1);
        _commitAll(t2, 2, ALL);
        _pastDeadline(t2);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWitnessUnbonded.selector, t2, witnesses[0]));
        _vote(t2, 2, 0, keccak256("s2"), ALL);
        _bond(t2, witnesses[0]);
        _bond(t2, witnesses[1]);
        vm.prank(witnesses[2]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWitnessAlreadyBonded.selector, t2, witnesses[2]));
        market.bondWitness{value: WITNESS_BOND}(t2);
        _finalize(t2, 2, keccak256("s2"), ALL);
        vm.assertEq(market.getWitness(t2, witnesses[0]).bond, WITNESS_BOND, "bonded again");
        _assertMoney();
    }

    // ------------------------------------------------------------------ expired training claims

    /// An expired training claim pays each referee that voted its share of the bond (its
    /// re-execution cost); the claimant gets back only what nobody earned.
    function test_expireChallenge_paysReferees() public {
        uint256 id = _challengeTraining(taskId, 0, 0, 0);
        vm.prank(court.getChallenge(id).accused);
        court.answerTraining(id); // answered: undecided claims expire instead of convicting
        _referee(id, 0, true);
        warpTo(court.getChallenge(id).deadline + 1);
        court.expireChallenge(id);
        _assertChallenge(id, ChallengeKind.TrainingFraud, ChallengeStatus.Expired, 0);
        uint256 share = CHALLENGE_BOND / (2 * N_WITNESSES); // issue 27: bond / (2N) per replaying referee
        vm.assertEq(market.creditOf(witnesses[0]), share, "the referee that voted is paid");
        vm.assertEq(market.creditOf(witnesses[1]), 0, "no vote, no pay");
        vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND - share, "only the unearned rest back");
        _assertMoney();
    }
}
