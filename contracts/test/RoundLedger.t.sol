// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "./base/Vm.sol";

import {SynclineTest} from "./base/SynclineTest.sol";
import {Vm} from "./base/Vm.sol";
import {ISynclineEvents} from "../src/ISynclineEvents.sol";
import {ISynclineCourt} from "../src/ISynclineCourt.sol";
import {SynclineMarket} from "../src/SynclineMarket.sol";
import {SignedMessagesHarness} from "./harness/SignedMessagesHarness.sol";
import {
    TaskSpec,
    TaskState,
    TaskStatus,
    TrainerRecord,
    WitnessRecord,
    RoundRecord,
    RoundStatus,
    Submission,
    Commitment,
    Vote
} from "../src/SynclineTypes.sol";

/// @notice Commitments, the k-of-N finalize quorum (idempotence, fork detection, dissent) and carry-forward.
contract RoundLedgerTest is SynclineTest {
    bytes32 internal constant ALT_ROOT = keccak256("forked-state");

    uint256 internal id;

    function setUp() public override {
        super.setUp();
        id = _postAndStart();
    }

    function _commitSome(uint32 round, uint256 n) internal returns (uint256 mask) {
        for (uint256 i = 0; i < n; ++i) {
            _commit(id, round, trainers[i]);
            mask |= uint256(1) << i;
        }
    }

    // ================================================================== commitSubmission

    function test_commitSubmission_valid_succeeds() public {
        Commitment memory c = _commitment(id, 0, 2);
        bytes memory sig = _signC(trainers[2], c);
        warpTo(block.timestamp + 10 minutes);

        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.SubmissionCommitted(
            id, 0, 2, trainers[2], c.payloadHash, c.chunkRoot, c.checkpointRoot, URI, 2, sig
        );
        vm.prank(trainers[2]);
        market.commitSubmission(c, sig);

        Submission memory s = court.getSubmission(id, 0, 2);
        vm.assertEq(s.trainer, trainers[2], "trainer");
        vm.assertEq(uint256(s.weight), 2, "weight = shards of fragment 2 ([5,7))");
        vm.assertEq(uint256(s.committedAt), block.timestamp, "committedAt");
        vm.assertEq(s.payloadHash, c.payloadHash, "payloadHash");
        vm.assertEq(s.chunkRoot, c.chunkRoot, "chunkRoot");
        vm.assertEq(s.checkpointRoot, c.checkpointRoot, "checkpointRoot");
        vm.assertEq(s.uri, URI, "uri");
        vm.assertEq(market.getRound(id, 0).committedMask, 1 << 2, "committedMask");
        vm.assertEq(uint256(market.getTrainer(id, trainers[2]).submitted), 1, "submitted");
        vm.assertEq(court.getSubmission(id, 0, 1).trainer, address(0), "other fragment empty");
    }

    function test_commitSubmission_unknownTask_reverts() public {
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, 9));
        _commitSigned(trainers[0], _rawCommitment(9, 0, 0, bytes32(uint256(1)), bytes32(uint256(1))));
    }

    function test_commitSubmission_signedByStranger_reverts() public {
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongSigner.selector, stranger, trainers[0]));
        _commitSigned(stranger, _commitment(id, 0, 0));
        vm.assertEq(market.getRound(id, 0).committedMask, 0, "nothing committed");
    }

    function test_commitSubmission_beforeStart_reverts() public {
        uint256 other = _postDefault();
        _enroll(other, trainers[0]);
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, other, TaskStatus.Enrolling, TaskStatus.Running
            )
        );
        _commitSigned(trainers[0], _rawCommitment(other, 0, 0, bytes32(uint256(1)), bytes32(uint256(1))));
    }

    /// A trainer signing for another trainer's fragment is not that trainer.
    function test_commitSubmission_wrongFragment_reverts() public {
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongSigner.selector, trainers[0], trainers[1]));
        _commitSigned(trainers[0], _commitment(id, 0, 1));
    }

    /// A fragment nobody holds: reverts before any signature is looked at (the relayer is named).
    function test_commitSubmission_unassignedFragment_reverts() public {
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineUnassignedFragment.selector, id, MAX_TRAINERS, stranger)
        );
        bytes memory sig = _signC(trainers[0], _commitment(id, 0, MAX_TRAINERS));
        vm.prank(stranger);
        market.commitSubmission(_commitment(id, 0, MAX_TRAINERS), sig);
    }

    function test_commitSubmission_futureRound_reverts() public {
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongRound.selector, id, uint32(1), uint32(0)));
        _commitSigned(trainers[0], _rawCommitment(id, 1, 0, bytes32(uint256(1)), bytes32(uint256(1))));
    }

    /// A closed round takes no new commitment; one already on record may be relayed again (a no-op).
    function test_commitSubmission_pastRound_reverts() public {
        _commit(id, 0, trainers[1]);
        _warpPastGrace(id);
        market.carryForward(id, 0);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongRound.selector, id, uint32(0), uint32(1)));
        _commitSigned(trainers[0], _rawCommitment(id, 0, 0, bytes32(uint256(1)), bytes32(uint256(1))));
        vm.recordLogs();
        _commit(id, 0, trainers[1]);
        vm.assertEq(vm.getRecordedLogs().length, 0, "the recorded commitment again: a silent no-op");
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineDuplicateSubmission.selector, id, uint32(0), uint16(1))
        );
        _commitSigned(trainers[1], _rawCommitment(id, 0, 1, bytes32(uint256(1)), bytes32(uint256(1))));
    }

    function test_commitSubmission_atDeadline_succeeds() public {
        warpTo(_deadline(id));
        _commit(id, 0, trainers[0]);
        vm.assertEq(market.getRound(id, 0).committedMask, 1, "committed at the deadline");
    }

    function test_commitSubmission_afterDeadline_reverts() public {
        _commit(id, 0, trainers[1]); // on time: the round does not extend (RoundDeadline.t.sol)
        uint64 deadline = uint64(_deadline(id));
        warpTo(uint256(deadline) + 1);
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineSubmissionLate.selector, id, uint32(0), deadline)
        );
        _commitSigned(trainers[0], _rawCommitment(id, 0, 0, bytes32(uint256(1)), bytes32(uint256(1))));
    }

    function testFuzz_commitSubmission_timing(uint256 offset) public {
        _commit(id, 0, trainers[0]); // on time: the round does not extend (RoundDeadline.t.sol)
        uint256 opened = market.getTaskState(id).roundOpenedAt;
        offset = bound(offset, 0, 2 * uint256(ROUND_DURATION));
        warpTo(opened + offset);
        // forge-lint: disable-next-line(unsafe-typecast) -- small test values, cannot truncate
        uint64 deadline = uint64(opened + ROUND_DURATION);
        if (offset <= ROUND_DURATION) {
            _commit(id, 0, trainers[1]);
            vm.assertEq(uint256(court.getSubmission(id, 0, 1).committedAt), opened + offset, "committedAt");
        } else {
            vm.expectRevert(
                abi.encodeWithSelector(ISynclineEvents.SynclineSubmissionLate.selector, id, uint32(0), deadline)
            );
            _commitSigned(trainers[1], _rawCommitment(id, 0, 1, bytes32(uint256(1)), bytes32(uint256(1))));
        }
    }

    function test_commitSubmission_duplicate_reverts() public {
        _commit(id, 0, trainers[3]);
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineDuplicateSubmission.selector, id, uint32(0), uint16(3))
        );
        _commitSigned(trainers[3], _rawCommitment(id, 0, 3, bytes32(uint256(5)), bytes32(uint256(6))));
        vm.assertEq(court.getSubmission(id, 0, 3).payloadHash, _payload(id, 0, 3), "first commitment kept");
    }

    /// Finding 1: an outsider relays the trainer's own signed commitment first. The uri is signed,
    /// so it can relay only the trainer's own locator; the trainer's transaction then succeeds as
    /// an idempotent no-op and the trainer's commitment (its uri included) is the one on record.
    function test_commitSubmission_frontRunWithTrainersSignature_trainerStillCommits() public {
        Commitment memory c = _commitment(id, 0, 1);
        bytes memory sig = _signC(trainers[1], c);
        // A dead uri under the trainer's signature recovers to somebody else.
        Commitment memory dead = _commitment(id, 0, 1);
        dead.uri = "http://dead.invalid/x";
        address recovered = _ecrecover(_commitmentDigest(dead, address(market), block.chainid), sig);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongSigner.selector, recovered, trainers[1]));
        vm.prank(stranger);
        market.commitSubmission(dead, sig);
        // The verbatim copy lands first...
        vm.prank(stranger);
        market.commitSubmission(c, sig);
        bytes32 before = keccak256(abi.encode(court.getSubmission(id, 0, 1), market.getRound(id, 0)));
        // ...and the trainer's own transaction succeeds, silently, changing nothing.
        vm.recordLogs();
        vm.prank(trainers[1]);
        market.commitSubmission(c, sig);
        vm.assertEq(vm.getRecordedLogs().length, 0, "idempotent: no event");
        vm.assertEq(
            keccak256(abi.encode(court.getSubmission(id, 0, 1), market.getRound(id, 0))), before, "nothing changed"
        );
        vm.assertEq(court.getSubmission(id, 0, 1).uri, URI, "the trainer's own uri is on record");
        vm.assertEq(uint256(market.getTrainer(id, trainers[1]).submitted), 1, "counted once");
    }

    /// A different signed commitment for a recorded slot still reverts, the uri alone included.
    function test_commitSubmission_duplicateOtherUri_reverts() public {
        _commit(id, 0, trainers[3]);
        Commitment memory c = _commitment(id, 0, 3);
        c.uri = "ipfs://another-locator";
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineDuplicateSubmission.selector, id, uint32(0), uint16(3))
        );
        _commitSigned(trainers[3], c);
        vm.assertEq(court.getSubmission(id, 0, 3).uri, URI, "first commitment kept");
    }

    function test_commitSubmission_emptyPayloadHash_reverts() public {
        vm.expectRevert(ISynclineEvents.SynclineEmptyCommitment.selector);
        _commitSigned(trainers[0], _rawCommitment(id, 0, 0, bytes32(0), bytes32(uint256(1))));
    }

    function test_commitSubmission_emptyChunkRoot_reverts() public {
        vm.expectRevert(ISynclineEvents.SynclineEmptyCommitment.selector);
        _commitSigned(trainers[0], _rawCommitment(id, 0, 0, bytes32(uint256(1)), bytes32(0)));
    }

    function test_commitSubmission_emptyCheckpointRoot_reverts() public {
        Commitment memory c = _commitment(id, 0, 0);
        c.checkpointRoot = bytes32(0);
        vm.expectRevert(ISynclineEvents.SynclineEmptyCommitment.selector);
        _commitSigned(trainers[0], c);
    }

    function test_commitSubmission_afterRunCompleted_reverts() public {
        _runAllRounds(id);
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, id, TaskStatus.AwaitingSeal, TaskStatus.Running
            )
        );
        _commitSigned(trainers[0], _rawCommitment(id, ROUNDS - 1, 0, bytes32(uint256(1)), bytes32(uint256(1))));
    }

    // ================================================================== commitSubmission: signatures

    function test_commitSubmission_relayedByThirdParty_succeeds() public {
        Commitment memory c = _commitment(id, 0, 1);
        bytes memory sig = _signC(trainers[1], c);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.SubmissionCommitted(
            id, 0, 1, trainers[1], c.payloadHash, c.chunkRoot, c.checkpointRoot, URI, 3, sig
        );
        vm.prank(stranger); // anyone may relay: the signer is the trainer
        market.commitSubmission(c, sig);
        vm.assertEq(court.getSubmission(id, 0, 1).trainer, trainers[1], "the signer committed");
        vm.assertEq(uint256(market.getTrainer(id, trainers[1]).submitted), 1, "counted for the signer");
        vm.assertFalse(market.getTrainer(id, stranger).enrolled, "the relayer is nobody");
    }

    function _expectBadCommitSignature(bytes memory sig) internal {
        vm.expectRevert(ISynclineEvents.SynclineBadSignature.selector);
        vm.prank(trainers[0]);
        market.commitSubmission(_commitment(id, 0, 0), sig);
    }

    function test_commitSubmission_malformedSignature_reverts() public {
        bytes memory good = _signC(trainers[0], _commitment(id, 0, 0));
        (bytes32 r, bytes32 s,) = _split(good);
        _expectBadCommitSignature(abi.encodePacked(r, s, uint8(29))); // v neither 27 nor 28
        _expectBadCommitSignature(abi.encodePacked(r, s, uint8(0)));
        _expectBadCommitSignature(new bytes(65)); // all zero: recovers to nobody
        _expectBadCommitSignature(abi.encodePacked(bytes32(0), s, uint8(27))); // r = 0
        vm.assertEq(market.getRound(id, 0).committedMask, 0, "nothing committed");
    }

    function test_commitSubmission_wrongLengthSignature_reverts() public {
        bytes memory good = _signC(trainers[0], _commitment(id, 0, 0));
        (bytes32 r, bytes32 s, uint8 v) = _split(good);
        _expectBadCommitSignature("");
        _expectBadCommitSignature(abi.encodePacked(r, s)); // 64 bytes: no EIP-2098 compact form
        _expectBadCommitSignature(abi.encodePacked(r, bytes32(uint256(s) | (uint256(v - 27) << 255)))); // 2098
        _expectBadCommitSignature(abi.encodePacked(good, uint8(0))); // 66 bytes
        _expectBadCommitSignature(abi.encodePacked(r, s, v, r)); // 97 bytes
        vm.assertEq(market.getRound(id, 0).committedMask, 0, "nothing committed");
    }

    function test_commitSubmission_malleableHighS_reverts() public {
        Commitment memory c = _commitment(id, 0, 0);
        bytes memory good = _signC(trainers[0], c);
        bytes memory flipped = _malleate(good);
        // The flipped signature is valid for plain ecrecover: only the low-s rule refuses it.
        (bytes32 r, bytes32 s, uint8 v) = _split(flipped);
        vm.assertEq(
            ecrecover(_commitmentDigest(c, address(market), block.chainid), v, r, s), trainers[0], "same signer"
        );
        _expectBadCommitSignature(flipped);
        // The canonical one still works.
        vm.prank(trainers[0]);
        market.commitSubmission(c, good);
        vm.assertEq(market.getRound(id, 0).committedMask, 1, "canonical signature accepted");
    }

    /// Any 65 bytes: refused as malformed unless they recover to someone, who is then not the trainer.
    function testFuzz_commitSubmission_randomSignature_reverts(bytes32 r, bytes32 s, uint8 v, bool plausibleV) public {
        if (plausibleV) v = 27 + (v % 2);
        bytes memory sig = abi.encodePacked(r, s, v);
        Commitment memory c = _commitment(id, 0, 0);
        address signer = _ecrecover(_commitmentDigest(c, address(market), block.chainid), sig);
        vm.assume(signer != trainers[0]);
        if (signer == address(0)) {
            vm.expectRevert(ISynclineEvents.SynclineBadSignature.selector);
        } else {
            vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongSigner.selector, signer, trainers[0]));
        }
        vm.prank(stranger);
        market.commitSubmission(c, sig);
    }

    function testFuzz_commitSubmission_randomLengthSignature_reverts(bytes memory sig) public {
        vm.assume(sig.length != 65);
        _expectBadCommitSignature(sig);
    }

    /// A signature is bound to one task: relaying it for another task names another signer.
    function test_commitSubmission_replayOtherTask_reverts() public {
        uint256 other = _postAndStart(); // the same trainers in the same order: fragment 0 is trainers[0]
        vm.assertEq(market.getTrainers(other)[0], trainers[0], "same holder");
        Commitment memory c = _commitment(id, 0, 0);
        bytes memory sig = _signC(trainers[0], c);
        c.taskId = other;
        address recovered = _ecrecover(_commitmentDigest(c, address(market), block.chainid), sig);
        vm.assertTrue(recovered != trainers[0], "another digest");
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongSigner.selector, recovered, trainers[0]));
        vm.prank(stranger);
        market.commitSubmission(c, sig);
        vm.assertEq(market.getRound(other, 0).committedMask, 0, "nothing committed in the other task");
    }

    /// A signature is bound to one round: last round's commitment cannot be replayed.
    function test_commitSubmission_replayOtherRound_reverts() public {
        Commitment memory c = _commitment(id, 0, 2);
        bytes memory sig = _signC(trainers[2], c);
        vm.prank(trainers[2]);
        market.commitSubmission(c, sig);
        _warpPastDeadline(id);
        _finalize(id, 0, 1 << 2);
        c.round = 1;
        address recovered = _ecrecover(_commitmentDigest(c, address(market), block.chainid), sig);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongSigner.selector, recovered, trainers[2]));
        vm.prank(stranger);
        market.commitSubmission(c, sig);
    }

    /// A signature is bound to one chain: after a fork (new chain id) it names another signer.
    function test_commitSubmission_replayOtherChain_reverts() public {
        Commitment memory c = _commitment(id, 0, 0);
        bytes memory sig = _signC(trainers[0], c);
        uint256 forkId = block.chainid + 1;
        vm.chainId(forkId);
        address recovered = _ecrecover(_commitmentDigest(c, address(market), forkId), sig);
        vm.assertTrue(recovered != trainers[0], "another domain");
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongSigner.selector, recovered, trainers[0]));
        vm.prank(trainers[0]);
        market.commitSubmission(c, sig);
        // A signature made for the new chain id is accepted there: the domain follows block.chainid.
        _commitSigned(trainers[0], c);
        vm.assertEq(market.getRound(id, 0).committedMask, 1, "committed with the fork's domain");
    }

    function test_commitSubmission_signedForOtherChain_reverts() public {
        Commitment memory c = _commitment(id, 0, 0);
        bytes memory sig = _signDigest(_keyOf(trainers[0]), _commitmentDigest(c, address(market), 1));
        address recovered = _ecrecover(_commitmentDigest(c, address(market), block.chainid), sig);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongSigner.selector, recovered, trainers[0]));
        vm.prank(trainers[0]);
        market.commitSubmission(c, sig);
    }

    /// A signature is bound to one market deployment.
    function test_commitSubmission_replayOtherMarket_reverts() public {
        SynclineMarket first = market;
        SynclineMarket second = _deployMarket(courtModule);
        market = second;
        uint256 twin = _postAndStart();
        market = first;
        vm.assertEq(twin, id, "same task id in both markets");
        vm.assertEq(second.getTrainers(twin)[0], trainers[0], "same holder");

        Commitment memory c = _commitment(id, 0, 0);
        bytes memory sig = _signC(trainers[0], c); // for `first`
        address recovered = _ecrecover(_commitmentDigest(c, address(second), block.chainid), sig);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongSigner.selector, recovered, trainers[0]));
        vm.prank(trainers[0]);
        second.commitSubmission(c, sig);
        vm.prank(trainers[0]);
        first.commitSubmission(c, sig);
        vm.assertEq(first.getRound(id, 0).committedMask, 1, "valid where it was signed for");
    }

    /// The test suite's EIP-712 digests agree with the market's own (`SynclineStorage`, in the harness's domain).
    function testFuzz_eip712_digestsMatchOpenZeppelin(Commitment memory c, Vote memory v) public {
        SignedMessagesHarness h =
            SignedMessagesHarness(vm.deployCode("SignedMessagesHarness.sol:SignedMessagesHarness"));
        vm.assertEq(_commitmentDigest(c, address(h), block.chainid), h.commitmentDigest(c), "commitment digest");
        vm.assertEq(_voteDigest(v, address(h), block.chainid), h.voteDigest(v), "vote digest");
    }

    // ================================================================== finalizeRound: reverts

    function test_finalizeRound_unknownTask_reverts() public {
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, 5));
        _voteWithMetric(_voteMsg(5, 0, bytes32(uint256(1)), bytes32(0), 0), witnesses[0], 0);
    }

    function test_finalizeRound_notWitness_reverts() public {
        _warpPastDeadline(id);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotWitness.selector, id, trainers[0]));
        _voteWithMetric(_voteMsg(id, 0, _stateRoot(id, 0), _aggRoot(id, 0), 0), trainers[0], 0);
    }

    function test_finalizeRound_emptyStateRoot_reverts() public {
        _warpPastDeadline(id);
        vm.expectRevert(ISynclineEvents.SynclineEmptyStateRoot.selector);
        _voteWithMetric(_voteMsg(id, 0, bytes32(0), _aggRoot(id, 0), 0), witnesses[0], 0);
    }

    function test_finalizeRound_atDeadline_reverts() public {
        uint64 deadline = uint64(_deadline(id));
        warpTo(deadline);
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineRoundStillOpen.selector, id, uint32(0), deadline)
        );
        _voteWithMetric(_voteMsg(id, 0, _stateRoot(id, 0), _aggRoot(id, 0), 0), witnesses[0], 0);
    }

    function testFuzz_finalizeRound_timing(uint256 offset) public {
        // One trainer has not committed: no early close (EarlyClose.t.sol), the deadline rule holds.
        uint256 mask = _commitSome(0, MAX_TRAINERS - 1);
        uint64 opened = market.getTaskState(id).roundOpenedAt;
        offset = bound(offset, 0, 2 * uint256(ROUND_DURATION + GRACE));
        warpTo(opened + offset);
        if (offset <= ROUND_DURATION) {
            vm.expectRevert(
                abi.encodeWithSelector(
                    ISynclineEvents.SynclineRoundStillOpen.selector, id, uint32(0), opened + ROUND_DURATION
                )
            );
            _voteWithMetric(_voteMsg(id, 0, _stateRoot(id, 0), _aggRoot(id, 0), mask), witnesses[0], 0);
        } else {
            // Votes count even after the grace window, as long as nobody carried the round forward.
            _finalize(id, 0, mask);
            _assertRoundStatus(id, 0, RoundStatus.Finalized, "finalized");
            vm.assertEq(uint256(market.getRound(id, 0).closedAt), opened + offset, "closedAt");
        }
    }

    function test_finalizeRound_beforeStart_reverts() public {
        uint256 other = _postDefault();
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, other, TaskStatus.Enrolling, TaskStatus.Running
            )
        );
        _voteWithMetric(_voteMsg(other, 0, _stateRoot(other, 0), _aggRoot(other, 0), 0), witnesses[0], 0);
    }

    function test_finalizeRound_futureRound_reverts() public {
        _warpPastDeadline(id);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongRound.selector, id, uint32(1), uint32(0)));
        _voteWithMetric(_voteMsg(id, 1, _stateRoot(id, 1), _aggRoot(id, 1), 0), witnesses[0], 0);
    }

    function test_finalizeRound_strayAcceptedMask_reverts() public {
        uint256 committed = _commitSome(0, 3); // fragments 0, 1, 2
        _warpPastDeadline(id);
        uint256 offered = committed | (1 << 3) | (1 << 9);
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineAcceptedNotCommitted.selector, id, uint32(0), uint256((1 << 3) | (1 << 9))
            )
        );
        _voteWithMetric(_voteMsg(id, 0, _stateRoot(id, 0), _aggRoot(id, 0), offered), witnesses[0], 0);
    }

    function test_finalizeRound_afterRunCompleted_newRound_reverts() public {
        _runAllRounds(id);
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, id, TaskStatus.AwaitingSeal, TaskStatus.Running
            )
        );
        _voteWithMetric(_voteMsg(id, ROUNDS, _stateRoot(id, ROUNDS), bytes32(0), 0), witnesses[0], 0);
    }

    // ================================================================== finalizeRound: signatures

    function test_finalizeRound_relayedByThirdParty_succeeds() public {
        uint256 mask = _commitAll(id, 0);
        _warpPastDeadline(id);
        Vote memory v = _voteMsg(id, 0, _stateRoot(id, 0), _aggRoot(id, 0), mask);
        bytes memory sig = _signV(witnesses[1], v);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.VoteCast(
            id,
            0,
            witnesses[1],
            _result(v.stateRoot, v.aggregateRoot, mask),
            v.prevStateRoot,
            v.stateRoot,
            v.aggregateRoot,
            mask,
            METRIC,
            sig
        );
        vm.prank(stranger);
        market.finalizeRound(v, sig);
        vm.assertEq(court.voteOf(id, 0, witnesses[1]), _result(v.stateRoot, v.aggregateRoot, mask), "signer's vote");
        vm.assertEq(court.voteOf(id, 0, stranger), bytes32(0), "the relayer voted nothing");
        // Another witness relaying it does not vote either: the signature is witness 1's.
        vm.prank(witnesses[0]);
        market.finalizeRound(v, sig);
        vm.assertEq(court.voteOf(id, 0, witnesses[0]), bytes32(0), "relaying is not voting");
        vm.assertEq(uint256(market.getRound(id, 0).voteCount), 1, "one vote");
    }

    function test_finalizeRound_signedByNonWitness_reverts() public {
        _warpPastDeadline(id);
        Vote memory v = _voteMsg(id, 0, _stateRoot(id, 0), _aggRoot(id, 0), 0);
        bytes memory sig = _signV(stranger, v);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotWitness.selector, id, stranger));
        vm.prank(witnesses[0]); // a witness relaying someone else's signature does not help
        market.finalizeRound(v, sig);
    }

    function _expectBadVoteSignature(bytes memory sig) internal {
        vm.expectRevert(ISynclineEvents.SynclineBadSignature.selector);
        vm.prank(witnesses[0]);
        market.finalizeRound(_voteMsg(id, 0, _stateRoot(id, 0), _aggRoot(id, 0), 0), sig);
    }

    function test_finalizeRound_badSignatures_reverts() public {
        _commit(id, 0, trainers[0]); // a round with something to vote on
        _warpPastDeadline(id);
        Vote memory v = _voteMsg(id, 0, _stateRoot(id, 0), _aggRoot(id, 0), 0);
        bytes memory good = _signV(witnesses[0], v);
        (bytes32 r, bytes32 s, uint8 recid) = _split(good);
        _expectBadVoteSignature(abi.encodePacked(r, s, uint8(26)));
        _expectBadVoteSignature(new bytes(65));
        _expectBadVoteSignature("");
        _expectBadVoteSignature(abi.encodePacked(r, s));
        _expectBadVoteSignature(abi.encodePacked(r, s, recid, uint8(0)));
        _expectBadVoteSignature(_malleate(good));
        vm.assertEq(uint256(market.getRound(id, 0).voteCount), 0, "no vote counted");
        vm.prank(witnesses[0]);
        market.finalizeRound(v, good);
        vm.assertEq(uint256(market.getRound(id, 0).voteCount), 1, "the canonical signature counts");
    }

    /// The unknown-task check comes after recovery: a bad signature is refused first.
    function test_finalizeRound_badSignatureUnknownTask_reverts() public {
        vm.expectRevert(ISynclineEvents.SynclineBadSignature.selector);
        market.finalizeRound(_voteMsg(99, 0, bytes32(uint256(1)), 0, 0), new bytes(65));
    }

    function testFuzz_finalizeRound_randomSignature_reverts(bytes32 r, bytes32 s, uint8 v, bool plausibleV) public {
        _warpPastDeadline(id);
        if (plausibleV) v = 27 + (v % 2);
        bytes memory sig = abi.encodePacked(r, s, v);
        Vote memory vote = _voteMsg(id, 0, _stateRoot(id, 0), _aggRoot(id, 0), 0);
        address signer = _ecrecover(_voteDigest(vote, address(market), block.chainid), sig);
        vm.assume(signer != witnesses[0] && signer != witnesses[1] && signer != witnesses[2]);
        if (signer == address(0)) {
            vm.expectRevert(ISynclineEvents.SynclineBadSignature.selector);
        } else {
            vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotWitness.selector, id, signer));
        }
        market.finalizeRound(vote, sig);
    }

    /// Replays of a witness's vote into another task, round, chain or market name another signer,
    /// who is no witness there.
    function test_finalizeRound_replayOtherTask_reverts() public {
        uint256 other = _postAndStart();
        _warpPastDeadline(other);
        Vote memory v = _voteMsg(id, 0, _stateRoot(id, 0), _aggRoot(id, 0), 0);
        bytes memory sig = _signV(witnesses[0], v);
        v.taskId = other;
        address recovered = _ecrecover(_voteDigest(v, address(market), block.chainid), sig);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotWitness.selector, other, recovered));
        market.finalizeRound(v, sig);
    }

    function test_finalizeRound_replayOtherRound_reverts() public {
        _warpPastDeadline(id);
        Vote memory v = _voteMsg(id, 0, _stateRoot(id, 0), _aggRoot(id, 0), 0);
        bytes memory sig = _signV(witnesses[0], v);
        v.round = 1;
        address recovered = _ecrecover(_voteDigest(v, address(market), block.chainid), sig);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotWitness.selector, id, recovered));
        market.finalizeRound(v, sig);
    }

    function test_finalizeRound_replayOtherChain_reverts() public {
        _warpPastDeadline(id);
        Vote memory v = _voteMsg(id, 0, _stateRoot(id, 0), _aggRoot(id, 0), 0);
        bytes memory sig = _signV(witnesses[0], v);
        vm.chainId(block.chainid + 1);
        address recovered = _ecrecover(_voteDigest(v, address(market), block.chainid), sig);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotWitness.selector, id, recovered));
        market.finalizeRound(v, sig);
    }

    function test_finalizeRound_replayOtherMarket_reverts() public {
        SynclineMarket first = market;
        SynclineMarket second = _deployMarket(courtModule);
        market = second;
        uint256 twin = _postAndStart();
        market = first;
        vm.assertEq(twin, id, "same task id in both markets");
        _commit(id, 0, trainers[0]); // in `first`: a round with something to vote on
        warpTo(_deadline(id) + 1);

        Vote memory v = _voteMsg(id, 0, _stateRoot(id, 0), _aggRoot(id, 0), 0);
        bytes memory sig = _signV(witnesses[0], v); // for `first`
        address recovered = _ecrecover(_voteDigest(v, address(second), block.chainid), sig);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotWitness.selector, id, recovered));
        second.finalizeRound(v, sig);
        first.finalizeRound(v, sig);
        vm.assertEq(ISynclineCourt(address(first)).voteOf(id, 0, witnesses[0]), _result(v.stateRoot, v.aggregateRoot, 0), "valid where signed");
    }

    // ================================================================== finalizeRound: witness bonds

    function test_finalizeRound_unbondedWitness_reverts() public {
        uint256 bonded = _post(_bondedSpec(), POOL);
        _enrollMany(bonded, MAX_TRAINERS);
        uint256 mask = _commitAll(bonded, 0);
        _warpPastDeadline(bonded);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWitnessUnbonded.selector, bonded, witnesses[0]));
        _vote(bonded, 0, witnesses[0], _stateRoot(bonded, 0), _aggRoot(bonded, 0), mask);

        _bond(bonded, witnesses[0]);
        _vote(bonded, 0, witnesses[0], _stateRoot(bonded, 0), _aggRoot(bonded, 0), mask);
        vm.assertEq(uint256(market.getRound(bonded, 0).voteCount), 1, "a bonded witness votes");
        // Witness 1 is still unbonded: it cannot complete the quorum until it bonds.
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWitnessUnbonded.selector, bonded, witnesses[1]));
        _vote(bonded, 0, witnesses[1], _stateRoot(bonded, 0), _aggRoot(bonded, 0), mask);
        _bond(bonded, witnesses[1]);
        _vote(bonded, 0, witnesses[1], _stateRoot(bonded, 0), _aggRoot(bonded, 0), mask);
        _assertRoundStatus(bonded, 0, RoundStatus.Finalized, "quorum of bonded witnesses");

        // Repeating the finalized result stays an idempotent no-op, even for the unbonded witness.
        vm.recordLogs();
        _vote(bonded, 0, witnesses[2], _stateRoot(bonded, 0), _aggRoot(bonded, 0), mask);
        vm.assertEq(vm.getRecordedLogs().length, 0, "silent no-op");
    }

    // ================================================================== finalizeRound: previous state root

    /// The vote helpers read the market's storage with `vm.load` (no call): their slots match the views.
    function test_prevRoot_matchesViews() public {
        vm.assertEq(_prevRoot(id, 0), market.getTaskState(id).stateRoot, "open round: the task's root");
        _runRound(id, 0);
        vm.assertEq(_prevRoot(id, 0), market.getRound(id, 0).prevStateRoot, "finalized: the round's previous root");
        vm.assertEq(_prevRoot(id, 0), keccak256("initial-state"), "round 0 built on the initial state");
        vm.assertEq(_prevRoot(id, 1), _stateRoot(id, 0), "round 1 builds on round 0");
    }

    /// A vote must build on the round's previous state root; the error names both roots.
    function test_finalizeRound_wrongPrevStateRoot_reverts() public {
        uint256 mask = _commitAll(id, 0);
        _warpPastDeadline(id);
        Vote memory v = _voteMsg(id, 0, _stateRoot(id, 0), _aggRoot(id, 0), mask);
        bytes32 current = v.prevStateRoot;
        vm.assertEq(current, keccak256("initial-state"), "round 0 builds on the initial state");
        v.prevStateRoot = ALT_ROOT;
        bytes memory sig = _signV(witnesses[0], v);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongPrevStateRoot.selector, ALT_ROOT, current));
        market.finalizeRound(v, sig);
        vm.assertEq(uint256(market.getRound(id, 0).voteCount), 0, "no vote recorded");
        // Once finalized, the round has no open previous root: only its result is compared
        // (idempotent replay or ConflictingFinalize), and a vote for the next round builds on it.
        _finalize(id, 0, mask);
        vm.assertEq(market.getRound(id, 0).prevStateRoot, current, "recorded: what the votes built on");
        vm.assertEq(_prevRoot(id, 1), _stateRoot(id, 0), "round 1 builds on round 0's result");
    }

    /// The metric is signed: a relayer that changes it relays a vote nobody signed.
    function test_finalizeRound_relayerChangesMetric_reverts() public {
        uint256 mask = _commitAll(id, 0);
        _warpPastDeadline(id);
        Vote memory v = _voteMsg(id, 0, _stateRoot(id, 0), _aggRoot(id, 0), mask);
        bytes memory sig = _signV(witnesses[0], v);
        v.metric = 1;
        address recovered = _ecrecover(_voteDigest(v, address(market), block.chainid), sig);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotWitness.selector, id, recovered));
        vm.prank(stranger);
        market.finalizeRound(v, sig);
        vm.assertEq(court.voteOf(id, 0, witnesses[0]), bytes32(0), "no vote recorded");
    }

    // ================================================================== finalizeRound: voting

    function test_finalizeRound_firstVote_noQuorum_succeeds() public {
        uint256 mask = _commitAll(id, 0);
        _warpPastDeadline(id);
        bytes32 root = _stateRoot(id, 0);
        bytes32 result = _result(root, _aggRoot(id, 0), mask);

        bytes memory sig = _signV(witnesses[0], _voteMsg(id, 0, root, _aggRoot(id, 0), mask));
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.VoteCast(
            id, 0, witnesses[0], result, keccak256("initial-state"), root, _aggRoot(id, 0), mask, METRIC, sig
        );
        _vote(id, 0, witnesses[0], root, _aggRoot(id, 0), mask);

        RoundRecord memory rr = market.getRound(id, 0);
        vm.assertEq(uint256(rr.status), uint256(RoundStatus.Pending), "still pending");
        vm.assertEq(uint256(rr.voteCount), 1, "voteCount");
        vm.assertEq(rr.firstVote, result, "firstVote");
        vm.assertEq(rr.result, bytes32(0), "no result yet");
        vm.assertEq(court.voteOf(id, 0, witnesses[0]), result, "voteOf");
        vm.assertEq(court.voteOf(id, 0, witnesses[1]), bytes32(0), "no vote");
        vm.assertEq(uint256(market.getWitness(id, witnesses[0]).votes), 1, "witness votes");
        vm.assertEq(market.getTaskState(id).stateRoot, keccak256("initial-state"), "state root unchanged");
        vm.assertEq(uint256(market.getTaskState(id).currentRound), 0, "round still open for votes");
    }

    function test_finalizeRound_sameVoteBeforeQuorum_noop_succeeds() public {
        uint256 mask = _commitAll(id, 0);
        _warpPastDeadline(id);
        _vote(id, 0, witnesses[0], _stateRoot(id, 0), _aggRoot(id, 0), mask);
        bytes32 roundBefore = keccak256(abi.encode(market.getRound(id, 0)));
        vm.recordLogs();
        _vote(id, 0, witnesses[0], _stateRoot(id, 0), _aggRoot(id, 0), mask);
        vm.assertEq(vm.getRecordedLogs().length, 0, "repeated vote emits nothing");
        vm.assertEq(keccak256(abi.encode(market.getRound(id, 0))), roundBefore, "round unchanged");
        vm.assertEq(uint256(market.getWitness(id, witnesses[0]).votes), 1, "counted once");
    }

    function test_finalizeRound_quorum_finalizes_succeeds() public {
        uint256 mask = _commitAll(id, 0);
        _warpPastDeadline(id);
        uint64 opened = market.getTaskState(id).roundOpenedAt;
        uint64 now_ = uint64(block.timestamp);
        bytes32 root = _stateRoot(id, 0);
        bytes32 agg = _aggRoot(id, 0);
        bytes32 result = _result(root, agg, mask);
        uint256 escrowBefore = market.escrowOf(id);

        _prepareQuorum(id, 0, mask);
        bytes memory sig = _signV(witnesses[1], _voteMsg(id, 0, root, agg, mask));
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.VoteCast(
            id, 0, witnesses[1], result, keccak256("initial-state"), root, agg, mask, METRIC, sig
        );
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RoundFinalized(id, 0, result, root, agg, mask);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RoundOpened(id, 1, now_, now_ + ROUND_DURATION);
        _closeQuorum(id, 0, mask);

        RoundRecord memory rr = market.getRound(id, 0);
        vm.assertEq(uint256(rr.status), uint256(RoundStatus.Finalized), "finalized");
        vm.assertEq(uint256(rr.voteCount), 2, "voteCount");
        vm.assertEq(uint256(rr.openedAt), opened, "openedAt");
        vm.assertEq(uint256(rr.closedAt), now_, "closedAt");
        vm.assertEq(rr.result, result, "result");
        vm.assertEq(rr.stateRoot, root, "stateRoot");
        vm.assertEq(rr.aggregateRoot, agg, "aggregateRoot");
        vm.assertEq(rr.acceptedMask, mask, "acceptedMask");
        vm.assertEq(rr.committedMask, 0xf, "committedMask");
        vm.assertEq(rr.prevStateRoot, keccak256("initial-state"), "prevStateRoot = the root it built on");
        vm.assertEq(rr.revokedMask, 0, "nothing revoked");

        TaskState memory t = market.getTaskState(id);
        vm.assertEq(t.stateRoot, root, "task state root advanced");
        vm.assertEq(uint256(t.roundsFinalized), 1, "roundsFinalized");
        vm.assertEq(uint256(t.currentRound), 1, "next round");
        vm.assertEq(uint256(t.roundOpenedAt), now_, "next round opened now");
        vm.assertEq(uint256(t.lastClosedAt), now_, "lastClosedAt");
        vm.assertEq(t.totalWeight, SHARDS, "all shards accepted");
        vm.assertEq(t.feesEarned, 2 * uint256(FEE), "two fees earned");
        vm.assertEq(t.feeBudget, 4 * uint256(FEE), "budget left for 2 more rounds");
        vm.assertEq(market.escrowOf(id), escrowBefore, "no value leaves before seal");

        uint256[4] memory weights = [uint256(2), 3, 2, 3];
        for (uint256 i = 0; i < 4; ++i) {
            TrainerRecord memory r = market.getTrainer(id, trainers[i]);
            vm.assertEq(uint256(r.accepted), 1, "accepted");
            vm.assertEq(r.acceptedWeight, weights[i], "acceptedWeight");
        }
        WitnessRecord memory w0 = market.getWitness(id, witnesses[0]);
        WitnessRecord memory w2 = market.getWitness(id, witnesses[2]);
        vm.assertEq(uint256(w0.matched), 1, "w0 matched");
        vm.assertEq(w0.fees, FEE, "w0 fee");
        vm.assertEq(uint256(w2.votes), 0, "w2 did not vote");
        vm.assertEq(w2.fees, 0, "w2 no fee");
    }

    function test_finalizeRound_thresholdOne_singleVote_succeeds() public {
        TaskSpec memory s = _defaultSpec();
        s.threshold = 1;
        uint256 other = _post(s, POOL);
        _bondAll(other);
        _enrollMany(other, MAX_TRAINERS);
        uint256 mask = _commitAll(other, 0);
        _warpPastDeadline(other);
        _vote(other, 0, witnesses[2], _stateRoot(other, 0), _aggRoot(other, 0), mask);
        _assertRoundStatus(other, 0, RoundStatus.Finalized, "one vote is a 1-of-3 quorum");
        vm.assertEq(market.getWitness(other, witnesses[2]).fees, FEE, "fee");
    }

    function test_finalizeRound_metricNotPartOfResult_succeeds() public {
        uint256 mask = _commitAll(id, 0);
        _warpPastDeadline(id);
        _voteWithMetric(_voteMsg(id, 0, _stateRoot(id, 0), _aggRoot(id, 0), mask), witnesses[0], 100);
        _voteWithMetric(_voteMsg(id, 0, _stateRoot(id, 0), _aggRoot(id, 0), mask), witnesses[1], 999);
        _assertRoundStatus(id, 0, RoundStatus.Finalized, "different metrics still match");
        vm.assertEq(uint256(market.getWitness(id, witnesses[1]).dissents), 0, "no dissent");
    }

    function test_finalizeRound_partialAccept_succeeds() public {
        uint256 committed = _commitAll(id, 0);
        _warpPastDeadline(id);
        uint256 accepted = committed & ~uint256(1 << 1); // fragment 1 rejected
        _finalize(id, 0, accepted);

        vm.assertEq(market.getTaskState(id).totalWeight, SHARDS - 3, "rejected fragment's 3 shards not counted");
        TrainerRecord memory rejected = market.getTrainer(id, trainers[1]);
        vm.assertEq(uint256(rejected.accepted), 0, "rejected");
        vm.assertEq(rejected.acceptedWeight, 0, "no weight");
        vm.assertEq(uint256(rejected.submitted), 1, "but it submitted");
        vm.assertEq(uint256(rejected.missed), 0, "a rejected commit is not a miss");
        vm.assertEq(market.getTrainer(id, trainers[3]).acceptedWeight, 3, "accepted weight");
    }

    function test_finalizeRound_emptyAcceptedMask_succeeds() public {
        _commitAll(id, 0);
        _warpPastDeadline(id);
        _finalize(id, 0, 0);
        _assertRoundStatus(id, 0, RoundStatus.Finalized, "finalized with nothing accepted");
        vm.assertEq(market.getTaskState(id).totalWeight, 0, "no weight");
    }

    function test_finalizeRound_dissent_recorded_succeeds() public {
        uint256 mask = _commitAll(id, 0);
        _warpPastDeadline(id);
        bytes32 honest = _result(_stateRoot(id, 0), _aggRoot(id, 0), mask);
        bytes32 forked = _result(ALT_ROOT, _aggRoot(id, 0), mask);

        _vote(id, 0, witnesses[0], _stateRoot(id, 0), _aggRoot(id, 0), mask);
        bytes memory sig = _signV(witnesses[1], _voteMsg(id, 0, ALT_ROOT, _aggRoot(id, 0), mask));
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.VoteCast(
            id, 0, witnesses[1], forked, keccak256("initial-state"), ALT_ROOT, _aggRoot(id, 0), mask, METRIC, sig
        );
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.DissentRecorded(id, 0, witnesses[1], forked, honest);
        _vote(id, 0, witnesses[1], ALT_ROOT, _aggRoot(id, 0), mask);

        _assertRoundStatus(id, 0, RoundStatus.Pending, "two different votes: no quorum");
        vm.assertEq(uint256(market.getRound(id, 0).voteCount), 2, "voteCount");
        vm.assertEq(uint256(market.getWitness(id, witnesses[1]).dissents), 1, "dissent counted");

        // The third witness sides with the first: the honest result finalizes.
        _vote(id, 0, witnesses[2], _stateRoot(id, 0), _aggRoot(id, 0), mask);
        RoundRecord memory rr = market.getRound(id, 0);
        vm.assertEq(uint256(rr.status), uint256(RoundStatus.Finalized), "finalized");
        vm.assertEq(rr.result, honest, "honest result");
        vm.assertEq(market.getWitness(id, witnesses[0]).fees, FEE, "w0 earns");
        vm.assertEq(market.getWitness(id, witnesses[1]).fees, 0, "dissenter earns nothing");
        vm.assertEq(market.getWitness(id, witnesses[2]).fees, FEE, "w2 earns");
        vm.assertEq(uint256(market.getWitness(id, witnesses[1]).matched), 0, "dissenter matched nothing");
    }

    function test_finalizeRound_dissentingResultReachesQuorum_succeeds() public {
        uint256 mask = _commitAll(id, 0);
        _warpPastDeadline(id);
        _vote(id, 0, witnesses[0], _stateRoot(id, 0), _aggRoot(id, 0), mask);
        _vote(id, 0, witnesses[1], ALT_ROOT, _aggRoot(id, 0), mask);
        _vote(id, 0, witnesses[2], ALT_ROOT, _aggRoot(id, 0), mask);
        RoundRecord memory rr = market.getRound(id, 0);
        vm.assertEq(rr.stateRoot, ALT_ROOT, "the majority result finalizes");
        vm.assertEq(market.getTaskState(id).stateRoot, ALT_ROOT, "task follows it");
        vm.assertEq(market.getWitness(id, witnesses[0]).fees, 0, "first voter in the minority earns nothing");
        vm.assertEq(market.getWitness(id, witnesses[2]).fees, FEE, "majority earns");
        vm.assertEq(uint256(market.getWitness(id, witnesses[2]).dissents), 1, "dissent is relative to the first vote");
    }

    function test_finalizeRound_changeVote_reverts() public {
        uint256 mask = _commitAll(id, 0);
        _warpPastDeadline(id);
        _vote(id, 0, witnesses[0], _stateRoot(id, 0), _aggRoot(id, 0), mask);
        bytes32 previous = _result(_stateRoot(id, 0), _aggRoot(id, 0), mask);
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineAlreadyVoted.selector, id, uint32(0), witnesses[0], previous)
        );
        _voteWithMetric(_voteMsg(id, 0, ALT_ROOT, _aggRoot(id, 0), mask), witnesses[0], 0);
        vm.assertEq(court.voteOf(id, 0, witnesses[0]), previous, "vote unchanged");
    }

    // ================================================================== finalizeRound: idempotence and forks

    function _snapshot() internal view returns (bytes32 h) {
        h = keccak256(abi.encode(market.getRound(id, 0), market.getRound(id, 1), market.getTaskState(id)));
        for (uint256 i = 0; i < N_WITNESSES; ++i) {
            h = keccak256(
                abi.encode(
                    h,
                    market.getWitness(id, witnesses[i]),
                    court.voteOf(id, 0, witnesses[i]),
                    market.creditOf(witnesses[i])
                )
            );
        }
        for (uint256 i = 0; i < MAX_TRAINERS; ++i) {
            h = keccak256(abi.encode(h, market.getTrainer(id, trainers[i]), market.creditOf(trainers[i])));
        }
    }

    function test_finalizeRound_refinalizeSameResult_changesNothing_succeeds() public {
        uint256 mask = _runRound(id, 0);
        bytes32 before = _snapshot();
        uint256 balanceBefore = address(market).balance;
        WitnessRecord memory w2Before = market.getWitness(id, witnesses[2]);

        vm.recordLogs();
        // A witness that voted, and one that did not, both repeat the finalized result.
        _vote(id, 0, witnesses[0], _stateRoot(id, 0), _aggRoot(id, 0), mask);
        _vote(id, 0, witnesses[2], _stateRoot(id, 0), _aggRoot(id, 0), mask);
        vm.assertEq(vm.getRecordedLogs().length, 0, "no event on idempotent finalize");

        vm.assertEq(_snapshot(), before, "state unchanged");
        vm.assertEq(address(market).balance, balanceBefore, "balance unchanged");
        WitnessRecord memory w2 = market.getWitness(id, witnesses[2]);
        vm.assertEq(uint256(w2.votes), uint256(w2Before.votes), "late witness: no vote recorded");
        vm.assertEq(w2.fees, 0, "late witness: no fee");
        vm.assertEq(court.voteOf(id, 0, witnesses[2]), bytes32(0), "late witness: no vote stored");
    }

    function test_finalizeRound_refinalizeAfterSeal_succeeds() public {
        uint256 mask = _runRound(id, 0);
        _runRound(id, 1);
        _runRound(id, 2);
        _warpAndSeal(id);
        bytes32 before = keccak256(abi.encode(market.getRound(id, 0), market.getTaskState(id)));
        vm.recordLogs();
        _vote(id, 0, witnesses[1], _stateRoot(id, 0), _aggRoot(id, 0), mask);
        vm.assertEq(vm.getRecordedLogs().length, 0, "silent");
        vm.assertEq(keccak256(abi.encode(market.getRound(id, 0), market.getTaskState(id))), before, "unchanged");

        bytes32 finalized = _result(_stateRoot(id, 0), _aggRoot(id, 0), mask);
        bytes32 offered = _result(ALT_ROOT, _aggRoot(id, 0), mask);
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.ConflictingFinalize.selector, uint32(0), finalized, offered)
        );
        _voteWithMetric(_voteMsg(id, 0, ALT_ROOT, _aggRoot(id, 0), mask), witnesses[2], 0);
    }

    function test_finalizeRound_conflictAfterFinalize_reverts() public {
        uint256 mask = _runRound(id, 0);
        bytes32 finalized = _result(_stateRoot(id, 0), _aggRoot(id, 0), mask);

        // A different state root.
        bytes32 offered = _result(ALT_ROOT, _aggRoot(id, 0), mask);
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.ConflictingFinalize.selector, uint32(0), finalized, offered)
        );
        _voteWithMetric(_voteMsg(id, 0, ALT_ROOT, _aggRoot(id, 0), mask), witnesses[2], 0);

        // Same state root, different accepted set, from a witness that voted.
        offered = _result(_stateRoot(id, 0), _aggRoot(id, 0), mask & 0x7);
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.ConflictingFinalize.selector, uint32(0), finalized, offered)
        );
        _voteWithMetric(_voteMsg(id, 0, _stateRoot(id, 0), _aggRoot(id, 0), mask & 0x7), witnesses[0], 0);

        // Different aggregate root.
        offered = _result(_stateRoot(id, 0), ALT_ROOT, mask);
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.ConflictingFinalize.selector, uint32(0), finalized, offered)
        );
        _voteWithMetric(_voteMsg(id, 0, _stateRoot(id, 0), ALT_ROOT, mask), witnesses[1], 0);

        vm.assertEq(market.getRound(id, 0).result, finalized, "finalized result never changes");
    }

    function testFuzz_finalizeRound_conflictAfterFinalize_reverts(bytes32 root, bytes32 agg, uint256 accepted) public {
        uint256 mask = _runRound(id, 0);
        bytes32 finalized = _result(_stateRoot(id, 0), _aggRoot(id, 0), mask);
        vm.assume(root != bytes32(0));
        bytes32 offered = _result(root, agg, accepted);
        if (offered == finalized) return;
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.ConflictingFinalize.selector, uint32(0), finalized, offered)
        );
        _voteWithMetric(_voteMsg(id, 0, root, agg, accepted), witnesses[2], 0);
    }

    // ================================================================== carryForward

    function test_carryForward_unknownTask_reverts() public {
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, 4));
        market.carryForward(4, 0);
    }

    function test_carryForward_beforeStart_reverts() public {
        uint256 other = _postDefault();
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, other, TaskStatus.Enrolling, TaskStatus.Running
            )
        );
        market.carryForward(other, 0);
    }

    function test_carryForward_wrongRound_reverts() public {
        _warpPastGrace(id);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongRound.selector, id, uint32(1), uint32(0)));
        market.carryForward(id, 1);
    }

    function test_carryForward_finalizedRound_reverts() public {
        _runRound(id, 0);
        warpTo(block.timestamp + ROUND_DURATION + GRACE + 1);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongRound.selector, id, uint32(0), uint32(1)));
        market.carryForward(id, 0);
    }

    function test_carryForward_atGraceEnd_reverts() public {
        _commit(id, 0, trainers[0]); // a round with a commitment waits for the grace window
        uint64 earliest = uint64(_deadline(id) + GRACE);
        warpTo(earliest);
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineGraceWindowOpen.selector, id, uint32(0), earliest)
        );
        market.carryForward(id, 0);
    }

    function testFuzz_carryForward_timing(uint256 offset) public {
        _commit(id, 0, trainers[0]); // a round with a commitment (an empty one: RoundDeadline.t.sol)
        uint64 opened = market.getTaskState(id).roundOpenedAt;
        uint64 earliest = opened + ROUND_DURATION + GRACE;
        offset = bound(offset, 0, 2 * (earliest - opened));
        warpTo(opened + offset);
        if (opened + offset <= earliest) {
            vm.expectRevert(
                abi.encodeWithSelector(ISynclineEvents.SynclineGraceWindowOpen.selector, id, uint32(0), earliest)
            );
            market.carryForward(id, 0);
        } else {
            market.carryForward(id, 0);
            _assertRoundStatus(id, 0, RoundStatus.CarriedForward, "carried");
            vm.assertEq(uint256(market.getTaskState(id).roundOpenedAt), opened + offset, "next round opens now");
        }
    }

    function test_carryForward_keepsPreviousStateRoot_succeeds() public {
        _runRound(id, 0); // finalized: state root = _stateRoot(id, 0)
        bytes32 previous = _stateRoot(id, 0);
        uint256 mask = _commitAll(id, 1);
        _warpPastGrace(id);
        // One vote, no quorum: it must not count.
        _vote(id, 1, witnesses[0], _stateRoot(id, 1), _aggRoot(id, 1), mask);
        uint64 opened = market.getTaskState(id).roundOpenedAt;
        uint64 now_ = uint64(block.timestamp);
        TaskState memory before = market.getTaskState(id);

        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RoundCarriedForward(id, 1, previous, stranger);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RoundOpened(id, 2, now_, now_ + ROUND_DURATION);
        vm.prank(stranger); // anyone may call
        market.carryForward(id, 1);

        RoundRecord memory rr = market.getRound(id, 1);
        vm.assertEq(uint256(rr.status), uint256(RoundStatus.CarriedForward), "status");
        vm.assertEq(rr.stateRoot, previous, "previous root carried");
        vm.assertEq(rr.result, bytes32(0), "no result");
        vm.assertEq(uint256(rr.openedAt), opened, "openedAt");
        vm.assertEq(uint256(rr.closedAt), now_, "closedAt");
        TaskState memory t = market.getTaskState(id);
        vm.assertEq(t.stateRoot, previous, "task keeps the previous root");
        vm.assertEq(uint256(t.roundsCarried), 1, "roundsCarried");
        vm.assertEq(uint256(t.roundsFinalized), 1, "roundsFinalized");
        vm.assertEq(uint256(t.currentRound), 2, "advanced");
        vm.assertEq(uint256(t.roundOpenedAt), now_, "opened now");
        vm.assertEq(t.totalWeight, before.totalWeight, "no weight for a carried round");
        vm.assertEq(t.feesEarned, before.feesEarned, "no fee for a carried round");
        vm.assertEq(t.feeBudget, before.feeBudget, "fee budget kept for the sponsor");
        vm.assertEq(uint256(market.getTrainer(id, trainers[0]).consecutiveMissed), 0, "committers did not miss");
        vm.assertEq(uint256(market.getTrainer(id, trainers[0]).accepted), 1, "only round 0 accepted");
    }

    /// A round nobody committed to says the shared infrastructure (blob service, RPC, the run's
    /// state) was down, not that one trainer was lazy: no miss is counted, so an outage as long as
    /// the whole run evicts and slashes no one (issue 10: no honest party is slashed by an outage).
    function test_carryForward_nobodyCommitted_countsNoMiss_succeeds() public {
        vm.recordLogs();
        for (uint32 r = 0; r < ROUNDS; ++r) {
            _warpPastGrace(id);
            market.carryForward(id, r);
        }
        vm.assertEq(_countLogs(vm.getRecordedLogs(), ISynclineEvents.RoundMissed.selector), 0, "no RoundMissed");
        for (uint256 i = 0; i < trainers.length; ++i) {
            TrainerRecord memory r = market.getTrainer(id, trainers[i]);
            if (!r.enrolled) continue;
            vm.assertFalse(r.evicted, "nobody evicted");
            vm.assertEq(uint256(r.missed), 0, "no miss");
            vm.assertEq(uint256(r.slashed), 0, "no slash");
        }
        // One committer is enough to tell a live run from an outage: the others miss again.
        uint256 other = _postAndStart();
        _commit(other, 0, trainers[0]);
        _warpPastGrace(other);
        market.carryForward(other, 0);
        vm.assertEq(uint256(market.getTrainer(other, trainers[1]).missed), 1, "a miss beside a committer counts");
        vm.assertEq(uint256(market.getTrainer(other, trainers[0]).missed), 0, "the committer did not miss");
    }

    function test_carryForward_firstRound_keepsInitialRoot_succeeds() public {
        _warpPastGrace(id);
        market.carryForward(id, 0);
        vm.assertEq(market.getRound(id, 0).stateRoot, keccak256("initial-state"), "initial root carried");
        vm.assertEq(market.getTaskState(id).stateRoot, keccak256("initial-state"), "task root");
    }

    function test_finalizeRound_afterCarryForward_reverts() public {
        uint256 mask = _commitAll(id, 0);
        _warpPastGrace(id);
        market.carryForward(id, 0);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineRoundCarriedForward.selector, id, uint32(0)));
        _voteWithMetric(_voteMsg(id, 0, _stateRoot(id, 0), _aggRoot(id, 0), mask), witnesses[0], 0);
    }

    function test_finalizeRound_afterGraceBeforeCarry_succeeds() public {
        uint256 mask = _commitAll(id, 0);
        _warpPastGrace(id);
        warpTo(block.timestamp + 1 days);
        _finalize(id, 0, mask);
        _assertRoundStatus(id, 0, RoundStatus.Finalized, "late quorum still finalizes");
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongRound.selector, id, uint32(0), uint32(1)));
        market.carryForward(id, 0);
    }

    function test_carryForward_lastRound_completesRun_succeeds() public {
        _runRound(id, 0);
        _runRound(id, 1);
        _warpPastGrace(id);
        uint64 now_ = uint64(block.timestamp);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RunCompleted(id, _stateRoot(id, 1), now_ + CHALLENGE_WINDOW);
        market.carryForward(id, 2);
        _assertStatus(id, TaskStatus.AwaitingSeal, "awaiting seal");
        vm.assertEq(uint256(market.getTaskState(id).currentRound), 2, "current round stays the last one");
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, id, TaskStatus.AwaitingSeal, TaskStatus.Running
            )
        );
        market.carryForward(id, 2);
    }

    function test_finalizeRound_lastRound_completesRun_succeeds() public {
        _runRound(id, 0);
        _runRound(id, 1);
        uint256 mask = _commitAll(id, 2);
        _warpPastDeadline(id);
        uint64 now_ = uint64(block.timestamp);
        _prepareQuorum(id, 2, mask);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RunCompleted(id, _stateRoot(id, 2), now_ + CHALLENGE_WINDOW);
        _closeQuorum(id, 2, mask);
        TaskState memory t = market.getTaskState(id);
        vm.assertEq(uint256(t.status), uint256(TaskStatus.AwaitingSeal), "awaiting seal");
        vm.assertEq(uint256(t.roundsFinalized), 3, "all rounds finalized");
        vm.assertEq(uint256(t.lastClosedAt), now_, "lastClosedAt");
        vm.assertEq(t.feeBudget, 0, "fee budget exactly spent");
        vm.assertEq(t.feesEarned, 6 * uint256(FEE), "fees earned");
    }

    // ================================================================== worst case: 64 trainers

    function _post64() internal returns (uint256 big) {
        TaskSpec memory s = _defaultSpec();
        s.minTrainers = 1;
        s.maxTrainers = 64;
        s.shardCount = 256;
        big = _post(s, POOL);
        _bondAll(big);
        _enrollMany(big, 64);
        _assertStatus(big, TaskStatus.Running, "auto-started with 64");
    }

    function test_finalizeRound_quorumWith64Trainers_succeeds() public {
        uint256 big = _post64();
        uint256 mask = _commitAll(big, 0);
        _warpPastDeadline(big);
        _prepareQuorum(big, 0, mask);
        uint256 g = gasleft();
        _closeQuorum(big, 0, mask);
        g -= gasleft();
        vm.assertLt(g, 3_000_000, "closing vote over 64 trainers stays well under a block");
        vm.assertEq(market.getTaskState(big).totalWeight, 256, "all 256 shards accepted");
    }

    function test_finalizeRound_evictionWith64Trainers_succeeds() public {
        uint256 big = _post64();
        // 63 trainers miss two rounds (one commits, so the rounds are no outage): the closing vote
        // of round 1 evicts 63 at once and hands the last one every shard.
        address keep = market.getTrainers(big)[0];
        _commit(big, 0, keep);
        _warpPastDeadline(big);
        _finalize(big, 0, 1);
        _commit(big, 1, keep);
        _warpPastDeadline(big);
        _prepareQuorum(big, 1, 1);
        _closeQuorum(big, 1, 1);
        vm.assertEq(uint256(market.getTaskState(big).active), 1, "63 evicted");
        _assertShardPartition(big);
    }

    function test_finalizeRound_rebalanceWith64Trainers_succeeds() public {
        uint256 big = _post64();
        address skip = market.getTrainers(big)[0];
        for (uint32 r = 0; r < 2; ++r) {
            uint256 mask;
            address[] memory ts = market.getTrainers(big);
            for (uint256 i = 1; i < ts.length; ++i) {
                _commit(big, r, ts[i]);
                mask |= uint256(1) << i;
            }
            _warpPastDeadline(big);
            _finalize(big, r, mask);
        }
        vm.assertTrue(market.getTrainer(big, skip).evicted, "evicted");
        _assertShardPartition(big);
    }
}
