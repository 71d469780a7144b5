// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "../base/Vm.sol";

import {CourtTestBase} from "./CourtTestBase.sol";
import {MerkleRef} from "./MerkleRef.sol";
import {ISynclineEvents} from "../../src/ISynclineEvents.sol";
import {ISynclineCourt} from "../../src/ISynclineCourt.sol";
import {
    TaskSpec,
    TaskState,
    TaskStatus,
    AggregationRule,
    RoundStatus,
    Challenge,
    ChallengeKind,
    ChallengeStatus
} from "../../src/SynclineTypes.sol";

/// @notice `challengeCensorship`, `answerCensorship`, `resolveCensorship`. Round 0 of a Mean task:
/// fragments 0 and 1 accepted, fragment 2 never committed, fragment 3 committed well-formed chunks
/// and was left out (censored), fragment 4 committed a malformed chunk 1 and was left out (justified).
contract CensorshipTest is CourtTestBase {
    uint256 internal taskId;
    uint256 internal constant ACCEPTED = 0x03;
    uint256 internal constant COMMITTED = 0x1b;

    function setUp() public override {
        super.setUp();
        taskId = _startRule(AggregationRule.Mean);
        _commitRound0(taskId, 1, 0);
        _finalize(taskId, 0, keccak256("state-0"), ACCEPTED);
    }

    /// @dev Fragment 4's round-0 chunks, chunk `ci` malformed with `kind`.
    function _f4Chunks(uint256 ci, uint256 kind) internal pure returns (bytes[] memory chunks) {
        chunks = _gradChunks(0, 4);
        chunks[ci] = _malform(chunks[ci], kind);
    }

    function _commitRound0(uint256 task, uint256 ci, uint256 kind) internal {
        _commit(task, 0, 0, _gradRoot(0, 0));
        _commit(task, 0, 1, _gradRoot(0, 1));
        _commit(task, 0, 3, _gradRoot(0, 3));
        _commit(task, 0, 4, _root(_f4Chunks(ci, kind)));
    }

    function _challengeCensorship(uint16 fragment) internal returns (uint256) {
        return _challengeCensorship(taskId, 0, fragment);
    }

    function _expectChallengeRevert(uint256 task, uint32 round, uint16 fragment, bytes memory err) internal {
        vm.prank(challenger);
        vm.expectRevert(err);
        court.challengeCensorship{value: CHALLENGE_BOND}(task, round, fragment);
    }

    function _answer(uint256 id, uint32 ci, bytes[] memory chunks) internal {
        bytes32[] memory proof = MerkleRef.proof(MerkleRef.hashes(chunks), ci);
        vm.prank(witnesses[0]);
        court.answerCensorship(id, ci, chunks[ci], proof);
    }

    function _expectAnswerRevert(uint256 id, uint32 ci, bytes memory chunk, bytes32[] memory proof, bytes memory err)
        internal
    {
        vm.prank(witnesses[0]);
        vm.expectRevert(err);
        court.answerCensorship(id, ci, chunk, proof);
    }

    // ------------------------------------------------------------------ challenge

    function test_challengeCensorship_opens() public {
        uint64 deadline = uint64(block.timestamp) + CHALLENGE_WINDOW;
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ChallengeOpened(
            1, taskId, 0, ChallengeKind.Censorship, challenger, address(0), 3, 0, deadline
        );
        uint256 id = _challengeCensorship(3);
        Challenge memory c = court.getChallenge(id);
        vm.assertEq(uint256(c.kind), uint256(ChallengeKind.Censorship), "kind");
        vm.assertEq(uint256(c.status), uint256(ChallengeStatus.Open), "open");
        vm.assertEq(c.fragment, 3, "fragment");
        vm.assertEq(c.deadline, deadline, "deadline");
        vm.assertEq(c.bond, CHALLENGE_BOND, "bond");
        TaskState memory t = market.getTaskState(taskId);
        vm.assertEq(t.openChallenges, 1, "openChallenges");
        vm.assertEq(t.bondsHeld, 3 * uint256(WITNESS_BOND) + CHALLENGE_BOND, "bond held");
        vm.assertEq(market.creditOf(challenger), 0, "nothing credited yet");
        _assertMoney();
    }

    function test_challengeCensorship_notCensored_reverts() public {
        uint16[4] memory frags = [uint16(0), 1, 2, 300];
        for (uint256 i = 0; i < 4; ++i) {
            _expectChallengeRevert(
                taskId,
                0,
                frags[i],
                abi.encodeWithSelector(ISynclineEvents.SynclineNotCensored.selector, taskId, 0, frags[i])
            );
        }
    }

    function testFuzz_challengeCensorship_onlyCommittedAndExcluded(uint16 fragment) public {
        bool censored = fragment < 256 && (COMMITTED >> fragment) & 1 == 1 && (ACCEPTED >> fragment) & 1 == 0;
        if (!censored) {
            _expectChallengeRevert(
                taskId,
                0,
                fragment,
                abi.encodeWithSelector(ISynclineEvents.SynclineNotCensored.selector, taskId, 0, fragment)
            );
        } else {
            _challengeCensorship(fragment);
            vm.assertEq(market.getTaskState(taskId).openChallenges, 1, "opened");
        }
    }

    function test_challengeCensorship_duplicate_reverts() public {
        _challengeCensorship(3);
        bytes32 key = keccak256(abi.encode(ChallengeKind.Censorship, taskId, uint32(0), uint16(3)));
        _expectChallengeRevert(
            taskId, 0, 3, abi.encodeWithSelector(ISynclineEvents.SynclineDuplicateChallenge.selector, key, 1)
        );
        // Another fragment of the same round is another fault.
        _challengeCensorship(4);
        vm.assertEq(market.getTaskState(taskId).openChallenges, 2, "two open");
    }

    function test_challengeCensorship_wrongBond_reverts() public {
        vm.prank(challenger);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongBond.selector, 1, CHALLENGE_BOND));
        court.challengeCensorship{value: 1}(taskId, 0, 3);
    }

    function test_challengeCensorship_roundAndWindow_revert() public {
        // Round 1 is open (pending).
        _expectChallengeRevert(
            taskId, 1, 3, abi.encodeWithSelector(ISynclineEvents.SynclineRoundNotFinalized.selector, taskId, 1)
        );
        // Round 1 carried forward.
        _carry(taskId, 1);
        _expectChallengeRevert(
            taskId, 1, 3, abi.encodeWithSelector(ISynclineEvents.SynclineRoundNotFinalized.selector, taskId, 1)
        );
        uint64 until = market.getRound(taskId, 0).closedAt + CHALLENGE_WINDOW;
        warpTo(until + 1);
        _expectChallengeRevert(
            taskId,
            0,
            3,
            abi.encodeWithSelector(ISynclineEvents.SynclineChallengeWindowClosed.selector, taskId, 0, until)
        );
        warpTo(until);
        _challengeCensorship(3);
    }

    /// Krum and Multi-Krum leave valid inputs out by design: no censorship claim there.
    function test_challengeCensorship_excludingRules_revert() public {
        AggregationRule[2] memory rules = [AggregationRule.Krum, AggregationRule.MultiKrum];
        for (uint256 i = 0; i < 2; ++i) {
            uint256 task2 = _startRule(rules[i]);
            _commitAll(task2, 0, ALL);
            _finalize(task2, 0, keccak256("krum"), 0x0f);
            _expectChallengeRevert(
                task2, 0, 4, abi.encodeWithSelector(ISynclineEvents.SynclineRuleNotChunkProvable.selector, rules[i])
            );
        }
        // Centered clipping and the chunk rules accept every valid input: claims are heard.
        uint256 task3 = _startRule(AggregationRule.CenteredClip);
        _commitAll(task3, 0, ALL);
        _finalize(task3, 0, keccak256("clip"), 0x0f);
        _challengeCensorship(task3, 0, 4);
    }

    function test_challengeCensorship_wrongTaskStatus_reverts() public {
        _expectChallengeRevert(77, 0, 3, abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, 77));
        uint256 task2 = _post(_spec(AggregationRule.Mean));
        _expectChallengeRevert(
            task2,
            0,
            3,
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, task2, TaskStatus.Enrolling, TaskStatus.Running
            )
        );
    }

    // ------------------------------------------------------------------ answer

    /// The exclusion was justified: the malformed chunk is opened, the challenge is rejected and
    /// its bond goes to whoever answered; the seal then pays everyone as if nothing happened.
    function test_answerCensorship_malformedChunk_rejects_andSettles() public {
        uint256 id = _challengeCensorship(4);
        bytes[] memory chunks = _f4Chunks(1, 0);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ChallengeResolved(id, taskId, ChallengeStatus.Rejected, 0, 0);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(taskId, witnesses[0], CHALLENGE_BOND, REASON_FORFEIT);
        _answer(id, 1, chunks);
        _assertChallenge(id, ChallengeKind.Censorship, ChallengeStatus.Rejected, 0);
        TaskState memory t = market.getTaskState(taskId);
        vm.assertEq(t.openChallenges, 0, "closed");
        vm.assertEq(t.bondsHeld, 3 * uint256(WITNESS_BOND), "challenge bond released");
        vm.assertEq(market.creditOf(witnesses[0]), CHALLENGE_BOND, "witnesses[0] paid");
        vm.assertEq(uint256(market.getRound(taskId, 0).status), uint256(RoundStatus.Finalized), "round stands");
        // Answered once: no second answer, no resolve.
        bytes32[] memory proof = MerkleRef.proof(MerkleRef.hashes(chunks), 1);
        _expectAnswerRevert(
            id,
            1,
            chunks[1],
            proof,
            abi.encodeWithSelector(ISynclineEvents.SynclineChallengeNotOpen.selector, id, ChallengeStatus.Rejected)
        );
        _commitAll(taskId, 1, ALL);
        _finalize(taskId, 1, keccak256("state-1"), ALL);
        warpTo(block.timestamp + CHALLENGE_WINDOW + 1);
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineChallengeNotOpen.selector, id, ChallengeStatus.Rejected)
        );
        court.resolveCensorship(id);
        _seal(taskId);
        uint256 paid = _addTrainerPayouts(POOL, [uint256(4), 4, 2, 2, 2], 0);
        _add(witnesses[0], 2 * FEE + WITNESS_BOND);
        _add(witnesses[1], 2 * FEE + WITNESS_BOND);
        _add(witnesses[2], WITNESS_BOND);
        _add(witnesses[0], CHALLENGE_BOND);
        _add(sponsor, POOL - paid);
        _checkExpected();
    }

    /// Every malformation, at every chunk (including the short last one), justifies the exclusion.
    function testFuzz_answerCensorship_anyMalformation(uint8 kindSeed, uint8 chunkSeed) public {
        uint256 kind = kindSeed % 6;
        uint256 ci = chunkSeed % CHUNKS;
        uint256 task2 = _startRule(AggregationRule.Mean);
        _commitRound0(task2, ci, kind);
        _finalize(task2, 0, keccak256("state-0"), ACCEPTED);
        uint256 id = _challengeCensorship(task2, 0, 4);
        _answer(id, uint32(ci), _f4Chunks(ci, kind));
        _assertChallenge(id, ChallengeKind.Censorship, ChallengeStatus.Rejected, 0);
        vm.assertEq(market.creditOf(witnesses[0]), CHALLENGE_BOND, "witnesses[0] paid");
        _assertMoney();
    }

    /// A full 256-value chunk in the 88-coordinate slot is malformed (wrong length) too.
    function test_answerCensorship_fullChunkInShortSlot_rejects() public {
        bytes[] memory chunks = _gradChunks(0, 4);
        chunks[2] = _gradChunk(42, 256);
        uint256 task2 = _startRule(AggregationRule.Mean);
        _commit(task2, 0, 0, _gradRoot(0, 0));
        _commit(task2, 0, 4, _root(chunks));
        _finalize(task2, 0, keccak256("s"), 1);
        uint256 id = _challengeCensorship(task2, 0, 4);
        _answer(id, 2, chunks);
        _assertChallenge(id, ChallengeKind.Censorship, ChallengeStatus.Rejected, 0);
    }

    function test_answerCensorship_wellFormedChunk_reverts() public {
        uint256 id3 = _challengeCensorship(3);
        bytes[] memory c3 = _gradChunks(0, 3);
        for (uint32 ci = 0; ci < CHUNKS; ++ci) {
            _expectAnswerRevert(
                id3,
                ci,
                c3[ci],
                MerkleRef.proof(MerkleRef.hashes(c3), ci),
                abi.encodeWithSelector(ISynclineEvents.SynclineChunkWellFormed.selector, id3, ci)
            );
        }
        // Fragment 4's well-formed chunks do not justify excluding it either.
        uint256 id4 = _challengeCensorship(4);
        bytes[] memory c4 = _f4Chunks(1, 0);
        _expectAnswerRevert(
            id4,
            2,
            c4[2],
            MerkleRef.proof(MerkleRef.hashes(c4), 2),
            abi.encodeWithSelector(ISynclineEvents.SynclineChunkWellFormed.selector, id4, 2)
        );
    }

    function test_answerCensorship_badOpening_reverts() public {
        uint256 id = _challengeCensorship(4);
        bytes[] memory chunks = _f4Chunks(1, 0);
        bytes32 root = court.getSubmission(taskId, 0, 4).chunkRoot;
        bytes32[] memory proof = MerkleRef.proof(MerkleRef.hashes(chunks), 1);
        bytes memory bad = abi.encodeWithSelector(ISynclineEvents.SynclineBadMerkleProof.selector, 0, root);
        // A malformed chunk that is not the committed one.
        _expectAnswerRevert(id, 1, _malform(chunks[1], 1), proof, bad);
        // The right chunk at the wrong index.
        _expectAnswerRevert(id, 0, chunks[1], proof, bad);
        // A broken path.
        proof[0] = bytes32(0);
        _expectAnswerRevert(id, 1, chunks[1], proof, bad);
        // Out of range.
        _expectAnswerRevert(
            id, 3, chunks[1], proof, abi.encodeWithSelector(ISynclineEvents.SynclineBadOpening.selector, taskId, 0, 3)
        );
    }

    function test_answerCensorship_deadline() public {
        uint256 id = _challengeCensorship(4);
        uint64 deadline = court.getChallenge(id).deadline;
        bytes[] memory chunks = _f4Chunks(1, 0);
        warpTo(deadline + 1);
        _expectAnswerRevert(
            id,
            1,
            chunks[1],
            MerkleRef.proof(MerkleRef.hashes(chunks), 1),
            abi.encodeWithSelector(ISynclineEvents.SynclineChallengeDeadline.selector, id, deadline)
        );
        warpTo(deadline);
        _answer(id, 1, chunks);
    }

    function test_answerCensorship_wrongIds_revert() public {
        bytes[] memory chunks = _f4Chunks(1, 0);
        bytes32[] memory proof = MerkleRef.proof(MerkleRef.hashes(chunks), 1);
        _expectAnswerRevert(
            0, 1, chunks[1], proof, abi.encodeWithSelector(ISynclineEvents.SynclineUnknownChallenge.selector, 0)
        );
        _expectAnswerRevert(
            1, 1, chunks[1], proof, abi.encodeWithSelector(ISynclineEvents.SynclineUnknownChallenge.selector, 1)
        );
        // A training challenge's id.
        uint256 tid = _challengeTraining(taskId, 0, 0, 0);
        _expectAnswerRevert(
            tid,
            1,
            chunks[1],
            proof,
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongChallengeKind.selector, tid, ChallengeKind.TrainingFraud
            )
        );
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongChallengeKind.selector, tid, ChallengeKind.TrainingFraud
            )
        );
        court.resolveCensorship(tid);
    }

    /// answerCensorship and resolveCensorship take no ether.
    function test_answerAndResolve_nonPayable() public {
        uint256 id = _challengeCensorship(4);
        bytes[] memory chunks = _f4Chunks(1, 0);
        bytes memory data = abi.encodeCall(
            ISynclineCourt.answerCensorship, (id, uint32(1), chunks[1], MerkleRef.proof(MerkleRef.hashes(chunks), 1))
        );
        vm.prank(witnesses[0]);
        (bool ok,) = address(market).call{value: 1}(data);
        vm.assertFalse(ok, "answer with value refused");
        warpTo(block.timestamp + CHALLENGE_WINDOW + 1);
        (ok,) = address(market).call{value: 1}(abi.encodeCall(ISynclineCourt.resolveCensorship, (id)));
        vm.assertFalse(ok, "resolve with value refused");
        (ok,) = address(market).call(abi.encodeCall(ISynclineCourt.resolveCensorship, (id)));
        vm.assertTrue(ok, "resolve without value");
    }

    /// The challenger may not answer its own (false) claim to take its bond back: only a voter
    /// of the finalized result defends it (this used to return the claimant's bond).
    function test_answerCensorship_byTheChallenger_reverts() public {
        uint256 id = _challengeCensorship(4);
        bytes[] memory chunks = _f4Chunks(1, 0);
        vm.prank(challenger);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotDefender.selector, id, challenger));
        court.answerCensorship(id, 1, chunks[1], MerkleRef.proof(MerkleRef.hashes(chunks), 1));
        vm.assertEq(market.creditOf(challenger), 0, "no bond back to the challenger");
    }

    // ------------------------------------------------------------------ resolve

    function test_resolveCensorship_beforeDeadline_reverts() public {
        uint256 id = _challengeCensorship(3);
        uint64 deadline = court.getChallenge(id).deadline;
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineChallengeDeadline.selector, id, deadline));
        court.resolveCensorship(id);
        warpTo(deadline);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineChallengeDeadline.selector, id, deadline));
        court.resolveCensorship(id);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownChallenge.selector, id + 1));
        court.resolveCensorship(id + 1);
    }

    /// Unanswered: the voters are slashed, the round and the next one voided, the state rolled
    /// back; the challenger gets bond + 50%; the seal pays the rest exactly.
    function test_resolveCensorship_upheld_slashesAndInvalidates() public {
        uint256 id = _challengeCensorship(3);
        _commitAll(taskId, 1, ALL);
        _finalize(taskId, 1, keccak256("state-1"), ALL);
        // The last window has passed, but the open claim blocks the seal.
        warpTo(uint256(market.getTaskState(taskId).lastClosedAt) + CHALLENGE_WINDOW);
        vm.assertGt(block.timestamp, court.getChallenge(id).deadline, "past the defence period");
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineChallengesOpen.selector, taskId, 1));
        market.seal(taskId);

        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RoundsInvalidated(taskId, 0, 1, _initialStateRoot());
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ChallengeResolved(
            id, taskId, ChallengeStatus.Upheld, 2 * uint256(WITNESS_BOND), WITNESS_BOND
        );
        vm.prank(stranger);
        court.resolveCensorship(id);

        _assertChallenge(id, ChallengeKind.Censorship, ChallengeStatus.Upheld, 2 * uint256(WITNESS_BOND));
        TaskState memory t = market.getTaskState(taskId);
        vm.assertEq(t.openChallenges, 0, "closed");
        vm.assertEq(t.stateRoot, _initialStateRoot(), "rolled back");
        vm.assertEq(t.roundsInvalidated, 2, "both rounds void");
        vm.assertEq(t.totalWeight, 0, "no reward left");
        vm.assertEq(market.getWitness(taskId, witnesses[2]).bond, WITNESS_BOND, "w2 did not vote: kept");
        _assertMoney();

        _seal(taskId);
        for (uint256 i = 0; i < N_TRAINERS; ++i) {
            _add(trainers[i], STAKE);
        }
        _add(witnesses[2], WITNESS_BOND);
        _add(challenger, CHALLENGE_BOND + WITNESS_BOND);
        _add(sponsor, POOL + WITNESS_BOND + 4 * FEE);
        _checkExpected();
    }

    /// A claim on a round another ruling voided can still be answered (the exclusion was justified).
    function test_answerCensorship_onVoidedRound_rejects() public {
        uint256 id3 = _challengeCensorship(3);
        warpTo(block.timestamp + 1 hours);
        uint256 id4 = _challengeCensorship(4);
        warpTo(court.getChallenge(id3).deadline + 1);
        court.resolveCensorship(id3);
        vm.assertEq(uint256(market.getRound(taskId, 0).status), uint256(RoundStatus.Invalidated), "void");
        _answer(id4, 1, _f4Chunks(1, 0));
        _assertChallenge(id4, ChallengeKind.Censorship, ChallengeStatus.Rejected, 0);
        vm.assertEq(market.creditOf(witnesses[0]), CHALLENGE_BOND, "witnesses[0] paid");
        vm.assertEq(market.getTaskState(taskId).openChallenges, 0, "closed");
        _assertMoney();
    }

    /// Two claims on one round: the first upheld voids it; the second can only expire (bond back).
    function test_resolveCensorship_roundAlreadyVoid_expires() public {
        uint256 id3 = _challengeCensorship(3);
        vm.prank(stranger);
        uint256 id4 = court.challengeCensorship{value: CHALLENGE_BOND}(taskId, 0, 4);
        warpTo(block.timestamp + CHALLENGE_WINDOW + 1);
        court.resolveCensorship(id3);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ChallengeResolved(id4, taskId, ChallengeStatus.Expired, 0, 0);
        court.resolveCensorship(id4);
        _assertChallenge(id4, ChallengeKind.Censorship, ChallengeStatus.Expired, 0);
        vm.assertEq(market.creditOf(stranger), CHALLENGE_BOND, "bond back");
        vm.assertEq(market.getTaskState(taskId).openChallenges, 0, "closed");
        _assertMoney();
        // An answer is still possible for an open claim on a voided round, but this one is closed.
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineChallengeNotOpen.selector, id4, ChallengeStatus.Expired)
        );
        court.resolveCensorship(id4);
    }
}
