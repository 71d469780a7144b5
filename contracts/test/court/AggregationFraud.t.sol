// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "../base/Vm.sol";

import {CourtTestBase} from "./CourtTestBase.sol";
import {MerkleRef} from "./MerkleRef.sol";
import {ChunkAggregation} from "../../src/libraries/ChunkAggregation.sol";
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
    Challenge,
    ChallengeKind,
    ChallengeStatus,
    AggregationProof
} from "../../src/SynclineTypes.sol";

/// @notice What every aggregation-fraud test uses: sending proofs and finalizing a claimed state.
abstract contract AggregationTestBase is CourtTestBase {
    /// @dev `which` of `SynclineBadMerkleProof` for the previous and the claimed state openings.
    uint256 internal constant PREV = type(uint256).max - 1;
    uint256 internal constant CLAIMED = type(uint256).max;

    /// @dev Witness 2 votes the honest root first (a dissent later), then 0 and 1 finalize `claimed`.
    function _finalizeClaim(uint256 task, uint32 round, bytes[] memory honest, bytes[] memory claimed) internal {
        _pastDeadline(task);
        _vote(task, round, 2, _root(honest), ALL);
        _finalize(task, round, _root(claimed), ALL);
    }

    function _prove(AggregationProof memory p) internal returns (uint256) {
        vm.prank(challenger);
        return court.proveAggregationFraud{value: CHALLENGE_BOND}(p);
    }

    function _proveExpect(AggregationProof memory p, bytes memory err) internal {
        vm.prank(challenger);
        vm.expectRevert(err);
        court.proveAggregationFraud{value: CHALLENGE_BOND}(p);
    }

    /// @dev A proof against a chunk the committee got right is refused.
    function _expectCorrect(AggregationProof memory p) internal {
        _proveExpect(
            p,
            abi.encodeWithSelector(ISynclineEvents.SynclineAggregationCorrect.selector, p.taskId, p.round, p.chunkIndex)
        );
    }
}

/// @notice Shared scenario of the aggregation-fraud tests: a 5-trainer, 600-parameter task (chunks
/// of 256, 256 and 88 coordinates) whose round 0 inputs are real int8 gradient chunks committed by
/// their Merkle roots, with the honest new state recomputed by `ChunkAggregation`.
abstract contract AggregationScenario is AggregationTestBase {
    uint256 internal taskId;
    TaskSpec internal spec;

    function _rule() internal pure virtual returns (AggregationRule);

    function setUp() public virtual override {
        super.setUp();
        spec = _spec(_rule());
        taskId = _start(spec);
        _commitAll(taskId, 0, ALL);
    }

    function _honest0() internal view returns (bytes[] memory) {
        return _honestState(spec, 0, ALL, _initialState());
    }

    function _correctErr(uint32 round, uint32 ci) internal view returns (bytes memory) {
        return abi.encodeWithSelector(ISynclineEvents.SynclineAggregationCorrect.selector, taskId, round, ci);
    }

    function _badOpening(uint32 round, uint32 ci) internal view returns (bytes memory) {
        return abi.encodeWithSelector(ISynclineEvents.SynclineBadOpening.selector, taskId, round, ci);
    }
}

/// @notice The rule-specific core: a correct aggregation cannot be challenged, one changed
/// coordinate (weight or momentum) is proven by a window containing it and only by such a window.
abstract contract AggregationFraudRuleTest is AggregationScenario {
    /// Correct aggregation: every chunk, full window and partial windows → SynclineAggregationCorrect.
    function test_correctAggregation_everyChunk_reverts() public {
        bytes[] memory honest = _honest0();
        _finalizeClaim(taskId, 0, honest, honest);
        bytes[][] memory inputs = _inputs(0, ALL);
        bytes[] memory prev = _initialState();
        for (uint32 c = 0; c < CHUNKS; ++c) {
            uint16 count = uint16(_count(c));
            _proveExpect(_aggProof(taskId, 0, c, 0, count, inputs, prev, honest), _correctErr(0, c));
            _proveExpect(_aggProof(taskId, 0, c, 5, 37, inputs, prev, honest), _correctErr(0, c));
            _proveExpect(_aggProof(taskId, 0, c, count - 1, count, inputs, prev, honest), _correctErr(0, c));
        }
        vm.assertEq(court.challengeCount(), 0, "nothing opened");
        _assertMoney();
    }

    /// One weight off by one: proven with a 32-coordinate window; the voters are slashed, both
    /// rounds voided, the state rolled back, fees and rewards reversed; the seal pays exactly.
    function test_tamperedWeight_provesFraud_andSettles() public {
        bytes[] memory honest = _honest0();
        bytes[] memory claimed = _tamper(honest, 1, 100, false, 1);
        _finalizeClaim(taskId, 0, honest, claimed);
        // Round 1 builds on the bad state and finalizes too.
        _commitAll(taskId, 1, ALL);
        _finalize(taskId, 1, keccak256("round-1-state"), ALL);
        vm.assertEq(uint256(market.getTaskState(taskId).status), uint256(TaskStatus.AwaitingSeal), "run done");
        vm.assertEq(market.getTaskState(taskId).totalWeight, 10 * WEIGHT, "both rounds credited");

        AggregationProof memory p = _aggProof(taskId, 0, 1, 96, 128, _inputs(0, ALL), _initialState(), claimed);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.WitnessSlashed(taskId, witnesses[0], WITNESS_BOND);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.WitnessSlashed(taskId, witnesses[1], WITNESS_BOND);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RoundsInvalidated(taskId, 0, 1, spec.initialStateRoot);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.ChallengeResolved(
            1, taskId, ChallengeStatus.Upheld, 2 * uint256(WITNESS_BOND), WITNESS_BOND
        );
        uint256 id = _prove(p);

        Challenge memory c = court.getChallenge(id);
        vm.assertEq(uint256(c.kind), uint256(ChallengeKind.AggregationFraud), "kind");
        vm.assertEq(uint256(c.status), uint256(ChallengeStatus.Upheld), "upheld");
        vm.assertEq(c.segment, 1, "segment records the chunk index");
        vm.assertEq(c.accused, address(0), "round fault");
        vm.assertEq(c.slashed, 2 * uint256(WITNESS_BOND), "two bonds");
        vm.assertEq(market.getWitness(taskId, witnesses[0]).bond, 0, "w0 slashed");
        vm.assertEq(market.getWitness(taskId, witnesses[1]).bond, 0, "w1 slashed");
        vm.assertEq(market.getWitness(taskId, witnesses[2]).bond, WITNESS_BOND, "w2 (dissent) kept");
        vm.assertEq(market.getWitness(taskId, witnesses[0]).fees, 0, "w0 fees reversed");
        vm.assertEq(market.getWitness(taskId, witnesses[0]).matched, 0, "w0 matches reversed");
        vm.assertEq(uint256(market.getRound(taskId, 0).status), uint256(RoundStatus.Invalidated), "round 0 void");
        vm.assertEq(uint256(market.getRound(taskId, 1).status), uint256(RoundStatus.Invalidated), "round 1 void");
        TaskState memory t = market.getTaskState(taskId);
        vm.assertEq(t.stateRoot, spec.initialStateRoot, "rolled back");
        vm.assertEq(t.roundsFinalized, 0, "roundsFinalized");
        vm.assertEq(t.roundsInvalidated, 2, "roundsInvalidated");
        vm.assertEq(t.totalWeight, 0, "rewards reversed");
        vm.assertEq(t.feesEarned, 0, "fees reversed");
        vm.assertEq(t.feeBudget, _feeBudget(spec), "fee budget back");
        vm.assertEq(t.rewardPool, POOL + WITNESS_BOND, "pool: slashes minus bounty");
        for (uint256 i = 0; i < N_TRAINERS; ++i) {
            TrainerRecord memory r = market.getTrainer(taskId, trainers[i]);
            vm.assertEq(r.accepted, 0, "accepted reversed");
            vm.assertEq(r.acceptedWeight, 0, "weight reversed");
            vm.assertEq(r.stake, STAKE, "trainers keep their stake");
        }
        vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND + WITNESS_BOND, "challenger: bond + 50%");
        _assertMoney();

        _seal(taskId);
        for (uint256 i = 0; i < N_TRAINERS; ++i) {
            _add(trainers[i], STAKE);
        }
        _add(witnesses[2], WITNESS_BOND);
        _add(challenger, CHALLENGE_BOND + WITNESS_BOND);
        _add(sponsor, POOL + WITNESS_BOND + _feeBudget(spec));
        _checkExpected();
        vm.assertEq(court.getReceipt(taskId).finalStateRoot, spec.initialStateRoot, "receipt root");
        vm.assertEq(court.getReceipt(taskId).roundsInvalidated, 2, "receipt invalidated");
    }

    /// The last momentum coordinate of the short last chunk.
    function test_tamperedMomentum_lastChunk_provesFraud() public {
        bytes[] memory honest = _honest0();
        bytes[] memory claimed = _tamper(honest, 2, 87, true, -3);
        _finalizeClaim(taskId, 0, honest, claimed);
        bytes[][] memory inputs = _inputs(0, ALL);
        // A window that misses it does not prove anything...
        _proveExpect(_aggProof(taskId, 0, 2, 0, 87, inputs, _initialState(), claimed), _correctErr(0, 2));
        // ...the window ending at the chunk's last coordinate does.
        _prove(_aggProof(taskId, 0, 2, 80, 88, inputs, _initialState(), claimed));
        vm.assertEq(uint256(market.getRound(taskId, 0).status), uint256(RoundStatus.Invalidated), "void");
        _assertMoney();
    }
}

/// @notice The fuzzed windows, over the three chunk rules at once (one task per rule, their
/// honest round-0 states computed once in `setUp`).
contract AggregationFraudFuzzTest is AggregationTestBase {
    uint256[3] internal taskOf;
    mapping(uint256 => bytes[]) internal honestOf;

    function setUp() public override {
        super.setUp();
        AggregationRule[3] memory rules =
            [AggregationRule.Mean, AggregationRule.TrimmedMean, AggregationRule.CoordinateMedian];
        for (uint256 k = 0; k < 3; ++k) {
            TaskSpec memory s = _spec(rules[k]);
            taskOf[k] = _start(s);
            _commitAll(taskOf[k], 0, ALL);
            bytes[] memory honest = _honestState(s, 0, ALL, _initialState());
            for (uint256 c = 0; c < CHUNKS; ++c) {
                honestOf[k].push(honest[c]);
            }
        }
    }

    function _honest(uint256 k) internal view returns (bytes[] memory out) {
        out = new bytes[](CHUNKS);
        for (uint256 c = 0; c < CHUNKS; ++c) {
            out[c] = honestOf[k][c];
        }
    }

    /// Fuzz: any changed int64 of the finalized state (weight or momentum, any chunk, any rule)
    /// is proven by any window holding it, and never by a window that misses it.
    /// forge-config: default.fuzz.runs = 128
    function testFuzz_tampered_windowed(uint256 seed, int64 rawDelta) public {
        uint256 k = seed % 3;
        uint256 taskId = taskOf[k];
        uint256 c = (seed / 3) % CHUNKS;
        uint256 count = _count(c);
        uint256 j = bound(uint256(keccak256(abi.encode(seed, "j"))), 0, count - 1);
        bool momentum = (seed >> 200) & 1 == 1;
        int256 delta = int256(rawDelta) % (1 << 40);
        if (delta == 0) delta = 1;
        uint256 lo = bound(uint256(keccak256(abi.encode(seed, "lo"))), 0, j);
        uint256 hi = bound(uint256(keccak256(abi.encode(seed, "hi"))), j + 1, count);

        bytes[] memory honest = _honest(k);
        bytes[] memory claimed = _tamper(honest, c, j, momentum, delta);
        _finalizeClaim(taskId, 0, honest, claimed);
        bytes[][] memory inputs = _inputs(0, ALL);
        bytes[] memory prev = _initialState();
        if (j > 0) {
            uint256 lo2 = bound(lo, 0, j - 1);
            _expectCorrect(_aggProof(taskId, 0, uint32(c), uint16(lo2), uint16(j), inputs, prev, claimed));
        }
        if (j + 1 < count) {
            _expectCorrect(
                _aggProof(taskId, 0, uint32(c), uint16(j + 1), uint16(hi > j + 1 ? hi : j + 2), inputs, prev, claimed)
            );
        }
        _prove(_aggProof(taskId, 0, uint32(c), uint16(lo), uint16(hi), inputs, prev, claimed));
        vm.assertEq(market.getTaskState(taskId).stateRoot, _initialStateRoot(), "rolled back");
        vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND + WITNESS_BOND, "bounty");
        _assertMoney();
    }

    /// Fuzz: whatever window of whatever chunk, under any rule, the honest state is never
    /// "proven" wrong.
    /// forge-config: default.fuzz.runs = 128
    function testFuzz_correctAggregation_anyWindow_reverts(uint256 seed) public {
        uint256 k = seed % 3;
        uint256 taskId = taskOf[k];
        uint32 c = uint32((seed / 3) % CHUNKS);
        uint256 count = _count(c);
        uint256 lo = bound(seed >> 8, 0, count - 1);
        uint256 hi = bound(seed >> 64, lo + 1, count);
        bytes[] memory honest = _honest(k);
        _finalizeClaim(taskId, 0, honest, honest);
        _expectCorrect(_aggProof(taskId, 0, c, uint16(lo), uint16(hi), _inputs(0, ALL), _initialState(), honest));
    }
}

contract AggregationFraudMeanTest is AggregationFraudRuleTest {
    function _rule() internal pure override returns (AggregationRule) {
        return AggregationRule.Mean;
    }
}

contract AggregationFraudTrimmedMeanTest is AggregationFraudRuleTest {
    function _rule() internal pure override returns (AggregationRule) {
        return AggregationRule.TrimmedMean;
    }
}

contract AggregationFraudMedianTest is AggregationFraudRuleTest {
    function _rule() internal pure override returns (AggregationRule) {
        return AggregationRule.CoordinateMedian;
    }
}

/// @notice Every way an aggregation proof can be refused, and the less common outcomes.
contract AggregationFraudPathsTest is AggregationScenario {
    function _rule() internal pure override returns (AggregationRule) {
        return AggregationRule.TrimmedMean;
    }

    /// @dev Round 0 finalized with weight 100 of chunk 1 off by one; a valid proof of it.
    function _tamperedRound0() internal returns (AggregationProof memory p, bytes[] memory claimed) {
        bytes[] memory honest = _honest0();
        claimed = _tamper(honest, 1, 100, false, 1);
        _finalizeClaim(taskId, 0, honest, claimed);
        p = _aggProof(taskId, 0, 1, 96, 128, _inputs(0, ALL), _initialState(), claimed);
    }

    function _rootOf(uint16 fragment) internal view returns (bytes32) {
        return court.getSubmission(taskId, 0, fragment).chunkRoot;
    }

    // ------------------------------------------------------------------ Merkle openings

    function test_wrongInputProof_reverts() public {
        (AggregationProof memory p,) = _tamperedRound0();
        // A flipped sibling.
        bytes32 sibling = p.inputProofs[2][0];
        p.inputProofs[2][0] = sibling ^ bytes32(uint256(1));
        _proveExpect(p, abi.encodeWithSelector(ISynclineEvents.SynclineBadMerkleProof.selector, 2, _rootOf(2)));
        p.inputProofs[2][0] = sibling;
        // A short and a long path.
        bytes32[] memory original = p.inputProofs[4];
        bytes32[] memory shorter = new bytes32[](original.length - 1);
        for (uint256 i = 0; i < shorter.length; ++i) {
            shorter[i] = original[i];
        }
        p.inputProofs[4] = shorter;
        _proveExpect(p, abi.encodeWithSelector(ISynclineEvents.SynclineBadMerkleProof.selector, 4, _rootOf(4)));
        bytes32[] memory longer = new bytes32[](original.length + 1);
        for (uint256 i = 0; i < original.length; ++i) {
            longer[i] = original[i];
        }
        p.inputProofs[4] = longer;
        _proveExpect(p, abi.encodeWithSelector(ISynclineEvents.SynclineBadMerkleProof.selector, 4, _rootOf(4)));
        p.inputProofs[4] = original;
        // Another trainer's chunk in slot 3, and two inputs swapped.
        bytes memory keep = p.inputChunks[3];
        p.inputChunks[3] = p.inputChunks[1];
        _proveExpect(p, abi.encodeWithSelector(ISynclineEvents.SynclineBadMerkleProof.selector, 3, _rootOf(3)));
        p.inputChunks[3] = keep;
        (p.inputChunks[0], p.inputChunks[1]) = (p.inputChunks[1], p.inputChunks[0]);
        (p.inputProofs[0], p.inputProofs[1]) = (p.inputProofs[1], p.inputProofs[0]);
        _proveExpect(p, abi.encodeWithSelector(ISynclineEvents.SynclineBadMerkleProof.selector, 0, _rootOf(0)));
        // The same trainer's chunk from the next round (replay at the same index).
        (p.inputChunks[0], p.inputChunks[1]) = (p.inputChunks[1], p.inputChunks[0]);
        (p.inputProofs[0], p.inputProofs[1]) = (p.inputProofs[1], p.inputProofs[0]);
        bytes[] memory other = _gradChunks(1, 0);
        p.inputChunks[0] = other[1];
        p.inputProofs[0] = MerkleRef.proof(MerkleRef.hashes(other), 1);
        _proveExpect(p, abi.encodeWithSelector(ISynclineEvents.SynclineBadMerkleProof.selector, 0, _rootOf(0)));
    }

    function test_wrongStateProofs_revert() public {
        (AggregationProof memory p, bytes[] memory claimed) = _tamperedRound0();
        bytes32 prevRoot = spec.initialStateRoot;
        bytes32 claimedRoot = _root(claimed);
        bytes32[] memory keepPrev = p.prevProof;
        p.prevProof = new bytes32[](keepPrev.length);
        _proveExpect(p, abi.encodeWithSelector(ISynclineEvents.SynclineBadMerkleProof.selector, PREV, prevRoot));
        p.prevProof = keepPrev;
        bytes memory keepChunk = p.prevChunk;
        p.prevChunk = claimed[1];
        _proveExpect(p, abi.encodeWithSelector(ISynclineEvents.SynclineBadMerkleProof.selector, PREV, prevRoot));
        p.prevChunk = keepChunk;
        // The claimed chunk opened with the honest content (what the challenger wishes it were).
        p.claimedChunk = _honest0()[1];
        _proveExpect(p, abi.encodeWithSelector(ISynclineEvents.SynclineBadMerkleProof.selector, CLAIMED, claimedRoot));
        p.claimedChunk = claimed[1];
        p.claimedProof[0] = bytes32(0);
        _proveExpect(p, abi.encodeWithSelector(ISynclineEvents.SynclineBadMerkleProof.selector, CLAIMED, claimedRoot));
    }

    function test_wrongChunkIndex_reverts() public {
        (AggregationProof memory p,) = _tamperedRound0();
        // Chunk-1 openings presented as chunk 0: the index is bound into every leaf.
        p.chunkIndex = 0;
        _proveExpect(
            p, abi.encodeWithSelector(ISynclineEvents.SynclineBadMerkleProof.selector, PREV, spec.initialStateRoot)
        );
        // Out of range.
        p.chunkIndex = 3;
        _proveExpect(p, _badOpening(0, 3));
        p.chunkIndex = type(uint32).max;
        _proveExpect(p, _badOpening(0, type(uint32).max));
    }

    function test_windowOutOfRange_reverts() public {
        (AggregationProof memory p,) = _tamperedRound0();
        p.lo = 100;
        p.hi = 100;
        _proveExpect(p, _badOpening(0, 1));
        p.hi = 99;
        _proveExpect(p, _badOpening(0, 1));
        p.lo = 0;
        p.hi = 257;
        _proveExpect(p, _badOpening(0, 1));
        p.hi = type(uint16).max;
        _proveExpect(p, _badOpening(0, 1));
        // The last chunk has 88 coordinates: hi = 89 is out, hi = 88 is the full chunk.
        bytes[] memory claimed = _tamper(_honest0(), 1, 100, false, 1);
        AggregationProof memory q = _aggProof(taskId, 0, 2, 0, 89, _inputs(0, ALL), _initialState(), claimed);
        _proveExpect(q, _badOpening(0, 2));
        q.hi = 88;
        _proveExpect(q, _correctErr(0, 2));
    }

    function test_wrongInputCount_reverts() public {
        (AggregationProof memory p,) = _tamperedRound0();
        AggregationProof memory q = p;
        // One input too few.
        bytes[] memory fewer = new bytes[](4);
        bytes32[][] memory fewerProofs = new bytes32[][](4);
        for (uint256 i = 0; i < 4; ++i) {
            fewer[i] = p.inputChunks[i];
            fewerProofs[i] = p.inputProofs[i];
        }
        bytes[] memory allChunks = p.inputChunks;
        bytes32[][] memory allProofs = p.inputProofs;
        q.inputChunks = fewer;
        q.inputProofs = fewerProofs;
        _proveExpect(q, _badOpening(0, 1));
        // One too many.
        bytes[] memory more = new bytes[](6);
        bytes32[][] memory moreProofs = new bytes32[][](6);
        for (uint256 i = 0; i < 5; ++i) {
            more[i] = allChunks[i];
            moreProofs[i] = allProofs[i];
        }
        more[5] = allChunks[4];
        moreProofs[5] = allProofs[4];
        q.inputChunks = more;
        q.inputProofs = moreProofs;
        _proveExpect(q, _badOpening(0, 1));
        // Proof count differs from input count.
        q.inputChunks = allChunks;
        q.inputProofs = fewerProofs;
        _proveExpect(q, _badOpening(0, 1));
        // None at all.
        q.inputChunks = new bytes[](0);
        q.inputProofs = new bytes32[][](0);
        _proveExpect(q, _badOpening(0, 1));
    }

    // ------------------------------------------------------------------ malformed state chunks

    /// The finalized state's chunk is not 16 * count bytes: no honest committee produces that,
    /// so opening it proves the fault (it used to revert `SynclineBadOpening`, leaving it unprovable).
    function test_claimedChunkWrongLength_provesFraud() public {
        bytes[] memory honest = _honest0();
        bytes[] memory claimed = _honest0();
        claimed[1] = bytes.concat(honest[1], new bytes(16));
        _finalizeClaim(taskId, 0, honest, claimed);
        _prove(_aggProof(taskId, 0, 1, 0, 32, _inputs(0, ALL), _initialState(), claimed));
        vm.assertEq(uint256(market.getRound(taskId, 0).status), uint256(RoundStatus.Invalidated), "void");
    }

    function test_claimedChunkShort_provesFraud() public {
        bytes[] memory honest = _honest0();
        bytes[] memory claimed = _honest0();
        claimed[2] = new bytes(8);
        _finalizeClaim(taskId, 0, honest, claimed);
        _prove(_aggProof(taskId, 0, 2, 0, 1, _inputs(0, ALL), _initialState(), claimed));
        vm.assertEq(market.getTaskState(taskId).stateRoot, spec.initialStateRoot, "rolled back");
    }

    /// The previous state (here the sponsor's initial state) has a chunk of the wrong length:
    /// nothing can be recomputed from it, so the opening is refused.
    function test_prevChunkWrongLength_reverts() public {
        bytes[] memory bad = _initialState();
        bad[1] = new bytes(16 * 255);
        TaskSpec memory s = _spec(AggregationRule.Mean);
        s.initialStateRoot = _root(bad);
        uint256 task2 = _start(s);
        _commitAll(task2, 0, ALL);
        bytes[] memory claimed = _initialState();
        _finalize(task2, 0, _root(claimed), ALL);
        AggregationProof memory p = _aggProof(task2, 0, 1, 0, 32, _inputs(0, ALL), bad, claimed);
        _proveExpect(p, abi.encodeWithSelector(ISynclineEvents.SynclineBadOpening.selector, task2, 0, 1));
    }

    // ------------------------------------------------------------------ malformed accepted inputs

    /// An accepted input chunk that is malformed proves the fault by itself, whatever the state.
    /// forge-config: default.fuzz.runs = 64
    function testFuzz_malformedAcceptedInput_provesFraud(uint8 kindSeed, uint8 fragmentSeed) public {
        uint256 kind = kindSeed % 6;
        uint16 f = uint16(fragmentSeed % N_TRAINERS);
        // Round 1 of the task: fragment f's chunk 1 is malformed; the others are well formed.
        bytes[] memory honest = _honest0();
        _finalize(taskId, 0, _root(honest), ALL);
        bytes[][] memory inputs = _inputs(1, ALL);
        inputs[f][1] = _malform(inputs[f][1], kind);
        vm.assertFalse(agg.isWellFormedGradientChunk(inputs[f][1], 8, 256), "malformed");
        for (uint16 g = 0; g < N_TRAINERS; ++g) {
            _commit(taskId, 1, g, _root(inputs[g]));
        }
        // The committee accepts everyone and claims the previous state unchanged.
        _finalize(taskId, 1, _root(honest), ALL);
        // Kind 0 puts -128 at coordinate 7: the window must hold it; the other kinds (length,
        // header) are caught by any window.
        _prove(_aggProof(taskId, 1, 1, kind == 0 ? 7 : 200, kind == 0 ? 8 : 201, inputs, honest, honest));
        vm.assertEq(uint256(market.getRound(taskId, 1).status), uint256(RoundStatus.Invalidated), "round 1 void");
        vm.assertEq(uint256(market.getRound(taskId, 0).status), uint256(RoundStatus.Finalized), "round 0 stands");
        vm.assertEq(market.getTaskState(taskId).stateRoot, _root(honest), "back to round 0's state");
        _assertMoney();
    }

    /// A malformed chunk elsewhere does not make a correct chunk provable.
    function test_malformedInputElsewhere_correctChunk_reverts() public {
        bytes[][] memory inputs = _inputs(0, ALL);
        // Fragment 4 commits a different, malformed chunk 2 (task 2, so the commitments differ).
        inputs[4][2] = _malform(inputs[4][2], 0);
        uint256 task2 = _start(spec);
        for (uint16 g = 0; g < N_TRAINERS; ++g) {
            _commit(task2, 0, g, _root(inputs[g]));
        }
        bytes[] memory prev = _initialState();
        bytes[] memory claimed = _honest0(); // chunks 0 and 1 are computed from well-formed inputs only
        _finalize(task2, 0, _root(claimed), ALL);
        AggregationProof memory p = _aggProof(task2, 0, 0, 0, 256, inputs, prev, claimed);
        _expectCorrect(p);
        p = _aggProof(task2, 0, 2, 0, 8, inputs, prev, claimed);
        _prove(p);
        vm.assertEq(uint256(market.getRound(task2, 0).status), uint256(RoundStatus.Invalidated), "void");
    }

    /// An out-of-range value is a fault only where the proof looks: the committee's state is
    /// right everywhere but at the bad coordinate (7), so a window without it proves nothing and
    /// a window with it proves the accepted input malformed.
    function test_malformedValue_onlyInsideTheWindow() public {
        bytes[][] memory inputs = _inputs(0, ALL);
        inputs[2][0] = _malform(inputs[2][0], 0); // -128 at coordinate 7 of chunk 0
        uint256 task2 = _start(spec);
        for (uint16 g = 0; g < N_TRAINERS; ++g) {
            _commit(task2, 0, g, _root(inputs[g]));
        }
        // The claimed chunk 0: the rule applied with the bad value read as 0 (right at every other
        // coordinate).
        bytes[] memory prev = _initialState();
        bytes[] memory patched = new bytes[](N_TRAINERS);
        for (uint256 i = 0; i < N_TRAINERS; ++i) {
            patched[i] = inputs[i][0];
        }
        patched[2] = bytes.concat(inputs[2][0]);
        patched[2][2 + 7] = 0x00;
        bytes[] memory claimed = _honest0();
        claimed[0] = agg.recomputeStateChunk(patched, 8, uint8(spec.rule), spec.ruleParam, prev[0], LR_PPM, MOM_PPM);
        _finalize(task2, 0, _root(claimed), ALL);
        _expectCorrect(_aggProof(task2, 0, 0, 8, 256, inputs, prev, claimed));
        _expectCorrect(_aggProof(task2, 0, 0, 0, 7, inputs, prev, claimed));
        _prove(_aggProof(task2, 0, 0, 7, 8, inputs, prev, claimed));
        vm.assertEq(uint256(market.getRound(task2, 0).status), uint256(RoundStatus.Invalidated), "void");
    }

    /// Limitation: `ChunkAggregation` recomputes at most 32 inputs, so a round that accepted 33
    /// or more (a task may have 64 trainers) cannot be proven wrong: the proof reverts.
    function test_moreThan32AcceptedInputs_unprovable() public {
        trainers.push(_actor("trainer32"));
        TaskSpec memory s = _spec(AggregationRule.Mean);
        s.minTrainers = 33;
        s.maxTrainers = 33;
        s.shardCount = 64;
        uint256 task2 = _start(s);
        uint256 all = (uint256(1) << 33) - 1;
        _commitAll(task2, 0, all);
        bytes[] memory claimed = _tamper(_initialState(), 0, 0, false, 1);
        _finalize(task2, 0, _root(claimed), all);
        AggregationProof memory p = _aggProof(task2, 0, 0, 0, 1, _inputs(0, all), _initialState(), claimed);
        _proveExpect(p, abi.encodeWithSelector(ChunkAggregation.BadInputCount.selector, 33));
    }

    // ------------------------------------------------------------------ no accepted input

    /// With no accepted input the honest result is the previous state unchanged (Python's
    /// `compute_round`); any other state root is a fault proven without openings.
    function test_noAcceptedInputs_changedState_provesFraud() public {
        _finalize(taskId, 0, keccak256("made-up state"), 0);
        AggregationProof memory p;
        p.taskId = taskId;
        p.round = 0;
        _prove(p);
        vm.assertEq(uint256(market.getRound(taskId, 0).status), uint256(RoundStatus.Invalidated), "void");
        vm.assertEq(market.getTaskState(taskId).stateRoot, spec.initialStateRoot, "rolled back");
        vm.assertEq(market.creditOf(challenger), CHALLENGE_BOND + WITNESS_BOND, "bounty");
        _assertMoney();
    }

    function test_noAcceptedInputs_unchangedState_reverts() public {
        _finalize(taskId, 0, spec.initialStateRoot, 0);
        AggregationProof memory p;
        p.taskId = taskId;
        p.round = 0;
        _proveExpect(p, _correctErr(0, 0));
        // Inputs offered for a round that accepted none.
        p = _aggProof(taskId, 0, 0, 0, 1, _inputs(0, 1), _initialState(), _initialState());
        _proveExpect(p, _badOpening(0, 0));
    }

    // ------------------------------------------------------------------ round, window, rule, bond, status

    function test_roundNotFinalized_reverts() public {
        bytes[] memory honest = _honest0();
        AggregationProof memory p = _aggProof(taskId, 0, 1, 0, 32, _inputs(0, ALL), _initialState(), honest);
        // Pending (open) round.
        _proveExpect(p, abi.encodeWithSelector(ISynclineEvents.SynclineRoundNotFinalized.selector, taskId, 0));
        // A round that does not exist yet.
        p.round = 5;
        _proveExpect(p, abi.encodeWithSelector(ISynclineEvents.SynclineRoundNotFinalized.selector, taskId, 5));
        // A carried-forward round.
        _carry(taskId, 0);
        p.round = 0;
        _proveExpect(p, abi.encodeWithSelector(ISynclineEvents.SynclineRoundNotFinalized.selector, taskId, 0));
    }

    /// A second proof of the same round (any chunk): the round is already void.
    function test_duplicateProof_reverts() public {
        (AggregationProof memory p,) = _tamperedRound0();
        _prove(p);
        _proveExpect(p, abi.encodeWithSelector(ISynclineEvents.SynclineRoundNotFinalized.selector, taskId, 0));
        p.chunkIndex = 0;
        _proveExpect(p, abi.encodeWithSelector(ISynclineEvents.SynclineRoundNotFinalized.selector, taskId, 0));
    }

    function test_windowExpired_reverts() public {
        (AggregationProof memory p,) = _tamperedRound0();
        uint64 until = market.getRound(taskId, 0).closedAt + CHALLENGE_WINDOW;
        warpTo(until + 1);
        _proveExpect(
            p, abi.encodeWithSelector(ISynclineEvents.SynclineChallengeWindowClosed.selector, taskId, 0, until)
        );
        warpTo(until);
        _prove(p);
    }

    function test_wrongBond_reverts() public {
        (AggregationProof memory p,) = _tamperedRound0();
        vm.prank(challenger);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongBond.selector, 0, CHALLENGE_BOND));
        court.proveAggregationFraud(p);
        vm.prank(challenger);
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineWrongBond.selector, CHALLENGE_BOND + 1, CHALLENGE_BOND)
        );
        court.proveAggregationFraud{value: CHALLENGE_BOND + 1}(p);
    }

    function test_ruleNotChunkProvable_reverts() public {
        AggregationRule[3] memory rules =
            [AggregationRule.Krum, AggregationRule.MultiKrum, AggregationRule.CenteredClip];
        for (uint256 i = 0; i < 3; ++i) {
            uint256 task2 = _start(_spec(rules[i]));
            _commitAll(task2, 0, ALL);
            _finalize(task2, 0, keccak256("krum-state"), ALL);
            AggregationProof memory p = _aggProof(task2, 0, 0, 0, 1, _inputs(0, ALL), _initialState(), _initialState());
            _proveExpect(p, abi.encodeWithSelector(ISynclineEvents.SynclineRuleNotChunkProvable.selector, rules[i]));
        }
    }

    function test_wrongTaskStatus_reverts() public {
        (AggregationProof memory p,) = _tamperedRound0();
        p.taskId = 99;
        _proveExpect(p, abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, 99));
        uint256 task2 = _post(spec);
        p.taskId = task2;
        _proveExpect(
            p,
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, task2, TaskStatus.Enrolling, TaskStatus.Running
            )
        );
    }

    // ------------------------------------------------------------------ later rounds, running runs

    /// Fraud in round 1 on top of an honest round 0 rolls back to round 0's state only; round 0
    /// keeps its rewards and fees.
    function test_fraudInLaterRound_rollsBackToItsPrevious() public {
        bytes[] memory honest0 = _honest0();
        _finalize(taskId, 0, _root(honest0), ALL);
        _commitAll(taskId, 1, ALL);
        bytes[] memory honest1 = _honestState(spec, 1, ALL, honest0);
        bytes[] memory claimed1 = _tamper(honest1, 0, 0, true, 1 << 30);
        _finalizeClaim(taskId, 1, honest1, claimed1);
        AggregationProof memory p = _aggProof(taskId, 1, 0, 0, 1, _inputs(1, ALL), honest0, claimed1);
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RoundsInvalidated(taskId, 1, 1, _root(honest0));
        _prove(p);
        vm.assertEq(market.getTaskState(taskId).stateRoot, _root(honest0), "round 0 state");
        vm.assertEq(uint256(market.getRound(taskId, 0).status), uint256(RoundStatus.Finalized), "round 0 stands");
        // Round 0 itself is correct.
        _proveExpect(_aggProof(taskId, 0, 1, 0, 256, _inputs(0, ALL), _initialState(), honest0), _correctErr(0, 1));
        _seal(taskId);
        uint256 pool = POOL + WITNESS_BOND;
        uint256 paid = _addTrainerPayouts(pool, _weights(WEIGHT), 0);
        _add(witnesses[0], FEE);
        _add(witnesses[1], FEE);
        _add(witnesses[2], WITNESS_BOND);
        _add(challenger, CHALLENGE_BOND + WITNESS_BOND);
        _add(sponsor, pool - paid + 2 * FEE);
        _checkExpected();
    }

    /// Proven while the run is still running: only the closed rounds are voided, the open round
    /// goes on from the restored root (here it can only carry forward: two of three bonds are gone).
    function test_fraudWhileRunning_runContinues() public {
        (AggregationProof memory p,) = _tamperedRound0();
        vm.assertEq(uint256(market.getTaskState(taskId).status), uint256(TaskStatus.Running), "running");
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.RoundsInvalidated(taskId, 0, 0, spec.initialStateRoot);
        _prove(p);
        TaskState memory t = market.getTaskState(taskId);
        vm.assertEq(t.currentRound, 1, "round 1 open");
        vm.assertEq(t.stateRoot, spec.initialStateRoot, "restored");
        _commitAll(taskId, 1, ALL);
        _pastDeadline(taskId);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWitnessUnbonded.selector, taskId, witnesses[0]));
        _vote(taskId, 1, 0, keccak256("x"), ALL);
        _carry(taskId, 1);
        vm.assertEq(market.getRound(taskId, 1).stateRoot, spec.initialStateRoot, "carried the restored root");
        _seal(taskId);
        for (uint256 i = 0; i < N_TRAINERS; ++i) {
            _add(trainers[i], STAKE);
        }
        _add(witnesses[2], WITNESS_BOND);
        _add(challenger, CHALLENGE_BOND + WITNESS_BOND);
        _add(sponsor, POOL + WITNESS_BOND + _feeBudget(spec));
        _checkExpected();
    }
}
