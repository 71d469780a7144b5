// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "../base/Vm.sol";

import {CourtTestBase} from "./CourtTestBase.sol";
import {ISynclineEvents} from "../../src/ISynclineEvents.sol";
import {
    TaskSpec,
    TaskState,
    TaskStatus,
    AggregationRule,
    RoundRecord,
    RoundStatus,
    TrainerRecord,
    WitnessRecord,
    Commitment,
    Vote,
    Challenge,
    ChallengeKind,
    ChallengeStatus
} from "../../src/SynclineTypes.sol";

/// @notice `proveTrainerEquivocation`: two different signed commitments for one (task, round, fragment).
contract TrainerEquivocationTest is CourtTestBase {
    uint256 internal taskId;

    function setUp() public override {
        super.setUp();
        taskId = _startRule(AggregationRule.Mean);
        _commitAll(taskId, 0, ALL);
    }

    function _pair(uint256 task, uint32 round, uint16 f)
        internal
        view
        returns (Commitment memory a, bytes memory sa, Commitment memory b, bytes memory sb)
    {
        address t = market.getTrainers(task)[f];
        a = _commitment(task, round, f, _gradRoot(round, f));
        b = _commitment(task, round, f, keccak256(abi.encode("another root", round, f)));
        sa = _signC(t, a);
        sb = _signC(t, b);
    }

    function _prove(Commitment memory a, bytes memory sa, Commitment memory b, bytes memory sb)
        internal
        returns (uint256)
    {
        vm.prank(challenger);
        return court.proveTrainerEquivocation{value: CHALLENGE_BOND}(a, sa, b, sb);
    }

    function _expectProveRevert(
        bytes memory err,
        Commitment memory a,
        bytes memory sa,
        Commitment memory b,
        bytes memory sb
    ) internal {
        vm.prank(challenger);
        vm.expectRevert(err);
        court.proveTrainerEquivocation{value: CHALLENGE_BOND}(a, sa, b, sb);
    }

    /// @dev The signer the market recovers from `sig` over `c`.
    function _recovered(Commitment memory c, bytes memory sig) internal view returns (address) {
        return _ecrecover(_commitmentDigest(c, address(market), block.chainid), sig);
    }

    // ------------------------------------------------------------------ proven

    /// A proven equivocation in a finalized round: the whole stake is slashed, the trainer is
    /// evicted, its accepted reward for the round revoked; the challenger gets bond + 50%; the run
    /// goes on with the shards rebalanced, and the seal pays everyone to the wei.
    function test_proveTrainerEquivocation_finalizedRound_slashesEvictsRevokes() public {
        bytes32 s0 = keccak256("state-0");
        _finalize(taskId, 0, s0, ALL);
        (Commitment memory a, bytes memory sa, Commitment memory b, bytes memory sb) = _pair(taskId, 0, 2);
        address cheat = trainers[2];
        uint256 balanceBefore = address(market).balance;

        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.StakeSlashed(taskId, cheat, STAKE, 0);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.TrainerEvicted(taskId, cheat, 0);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RewardRevoked(taskId, 0, cheat, 2);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ChallengeResolved(1, taskId, ChallengeStatus.Upheld, STAKE, STAKE / 2);
        uint256 id = _prove(a, sa, b, sb);

        vm.assertEq(id, 1, "first challenge id");
        vm.assertEq(court.challengeCount(), 1, "challengeCount");
        Challenge memory c = court.getChallenge(id);
        vm.assertEq(uint256(c.kind), uint256(ChallengeKind.TrainerEquivocation), "kind");
        vm.assertEq(uint256(c.status), uint256(ChallengeStatus.Upheld), "upheld");
        vm.assertEq(c.fragment, 2, "fragment");
        vm.assertEq(c.round, 0, "round");
        vm.assertEq(c.challenger, challenger, "challenger");
        vm.assertEq(c.accused, cheat, "accused");
        vm.assertEq(c.taskId, taskId, "taskId");
        vm.assertEq(c.bond, CHALLENGE_BOND, "bond");
        vm.assertEq(c.slashed, STAKE, "slashed");
        vm.assertEq(c.openedAt, block.timestamp, "openedAt");
        vm.assertEq(c.deadline, block.timestamp + CHALLENGE_WINDOW, "deadline");

        TrainerRecord memory r = market.getTrainer(taskId, cheat);
        vm.assertEq(r.stake, 0, "stake gone");
        vm.assertEq(r.slashed, STAKE, "slashed whole stake");
        vm.assertTrue(r.evicted, "evicted");
        vm.assertEq(r.shardMask, 0, "no shards");
        vm.assertEq(r.accepted, 0, "accepted revoked");
        vm.assertEq(r.acceptedWeight, 0, "weight revoked");
        RoundRecord memory rr = market.getRound(taskId, 0);
        vm.assertEq(rr.revokedMask, 1 << 2, "revokedMask");
        vm.assertEq(uint256(rr.status), uint256(RoundStatus.Finalized), "round stays finalized");
        TaskState memory t = market.getTaskState(taskId);
        vm.assertEq(t.active, N_TRAINERS - 1, "active");
        vm.assertEq(t.totalWeight, 4 * WEIGHT, "totalWeight");
        vm.assertEq(t.rewardPool, POOL + STAKE - STAKE / 2, "pool: slash minus bounty");
        vm.assertEq(t.stakeHeld, (N_TRAINERS - 1) * uint256(STAKE), "stakeHeld");
        vm.assertEq(t.openChallenges, 0, "synchronous: nothing open");
        vm.assertEq(t.stateRoot, s0, "state root untouched");
        vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND + STAKE / 2, "challenger: bond + 50%");
        vm.assertEq(address(market).balance, balanceBefore + CHALLENGE_BOND, "bond received");
        _assertMoney();
        // The other trainers share the 10 shards: 2, 3, 2, 3.
        vm.assertEq(market.getTrainer(taskId, trainers[0]).shardMask, 0x003, "f0 shards");
        vm.assertEq(market.getTrainer(taskId, trainers[1]).shardMask, 0x01c, "f1 shards");
        vm.assertEq(market.getTrainer(taskId, trainers[3]).shardMask, 0x060, "f3 shards");
        vm.assertEq(market.getTrainer(taskId, trainers[4]).shardMask, 0x380, "f4 shards");

        // Round 1 without the cheat, then seal.
        uint256 rest = ALL & ~uint256(1 << 2);
        _commitAll(taskId, 1, rest);
        _finalize(taskId, 1, keccak256("state-1"), rest);
        _seal(taskId);

        uint256 pool = POOL + STAKE - STAKE / 2;
        uint256 paid = _addTrainerPayouts(pool, [uint256(4), 5, 0, 4, 5], 1 << 2);
        _add(witnesses[0], 2 * FEE + WITNESS_BOND);
        _add(witnesses[1], 2 * FEE + WITNESS_BOND);
        _add(witnesses[2], WITNESS_BOND);
        _add(challenger, CHALLENGE_BOND + STAKE / 2);
        _add(sponsor, pool - paid);
        _checkExpected();
        vm.assertEq(court.getReceipt(taskId).trainers[2].slashed, STAKE, "receipt slashed");
        vm.assertEq(court.getReceipt(taskId).trainers[2].stakeRefund, 0, "receipt refund");
        vm.assertTrue(court.getReceipt(taskId).trainers[2].evicted, "receipt evicted");
    }

    /// The open round can be challenged while it is open (no reward to revoke yet).
    function test_proveTrainerEquivocation_openRound_succeeds() public {
        (Commitment memory a, bytes memory sa, Commitment memory b, bytes memory sb) = _pair(taskId, 0, 1);
        vm.recordLogs();
        uint256 id = _prove(a, sa, b, sb);
        vm.assertEq(uint256(court.getChallenge(id).status), uint256(ChallengeStatus.Upheld), "upheld");
        vm.assertEq(market.getTrainer(taskId, trainers[1]).stake, 0, "slashed");
        vm.assertTrue(market.getTrainer(taskId, trainers[1]).evicted, "evicted");
        vm.assertEq(_countLogs(vm.getRecordedLogs(), ISynclineEvents.RewardRevoked.selector), 0, "no RewardRevoked");
        vm.assertEq(market.getRound(taskId, 0).revokedMask, 0, "nothing revoked yet");
        // The evicted trainer cannot commit any more.
        Commitment memory c = _commitment(taskId, 1, 1, keccak256("x"));
        bytes memory sig = _signC(trainers[1], c);
        _finalize(taskId, 0, keccak256("s0"), ALL & ~uint256(2));
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotActiveTrainer.selector, taskId, trainers[1]));
        market.commitSubmission(c, sig);
        _assertMoney();
    }

    /// After the run completed (AwaitingSeal) a proof still lands, within the window.
    function test_proveTrainerEquivocation_awaitingSeal_succeeds() public {
        _finalize(taskId, 0, keccak256("s0"), ALL);
        _commitAll(taskId, 1, ALL);
        _finalize(taskId, 1, keccak256("s1"), ALL);
        vm.assertEq(uint256(market.getTaskState(taskId).status), uint256(TaskStatus.AwaitingSeal), "awaiting");
        (Commitment memory a, bytes memory sa, Commitment memory b, bytes memory sb) = _pair(taskId, 1, 4);
        _prove(a, sa, b, sb);
        vm.assertEq(market.getTrainer(taskId, trainers[4]).acceptedWeight, WEIGHT, "round 1 revoked, round 0 kept");
        vm.assertEq(market.getTrainer(taskId, trainers[0]).shardMask, 0x003, "no rebalance after the run");
        _seal(taskId);
        uint256 pool = POOL + STAKE / 2;
        uint256[N_TRAINERS] memory w = _weights(2 * WEIGHT);
        w[4] = WEIGHT;
        uint256 paid = _addTrainerPayouts(pool, w, 1 << 4);
        _add(witnesses[0], 2 * FEE + WITNESS_BOND);
        _add(witnesses[1], 2 * FEE + WITNESS_BOND);
        _add(witnesses[2], WITNESS_BOND);
        _add(challenger, CHALLENGE_BOND + STAKE / 2);
        _add(sponsor, pool - paid);
        _checkExpected();
    }

    /// Any two different commitments for one slot prove it (fuzzed second commitment).
    function testFuzz_proveTrainerEquivocation_anyDifference(
        bytes32 payloadHash,
        bytes32 chunkRoot,
        bytes32 checkpointRoot,
        uint8 fragment,
        bool otherUri
    ) public {
        uint16 f = uint16(bound(fragment, 0, N_TRAINERS - 1));
        Commitment memory a = _commitment(taskId, 0, f, _gradRoot(0, f));
        Commitment memory b =
            Commitment(taskId, 0, f, payloadHash, chunkRoot, checkpointRoot, otherUri ? "http://dead.invalid/x" : URI);
        vm.assume(
            a.payloadHash != b.payloadHash || a.chunkRoot != b.chunkRoot || a.checkpointRoot != b.checkpointRoot
                || otherUri
        );
        bytes memory sa = _signC(trainers[f], a);
        bytes memory sb = _signC(trainers[f], b);
        _prove(b, sb, a, sa);
        vm.assertEq(market.getTrainer(taskId, trainers[f]).slashed, STAKE, "slashed");
        vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND + STAKE / 2, "bounty");
        _assertMoney();
    }

    /// The uri is signed: the same gradient announced at two locators is two different commitments.
    function test_proveTrainerEquivocation_uriOnly_slashes() public {
        Commitment memory a = _commitment(taskId, 0, 2, _gradRoot(0, 2));
        Commitment memory b = _commitment(taskId, 0, 2, _gradRoot(0, 2));
        b.uri = "http://elsewhere.example/x";
        _prove(a, _signC(trainers[2], a), b, _signC(trainers[2], b));
        vm.assertEq(market.getTrainer(taskId, trainers[2]).slashed, STAKE, "slashed");
        _assertMoney();
    }

    // ------------------------------------------------------------------ not an equivocation

    function test_proveTrainerEquivocation_sameMessageTwice_reverts() public {
        (Commitment memory a, bytes memory sa,,) = _pair(taskId, 0, 0);
        _expectProveRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotEquivocation.selector), a, sa, a, sa);
        // A second signature of the same message (high-s twin) is still the same message.
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineNotEquivocation.selector), a, sa, a, _malleate(sa)
        );
    }

    function test_proveTrainerEquivocation_differentSlots_revert() public {
        (Commitment memory a, bytes memory sa, Commitment memory b,) = _pair(taskId, 0, 0);
        bytes memory err = abi.encodeWithSelector(ISynclineEvents.SynclineNotEquivocation.selector);
        // Different round.
        b.round = 1;
        _expectProveRevert(err, a, sa, b, _signC(trainers[0], b));
        // Different fragment (same signer would not even hold it).
        b.round = 0;
        b.fragment = 1;
        _expectProveRevert(err, a, sa, b, _signC(trainers[1], b));
        // Different task.
        b.fragment = 0;
        b.taskId = taskId + 1;
        _expectProveRevert(err, a, sa, b, _signC(trainers[0], b));
    }

    function testFuzz_proveTrainerEquivocation_differentSlot_reverts(uint256 task2, uint32 round2, uint16 fragment2)
        public
    {
        (Commitment memory a, bytes memory sa, Commitment memory b, bytes memory sb) = _pair(taskId, 0, 0);
        vm.assume(task2 != taskId || round2 != 0 || fragment2 != 0);
        b.taskId = task2;
        b.round = round2;
        b.fragment = fragment2;
        _expectProveRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotEquivocation.selector), a, sa, b, sb);
    }

    function test_proveTrainerEquivocation_unenrolledFragment_reverts() public {
        Commitment memory a = _commitment(taskId, 0, N_TRAINERS, keccak256("a"));
        Commitment memory b = _commitment(taskId, 0, N_TRAINERS, keccak256("b"));
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineNotEquivocation.selector),
            a,
            _signC(stranger, a),
            b,
            _signC(stranger, b)
        );
    }

    // ------------------------------------------------------------------ signatures

    function test_proveTrainerEquivocation_signedBySomeoneElse_reverts() public {
        (Commitment memory a, bytes memory sa, Commitment memory b, bytes memory sb) = _pair(taskId, 0, 2);
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineWrongSigner.selector, trainers[3], trainers[2]),
            a,
            sa,
            b,
            _signC(trainers[3], b)
        );
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineWrongSigner.selector, stranger, trainers[2]),
            a,
            _signC(stranger, a),
            b,
            sb
        );
    }

    function testFuzz_proveTrainerEquivocation_foreignKey_reverts(uint256 pk) public {
        pk = bound(pk, 1, SECP256K1_N - 1);
        address signer = vm.addr(pk);
        vm.assume(signer != trainers[2]);
        (Commitment memory a, bytes memory sa, Commitment memory b,) = _pair(taskId, 0, 2);
        bytes memory sb = _signDigest(pk, _commitmentDigest(b, address(market), block.chainid));
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineWrongSigner.selector, signer, trainers[2]), a, sa, b, sb
        );
    }

    /// Signatures made for task 1 do not prove anything in task 2, where the trainer also trains.
    function test_proveTrainerEquivocation_replayFromAnotherTask_reverts() public {
        uint256 task2 = _startRule(AggregationRule.Mean);
        (Commitment memory a, bytes memory sa, Commitment memory b, bytes memory sb) = _pair(taskId, 0, 0);
        a.taskId = task2;
        b.taskId = task2;
        address signer = _recovered(a, sa);
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineWrongSigner.selector, signer, trainers[0]), a, sa, b, sb
        );
    }

    function test_proveTrainerEquivocation_replayFromAnotherChain_reverts() public {
        (Commitment memory a,, Commitment memory b,) = _pair(taskId, 0, 0);
        uint256 pk = _keyOf(trainers[0]);
        bytes memory sa = _signDigest(pk, _commitmentDigest(a, address(market), 999));
        bytes memory sb = _signDigest(pk, _commitmentDigest(b, address(market), 999));
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineWrongSigner.selector, _recovered(a, sa), trainers[0]),
            a,
            sa,
            b,
            sb
        );
        // And the honest signatures stop working once the chain id changes (the domain follows it).
        (, bytes memory ha,, bytes memory hb) = _pair(taskId, 0, 0);
        vm.chainId(999);
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineWrongSigner.selector, _recovered(a, ha), trainers[0]),
            a,
            ha,
            b,
            hb
        );
        // Signed on 999, they work on 999.
        _prove(a, sa, b, sb);
        vm.assertEq(market.getTrainer(taskId, trainers[0]).slashed, STAKE, "proven on its own chain");
    }

    function test_proveTrainerEquivocation_replayFromAnotherMarket_reverts() public {
        address other = vm.deployCode("SynclineMarket.sol:SynclineMarket", abi.encode(courtModule));
        (Commitment memory a,, Commitment memory b,) = _pair(taskId, 0, 0);
        uint256 pk = _keyOf(trainers[0]);
        bytes memory sa = _signDigest(pk, _commitmentDigest(a, other, block.chainid));
        bytes memory sb = _signDigest(pk, _commitmentDigest(b, other, block.chainid));
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineWrongSigner.selector, _recovered(a, sa), trainers[0]),
            a,
            sa,
            b,
            sb
        );
    }

    function test_proveTrainerEquivocation_malformedSignature_reverts() public {
        (Commitment memory a, bytes memory sa, Commitment memory b, bytes memory sb) = _pair(taskId, 0, 0);
        bytes memory err = abi.encodeWithSelector(ISynclineEvents.SynclineBadSignature.selector);
        _expectProveRevert(err, a, _malleate(sa), b, sb);
        _expectProveRevert(err, a, sa, b, _malleate(sb));
        bytes memory short = new bytes(64);
        _expectProveRevert(err, a, short, b, sb);
        _expectProveRevert(err, a, sa, b, "");
    }

    // ------------------------------------------------------------------ window, bond, status

    function test_proveTrainerEquivocation_windowBoundary() public {
        _finalize(taskId, 0, keccak256("s0"), ALL);
        uint64 until = market.getRound(taskId, 0).closedAt + CHALLENGE_WINDOW;
        (Commitment memory a, bytes memory sa, Commitment memory b, bytes memory sb) = _pair(taskId, 0, 3);
        warpTo(until + 1);
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineChallengeWindowClosed.selector, taskId, 0, until),
            a,
            sa,
            b,
            sb
        );
        warpTo(until);
        _prove(a, sa, b, sb);
    }

    function test_proveTrainerEquivocation_futureRound_reverts() public {
        (Commitment memory a, bytes memory sa, Commitment memory b, bytes memory sb) = _pair(taskId, 1, 0);
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineRoundNotFinalized.selector, taskId, 1), a, sa, b, sb
        );
    }

    function test_proveTrainerEquivocation_wrongBond_reverts() public {
        (Commitment memory a, bytes memory sa, Commitment memory b, bytes memory sb) = _pair(taskId, 0, 0);
        uint256[3] memory wrong = [uint256(0), CHALLENGE_BOND - 1, CHALLENGE_BOND + 1];
        for (uint256 i = 0; i < 3; ++i) {
            vm.prank(challenger);
            vm.expectRevert(
                abi.encodeWithSelector(ISynclineEvents.SynclineWrongBond.selector, wrong[i], CHALLENGE_BOND)
            );
            court.proveTrainerEquivocation{value: wrong[i]}(a, sa, b, sb);
        }
    }

    function test_proveTrainerEquivocation_nothingLeftToSlash_reverts() public {
        (Commitment memory a, bytes memory sa, Commitment memory b, bytes memory sb) = _pair(taskId, 0, 0);
        _prove(a, sa, b, sb);
        bytes memory err = abi.encodeWithSelector(ISynclineEvents.SynclineNothingToSlash.selector, taskId, trainers[0]);
        // The same slot again (a third message): the stake is gone, so the duplicate is moot.
        Commitment memory c = _commitment(taskId, 0, 0, keccak256("third"));
        _expectProveRevert(err, a, sa, c, _signC(trainers[0], c));
        // Another round.
        _finalize(taskId, 0, keccak256("s0"), ALL);
        (a, sa, b, sb) = _pair(taskId, 1, 0);
        _expectProveRevert(err, a, sa, b, sb);
    }

    /// A trainer evicted with a 100% eviction slash has nothing left to lose.
    function test_proveTrainerEquivocation_evictedWithNothingLeft_reverts() public {
        TaskSpec memory s = _spec(AggregationRule.Mean);
        s.maxMissedRounds = 0;
        s.evictionSlashBps = 10_000;
        uint256 task2 = _start(s);
        _commitAll(task2, 0, ALL & ~uint256(1 << 4));
        _finalize(task2, 0, keccak256("s0"), ALL & ~uint256(1 << 4));
        vm.assertTrue(market.getTrainer(task2, trainers[4]).evicted, "evicted for the miss");
        (Commitment memory a, bytes memory sa, Commitment memory b, bytes memory sb) = _pair(task2, 0, 4);
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineNothingToSlash.selector, task2, trainers[4]), a, sa, b, sb
        );
    }

    function test_proveTrainerEquivocation_wrongTaskStatus_reverts() public {
        // Enrolling.
        uint256 task2 = _post(_spec(AggregationRule.Mean));
        Commitment memory a = _commitment(task2, 0, 0, keccak256("a"));
        Commitment memory b = _commitment(task2, 0, 0, keccak256("b"));
        _expectProveRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, task2, TaskStatus.Enrolling, TaskStatus.Running
            ),
            a,
            _signC(trainers[0], a),
            b,
            _signC(trainers[0], b)
        );
        // Unknown.
        a.taskId = 77;
        b.taskId = 77;
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, 77),
            a,
            _signC(trainers[0], a),
            b,
            _signC(trainers[0], b)
        );
        // Sealed.
        _finalize(taskId, 0, keccak256("s0"), ALL);
        _commitAll(taskId, 1, ALL);
        _finalize(taskId, 1, keccak256("s1"), ALL);
        _seal(taskId);
        (Commitment memory c, bytes memory sc, Commitment memory d, bytes memory sd) = _pair(taskId, 1, 0);
        _expectProveRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, taskId, TaskStatus.Sealed, TaskStatus.Running
            ),
            c,
            sc,
            d,
            sd
        );
    }
}

/// @notice `proveWitnessEquivocation`: two different signed votes for one (task, round).
contract WitnessEquivocationTest is CourtTestBase {
    uint256 internal taskId;

    function setUp() public override {
        super.setUp();
        taskId = _startRule(AggregationRule.Mean);
        _commitAll(taskId, 0, ALL);
    }

    function _pair(uint256 task, uint32 round, uint256 w)
        internal
        view
        returns (Vote memory a, bytes memory sa, Vote memory b, bytes memory sb)
    {
        a = _voteMsg(task, round, keccak256("good"), ALL);
        b = _voteMsg(task, round, keccak256("evil"), ALL);
        sa = _signV(witnesses[w], a);
        sb = _signV(witnesses[w], b);
    }

    function _prove(Vote memory a, bytes memory sa, Vote memory b, bytes memory sb) internal returns (uint256) {
        vm.prank(challenger);
        return court.proveWitnessEquivocation{value: CHALLENGE_BOND}(a, sa, b, sb);
    }

    function _expectProveRevert(bytes memory err, Vote memory a, bytes memory sa, Vote memory b, bytes memory sb)
        internal
    {
        vm.prank(challenger);
        vm.expectRevert(err);
        court.proveWitnessEquivocation{value: CHALLENGE_BOND}(a, sa, b, sb);
    }

    /// @dev The signer the market recovers from `sig` over `v`.
    function _recovered(Vote memory v, bytes memory sig) internal view returns (address) {
        return _ecrecover(_voteDigest(v, address(market), block.chainid), sig);
    }

    /// The witness voted one result on chain and signed another: its bond is slashed, the
    /// challenger gets bond + 50%; the rest pays the trainers at seal.
    function test_proveWitnessEquivocation_onChainVote_slashesBond() public {
        _pastDeadline(taskId);
        (Vote memory a, bytes memory sa, Vote memory b, bytes memory sb) = _pair(taskId, 0, 0);
        vm.prank(witnesses[0]);
        market.finalizeRound(a, sa);

        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.WitnessSlashed(taskId, witnesses[0], WITNESS_BOND);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ChallengeResolved(1, taskId, ChallengeStatus.Upheld, WITNESS_BOND, WITNESS_BOND / 2);
        uint256 id = _prove(a, sa, b, sb);

        Challenge memory c = court.getChallenge(id);
        vm.assertEq(uint256(c.kind), uint256(ChallengeKind.WitnessEquivocation), "kind");
        vm.assertEq(uint256(c.status), uint256(ChallengeStatus.Upheld), "upheld");
        vm.assertEq(c.accused, witnesses[0], "accused");
        vm.assertEq(c.slashed, WITNESS_BOND, "slashed");
        WitnessRecord memory w = market.getWitness(taskId, witnesses[0]);
        vm.assertEq(w.bond, 0, "bond gone");
        vm.assertEq(w.slashed, WITNESS_BOND, "slashed");
        vm.assertTrue(w.bonded, "still marked bonded");
        TaskState memory t = market.getTaskState(taskId);
        vm.assertEq(t.rewardPool, POOL + WITNESS_BOND - WITNESS_BOND / 2, "pool");
        vm.assertEq(t.bondsHeld, 2 * uint256(WITNESS_BOND), "two bonds left, no challenge bond");
        _assertMoney();

        // The vote it cast before the proof still counts toward the quorum (its fee is earned)...
        _vote(taskId, 0, 1, keccak256("good"), ALL);
        vm.assertEq(uint256(market.getRound(taskId, 0).status), uint256(RoundStatus.Finalized), "finalized");
        _commitAll(taskId, 1, ALL);
        // ...but with its bond gone it may not vote again.
        _pastDeadline(taskId);
        Vote memory v1 = _voteMsg(taskId, 1, keccak256("s1"), ALL);
        bytes memory s1 = _signV(witnesses[0], v1);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWitnessUnbonded.selector, taskId, witnesses[0]));
        market.finalizeRound(v1, s1);
        _finalizeBy(taskId, 1, keccak256("s1"), ALL, 1, 2);
        _seal(taskId);
        uint256 pool = POOL + WITNESS_BOND / 2;
        uint256 paid = _addTrainerPayouts(pool, _weights(2 * WEIGHT), 0);
        _add(witnesses[0], FEE);
        _add(witnesses[1], 2 * FEE + WITNESS_BOND);
        _add(witnesses[2], FEE + WITNESS_BOND);
        _add(challenger, CHALLENGE_BOND + WITNESS_BOND / 2);
        _add(sponsor, pool - paid);
        _checkExpected();
        vm.assertEq(court.getReceipt(taskId).witnesses[0].slashed, WITNESS_BOND, "receipt slashed");
        vm.assertEq(court.getReceipt(taskId).witnesses[0].bond, WITNESS_BOND, "receipt bond posted");
    }

    /// Two signed votes never sent on chain prove it too, for the open round.
    function test_proveWitnessEquivocation_offChainVotes_openRound() public {
        (Vote memory a, bytes memory sa, Vote memory b, bytes memory sb) = _pair(taskId, 0, 2);
        _prove(a, sa, b, sb);
        vm.assertEq(market.getWitness(taskId, witnesses[2]).slashed, WITNESS_BOND, "slashed");
        _assertMoney();
    }

    function testFuzz_proveWitnessEquivocation_anyDifference(bytes32 stateRoot, bytes32 aggregateRoot, uint256 mask)
        public
    {
        (Vote memory a, bytes memory sa,,) = _pair(taskId, 0, 1);
        Vote memory b = Vote(taskId, 0, a.prevStateRoot, stateRoot, aggregateRoot, mask, a.metric);
        vm.assume(b.stateRoot != a.stateRoot || b.aggregateRoot != a.aggregateRoot || b.acceptedMask != a.acceptedMask);
        _prove(a, sa, b, _signV(witnesses[1], b));
        vm.assertEq(market.getWitness(taskId, witnesses[1]).bond, 0, "slashed");
        _assertMoney();
    }

    function test_proveWitnessEquivocation_sameMessage_reverts() public {
        (Vote memory a, bytes memory sa,,) = _pair(taskId, 0, 0);
        bytes memory err = abi.encodeWithSelector(ISynclineEvents.SynclineNotEquivocation.selector);
        _expectProveRevert(err, a, sa, a, sa);
        _expectProveRevert(err, a, sa, a, _malleate(sa));
    }

    function test_proveWitnessEquivocation_differentSlots_revert() public {
        (Vote memory a, bytes memory sa, Vote memory b,) = _pair(taskId, 0, 0);
        bytes memory err = abi.encodeWithSelector(ISynclineEvents.SynclineNotEquivocation.selector);
        b.round = 1;
        _expectProveRevert(err, a, sa, b, _signV(witnesses[0], b));
        b.round = 0;
        b.taskId = taskId + 1;
        _expectProveRevert(err, a, sa, b, _signV(witnesses[0], b));
    }

    function test_proveWitnessEquivocation_wrongSigners_revert() public {
        (Vote memory a, bytes memory sa, Vote memory b, bytes memory sb) = _pair(taskId, 0, 0);
        // First signature by a non-witness.
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineNotWitness.selector, taskId, stranger),
            a,
            _signV(stranger, a),
            b,
            sb
        );
        // Second signature by another witness.
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineWrongSigner.selector, witnesses[1], witnesses[0]),
            a,
            sa,
            b,
            _signV(witnesses[1], b)
        );
        // Malformed.
        bytes memory bad = abi.encodeWithSelector(ISynclineEvents.SynclineBadSignature.selector);
        _expectProveRevert(bad, a, _malleate(sa), b, sb);
        _expectProveRevert(bad, a, sa, b, hex"0102");
    }

    function test_proveWitnessEquivocation_replays_revert() public {
        (Vote memory a,, Vote memory b,) = _pair(taskId, 0, 0);
        uint256 pk = _keyOf(witnesses[0]);
        // Another chain.
        bytes memory sa = _signDigest(pk, _voteDigest(a, address(market), 999));
        bytes memory sb = _signDigest(pk, _voteDigest(b, address(market), 999));
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineNotWitness.selector, taskId, _recovered(a, sa)), a, sa, b, sb
        );
        // Another market.
        sa = _signDigest(pk, _voteDigest(a, address(0xBEEF), block.chainid));
        sb = _signDigest(pk, _voteDigest(b, address(0xBEEF), block.chainid));
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineNotWitness.selector, taskId, _recovered(a, sa)), a, sa, b, sb
        );
        // Another task (the witness serves in both).
        uint256 task2 = _startRule(AggregationRule.Mean);
        (Vote memory c, bytes memory sc, Vote memory d, bytes memory sd) = _pair(task2, 0, 0);
        c.taskId = taskId;
        d.taskId = taskId;
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineNotWitness.selector, taskId, _recovered(c, sc)), c, sc, d, sd
        );
    }

    function test_proveWitnessEquivocation_windowAndRound_revert() public {
        (Vote memory a, bytes memory sa, Vote memory b, bytes memory sb) = _pair(taskId, 1, 0);
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineRoundNotFinalized.selector, taskId, 1), a, sa, b, sb
        );
        _finalize(taskId, 0, keccak256("s0"), ALL);
        uint64 until = market.getRound(taskId, 0).closedAt + CHALLENGE_WINDOW;
        (a, sa, b, sb) = _pair(taskId, 0, 2);
        warpTo(until + 1);
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineChallengeWindowClosed.selector, taskId, 0, until),
            a,
            sa,
            b,
            sb
        );
        warpTo(until);
        _prove(a, sa, b, sb);
    }

    function test_proveWitnessEquivocation_wrongBond_reverts() public {
        (Vote memory a, bytes memory sa, Vote memory b, bytes memory sb) = _pair(taskId, 0, 0);
        vm.prank(challenger);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongBond.selector, 0, CHALLENGE_BOND));
        court.proveWitnessEquivocation(a, sa, b, sb);
        vm.prank(challenger);
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineWrongBond.selector, CHALLENGE_BOND * 2, CHALLENGE_BOND)
        );
        court.proveWitnessEquivocation{value: CHALLENGE_BOND * 2}(a, sa, b, sb);
    }

    function test_proveWitnessEquivocation_nothingToSlash_reverts() public {
        (Vote memory a, bytes memory sa, Vote memory b, bytes memory sb) = _pair(taskId, 0, 0);
        _prove(a, sa, b, sb);
        bytes memory err = abi.encodeWithSelector(ISynclineEvents.SynclineNothingToSlash.selector, taskId, witnesses[0]);
        // Same round again, with a third vote: the bond is gone.
        Vote memory c = _voteMsg(taskId, 0, keccak256("third"), ALL);
        _expectProveRevert(err, a, sa, c, _signV(witnesses[0], c));
        // Another round.
        _finalizeBy(taskId, 0, keccak256("s0"), ALL, 1, 2);
        (a, sa, b, sb) = _pair(taskId, 1, 0);
        _expectProveRevert(err, a, sa, b, sb);
    }

    /// A witness that never bonded has nothing to slash (every task asks a bond).
    function test_proveWitnessEquivocation_unbonded_reverts() public {
        uint256 task2 = _post(_spec(AggregationRule.Mean));
        _enrollMany(task2, N_TRAINERS);
        (Vote memory a, bytes memory sa, Vote memory b, bytes memory sb) = _pair(task2, 0, 0);
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineNothingToSlash.selector, task2, witnesses[0]), a, sa, b, sb
        );
    }

    /// The metric is signed: two votes that differ only in it are two different signed votes.
    function test_proveWitnessEquivocation_metricOnly_slashesBond() public {
        (Vote memory a, bytes memory sa,,) = _pair(taskId, 0, 1);
        Vote memory b =
            Vote(a.taskId, a.round, a.prevStateRoot, a.stateRoot, a.aggregateRoot, a.acceptedMask, a.metric + 1);
        _prove(a, sa, b, _signV(witnesses[1], b));
        vm.assertEq(market.getWitness(taskId, witnesses[1]).bond, 0, "slashed");
        _assertMoney();
    }

    /// Votes on different previous state roots are no equivocation: after a rollback a witness
    /// votes again on the restored root.
    function test_proveWitnessEquivocation_otherPrevStateRoot_reverts() public {
        (Vote memory a, bytes memory sa, Vote memory b,) = _pair(taskId, 0, 0);
        b.prevStateRoot = keccak256("restored root");
        _expectProveRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineNotEquivocation.selector), a, sa, b, _signV(witnesses[0], b)
        );
    }

    function test_proveWitnessEquivocation_wrongTaskStatus_reverts() public {
        uint256 task2 = _post(_spec(AggregationRule.Mean));
        (Vote memory a, bytes memory sa, Vote memory b, bytes memory sb) = _pair(task2, 0, 0);
        _expectProveRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, task2, TaskStatus.Enrolling, TaskStatus.Running
            ),
            a,
            sa,
            b,
            sb
        );
    }
}
