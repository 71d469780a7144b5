// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "../base/Vm.sol";

import {CourtTestBase} from "./CourtTestBase.sol";
import {MerkleRef} from "./MerkleRef.sol";
import {ISynclineCourt} from "../../src/ISynclineCourt.sol";
import {
    TaskSpec,
    Tier,
    AggregationRule,
    RoundStatus,
    Commitment,
    Vote,
    ChallengeStatus,
    AggregationProof
} from "../../src/SynclineTypes.sol";

/// @notice Gas of `proveAggregationFraud` on a 1,000,000-parameter model (3,907 chunks of 256
/// coordinates: 12-sibling Merkle paths), for Mean, TrimmedMean (beta 20%) and CoordinateMedian,
/// 16 and 32 accepted int8 inputs, recomputing the full 256-coordinate chunk or a 32-coordinate
/// window. Every proof here is upheld (one weight of the opened window is off by one), so the
/// figure includes the slashing of the two voters and the invalidation of the round.
/// `gas` is the `gasleft()` difference around the call from the test (the market's fallback,
/// the delegatecall and the court, plus ~9k for the bond the call carries); `calldata` is the
/// calldata cost a transaction adds (4 gas per zero byte, 16 per other byte). A transaction pays
/// 21,000 + calldata + gas.
/// Run: `forge test --match-path contracts/test/court/AggregationProofGas.t.sol -vv`.
contract AggregationProofGasTest is CourtTestBase {
    event log_named_uint(string key, uint256 val);

    uint64 internal constant BIG_PARAMS = 1_000_000;
    uint256 internal constant BIG_CHUNKS = 3907;
    uint256 internal constant LIMIT_16 = 3_000_000;

    /// The sibling path of leaf 0 in a 3,907-leaf tree whose other leaves are fixed filler: a
    /// leaf's path does not depend on the leaf, so every tree here shares it.
    bytes32[] internal fillerPath;

    function setUp() public override {
        super.setUp();
        bytes32[] memory hs = new bytes32[](BIG_CHUNKS);
        for (uint256 i = 1; i < BIG_CHUNKS; ++i) {
            hs[i] = keccak256(abi.encode("filler", i));
        }
        bytes32[] memory path = MerkleRef.proof(hs, 0);
        for (uint256 i = 0; i < path.length; ++i) {
            fillerPath.push(path[i]);
        }
    }

    function _rootWith(bytes memory chunk0) internal view returns (bytes32) {
        return MerkleRef.rootFromPath(0, BIG_CHUNKS, keccak256(chunk0), fillerPath);
    }

    struct Case {
        AggregationRule rule;
        uint16 n;
        uint16 lo;
        uint16 hi;
    }

    /// @dev Posts an n-trainer task over the big model, commits real chunk-0 gradients, finalizes
    /// a state whose weight 100 is off by one, and returns the proof of the window `[lo, hi)`.
    function _scenario(Case memory k) internal returns (AggregationProof memory p) {
        bytes memory prev = _stateChunk(7, 256);
        TaskSpec memory s = _spec(k.rule);
        s.paramCount = BIG_PARAMS;
        s.initialStateRoot = _rootWith(prev);
        s.minTrainers = k.n;
        s.maxTrainers = k.n;
        s.shardCount = 64;
        uint256 taskId = _start(s);
        bytes[] memory inputs = new bytes[](k.n);
        for (uint16 f = 0; f < k.n; ++f) {
            inputs[f] = _gradChunk(uint256(keccak256(abi.encode("big", f))), 256);
            _commit(taskId, 0, f, _rootWith(inputs[f]));
        }
        bytes memory honest = agg.recomputeStateChunk(
            inputs, 8, uint8(k.rule), k.rule == AggregationRule.TrimmedMean ? TRIM_BPS : 0, prev, LR_PPM, MOM_PPM
        );
        bytes[] memory one = new bytes[](1);
        one[0] = honest;
        bytes memory claimed = _tamper(one, 0, 100, false, 1)[0];
        uint256 mask = (uint256(1) << k.n) - 1;
        _finalize(taskId, 0, _rootWith(claimed), mask);

        p.taskId = taskId;
        p.round = 0;
        p.chunkIndex = 0;
        p.lo = k.lo;
        p.hi = k.hi;
        p.inputChunks = inputs;
        p.inputProofs = new bytes32[][](k.n);
        for (uint256 i = 0; i < k.n; ++i) {
            p.inputProofs[i] = fillerPath;
        }
        p.prevChunk = prev;
        p.prevProof = fillerPath;
        p.claimedChunk = claimed;
        p.claimedProof = fillerPath;
    }

    function _calldataGas(bytes memory data) internal pure returns (uint256 g) {
        for (uint256 i = 0; i < data.length; ++i) {
            g += data[i] == 0 ? 4 : 16;
        }
    }

    function _measure(Case memory k, string memory label) internal returns (uint256 used) {
        AggregationProof memory p = _scenario(k);
        uint256 cd = _calldataGas(abi.encodeCall(ISynclineCourt.proveAggregationFraud, (p)));
        vm.prank(challenger);
        uint256 before = gasleft();
        court.proveAggregationFraud{value: CHALLENGE_BOND}(p);
        used = before - gasleft();
        vm.assertEq(uint256(market.getRound(p.taskId, 0).status), uint256(RoundStatus.Invalidated), "proven");
        emit log_named_uint(string.concat(label, " gas"), used);
        emit log_named_uint(string.concat(label, " calldata"), cd);
        emit log_named_uint(string.concat(label, " tx total"), 21_000 + cd + used);
    }

    /// @dev Gas of a reverting call (the revert data is not checked: each step below reverts
    /// where it is meant to, which the other court tests pin down).
    function _gasUntilRevert(AggregationProof memory p) internal returns (uint256 used) {
        bytes memory data = abi.encodeCall(ISynclineCourt.proveAggregationFraud, (p));
        vm.prank(challenger);
        uint256 before = gasleft();
        (bool ok,) = address(market).call{value: CHALLENGE_BOND}(data);
        used = before - gasleft();
        vm.assertFalse(ok, "meant to revert");
    }

    /// Where the gas of a 16-input, 32-coordinate Mean proof goes: the state openings, the 16
    /// input openings and well-formedness scans, the windowed recomputation, and the
    /// consequences (challenge record, two witness slashes, the round voided, credits).
    function test_gas_breakdown_mean_16_window32() public {
        AggregationProof memory p = _scenario(Case(AggregationRule.Mean, 16, 96, 128));
        bytes32 keep = p.claimedProof[0];
        p.claimedProof[0] = bytes32(0);
        uint256 openings = _gasUntilRevert(p);
        p.claimedProof[0] = keep;
        bytes32 keepIn = p.inputProofs[15][0];
        p.inputProofs[15] = new bytes32[](p.inputProofs[15].length);
        p.inputProofs[15][0] = keepIn ^ bytes32(uint256(1));
        uint256 inputs = _gasUntilRevert(p);
        p.inputProofs[15] = fillerPath;
        // Window [0, 32) does not hold the changed weight (100): everything but the consequences.
        p.lo = 0;
        p.hi = 32;
        uint256 checked = _gasUntilRevert(p);
        p.lo = 96;
        p.hi = 128;
        vm.prank(challenger);
        uint256 before = gasleft();
        court.proveAggregationFraud{value: CHALLENGE_BOND}(p);
        uint256 total = before - gasleft();
        emit log_named_uint("breakdown: call + checks + prev/claimed openings", openings);
        emit log_named_uint("breakdown: + 15 input openings and scans (reverts at the 16th)", inputs - openings);
        emit log_named_uint("breakdown: + 16th input and the 32-coordinate recomputation", checked - inputs);
        emit log_named_uint("breakdown: + consequences (record, slashes, void, credits)", total - checked);
        emit log_named_uint("breakdown: total", total);
    }

    // ------------------------------------------------------------------ 16 inputs

    function test_gas_mean_16_window32() public {
        vm.assertLt(_measure(Case(AggregationRule.Mean, 16, 96, 128), "Mean n=16 w=32"), LIMIT_16, "< 3M");
    }

    function test_gas_mean_16_full() public {
        _measure(Case(AggregationRule.Mean, 16, 0, 256), "Mean n=16 w=256");
    }

    function test_gas_trimmedMean_16_window32() public {
        vm.assertLt(
            _measure(Case(AggregationRule.TrimmedMean, 16, 96, 128), "TrimmedMean20 n=16 w=32"), LIMIT_16, "< 3M"
        );
    }

    function test_gas_trimmedMean_16_full() public {
        _measure(Case(AggregationRule.TrimmedMean, 16, 0, 256), "TrimmedMean20 n=16 w=256");
    }

    function test_gas_median_16_window32() public {
        vm.assertLt(_measure(Case(AggregationRule.CoordinateMedian, 16, 96, 128), "Median n=16 w=32"), LIMIT_16, "< 3M");
    }

    function test_gas_median_16_full() public {
        _measure(Case(AggregationRule.CoordinateMedian, 16, 0, 256), "Median n=16 w=256");
    }

    // ------------------------------------------------------------------ 32 inputs

    function test_gas_mean_32_window32() public {
        _measure(Case(AggregationRule.Mean, 32, 96, 128), "Mean n=32 w=32");
    }

    function test_gas_mean_32_full() public {
        _measure(Case(AggregationRule.Mean, 32, 0, 256), "Mean n=32 w=256");
    }

    function test_gas_trimmedMean_32_window32() public {
        _measure(Case(AggregationRule.TrimmedMean, 32, 96, 128), "TrimmedMean20 n=32 w=32");
    }

    function test_gas_trimmedMean_32_full() public {
        _measure(Case(AggregationRule.TrimmedMean, 32, 0, 256), "TrimmedMean20 n=32 w=256");
    }

    function test_gas_median_32_window32() public {
        _measure(Case(AggregationRule.CoordinateMedian, 32, 96, 128), "Median n=32 w=32");
    }

    function test_gas_median_32_full() public {
        _measure(Case(AggregationRule.CoordinateMedian, 32, 0, 256), "Median n=32 w=256");
    }
}

/// @notice Gas of the other proofs and challenge steps on the fixture task (5 trainers over 10
/// shards, 2-of-3 bonded witnesses, 600 parameters in 3 chunks), measured like the aggregation
/// proofs (`gasleft()` around the call; no transaction base or calldata cost).
/// Run: `forge test --match-path contracts/test/court/AggregationProofGas.t.sol -vv`.
contract CourtProofsGasTest is CourtTestBase {
    event log_named_uint(string key, uint256 val);

    uint256 internal taskId;

    function setUp() public override {
        super.setUp();
        taskId = _startRule(AggregationRule.Mean);
        // Fragment 4 commits a malformed chunk 1 and is left out with fragment 3.
        for (uint16 f = 0; f < 4; ++f) {
            _commit(taskId, 0, f, _gradRoot(0, f));
        }
        _commit(taskId, 0, 4, _root(_f4()));
        _finalize(taskId, 0, keccak256("state-0"), 0x07);
    }

    function _f4() internal pure returns (bytes[] memory chunks) {
        chunks = _gradChunks(0, 4);
        chunks[1] = _malform(chunks[1], 0);
    }

    function _log(string memory key, uint256 before) internal {
        emit log_named_uint(key, before - gasleft());
    }

    function test_gas_proveTrainerEquivocation() public {
        Commitment memory a = _commitment(taskId, 0, 2, _gradRoot(0, 2));
        Commitment memory b = _commitment(taskId, 0, 2, keccak256("other"));
        bytes memory sa = _signC(trainers[2], a);
        bytes memory sb = _signC(trainers[2], b);
        vm.prank(challenger);
        uint256 g = gasleft();
        court.proveTrainerEquivocation{value: CHALLENGE_BOND}(a, sa, b, sb);
        _log("proveTrainerEquivocation (accepted, revoked, 4 trainers rebalanced)", g);
        vm.assertEq(market.getRound(taskId, 0).revokedMask, 1 << 2, "accepted and revoked");
        vm.assertEq(market.getTrainer(taskId, trainers[0]).shardMask, 0x003, "4 trainers rebalanced");
    }

    function test_gas_proveWitnessEquivocation() public {
        Vote memory a = Vote(
            taskId,
            0,
            bytes32(0),
            keccak256("state-0"),
            keccak256(abi.encode("aggregate", keccak256("state-0"))),
            0x07,
            0
        );
        Vote memory b = Vote(taskId, 0, bytes32(0), keccak256("other"), bytes32(0), 0x07, 0);
        bytes memory sa = _signV(witnesses[0], a);
        bytes memory sb = _signV(witnesses[0], b);
        vm.prank(challenger);
        uint256 g = gasleft();
        court.proveWitnessEquivocation{value: CHALLENGE_BOND}(a, sa, b, sb);
        _log("proveWitnessEquivocation", g);
        vm.assertEq(market.getWitness(taskId, witnesses[0]).slashed, WITNESS_BOND, "bond slashed");
    }

    function test_gas_censorship() public {
        vm.prank(challenger);
        uint256 g = gasleft();
        uint256 id3 = court.challengeCensorship{value: CHALLENGE_BOND}(taskId, 0, 3);
        _log("challengeCensorship", g);
        vm.prank(challenger);
        uint256 id4 = court.challengeCensorship{value: CHALLENGE_BOND}(taskId, 0, 4);
        bytes[] memory chunks = _f4();
        bytes32[] memory proof = MerkleRef.proof(MerkleRef.hashes(chunks), 1);
        vm.prank(witnesses[0]);
        g = gasleft();
        court.answerCensorship(id4, 1, chunks[1], proof);
        _log("answerCensorship (256-value malformed chunk, 2-sibling path)", g);
        // Round 1 finalizes too, so the ruling voids two rounds.
        _commitAll(taskId, 1, ALL);
        _finalize(taskId, 1, keccak256("state-1"), ALL);
        warpTo(court.getChallenge(id3).deadline + 1);
        g = gasleft();
        court.resolveCensorship(id3);
        _log("resolveCensorship (upheld: 2 witnesses slashed, 2 rounds voided)", g);
        vm.assertEq(uint256(court.getChallenge(id3).status), uint256(ChallengeStatus.Upheld), "upheld");
    }

    /// A proven round fault voids every round finalized after it: the ruling's cost grows with
    /// the rounds since (16 trainers, all but one accepted each round).
    function test_gas_resolveCensorship_voidsManyRounds() public {
        uint256[3] memory rounds = [uint256(1), 4, 10];
        for (uint256 k = 0; k < 3; ++k) {
            TaskSpec memory s = _spec(AggregationRule.Mean);
            s.minTrainers = 16;
            s.maxTrainers = 16;
            s.shardCount = 16;
            s.rounds = uint32(rounds[k]) + 1;
            s.challengeWindow = 30 days;
            uint256 task = _start(s);
            uint256 all = (uint256(1) << 16) - 1;
            uint256 accepted = all & ~uint256(1 << 15);
            uint256 id;
            for (uint32 r = 0; r < rounds[k]; ++r) {
                _commitAll(task, r, all);
                _finalize(task, r, keccak256(abi.encode("s", r)), accepted);
                if (r == 0) {
                    vm.prank(challenger);
                    id = court.challengeCensorship{value: CHALLENGE_BOND}(task, 0, 15);
                }
            }
            warpTo(court.getChallenge(id).deadline + 1);
            uint256 g = gasleft();
            court.resolveCensorship(id);
            emit log_named_uint(
                string.concat("resolveCensorship voiding ", _itoa(rounds[k]), " rounds (16 trainers)"), g - gasleft()
            );
            vm.assertEq(market.getTaskState(task).roundsInvalidated, rounds[k], "rounds voided");
        }
    }

    function test_gas_training() public {
        vm.prank(challenger);
        uint256 g = gasleft();
        uint256 id = court.challengeTraining{value: CHALLENGE_BOND}(taskId, 0, 1, 3);
        _log("challengeTraining", g);
        vm.prank(witnesses[0]);
        g = gasleft();
        court.refereeVote(id, true);
        _log("refereeVote (first guilty vote, not deciding)", g);
        vm.prank(witnesses[1]);
        g = gasleft();
        court.refereeVote(id, true);
        _log("refereeVote (deciding guilty: slash, evict, revoke, rebalance)", g);
        vm.assertEq(uint256(court.getChallenge(id).status), uint256(ChallengeStatus.Upheld), "upheld");

        vm.prank(challenger);
        uint256 id2 = court.challengeTraining{value: CHALLENGE_BOND}(taskId, 0, 2, 3);
        vm.prank(witnesses[0]);
        court.refereeVote(id2, false);
        vm.prank(witnesses[1]);
        g = gasleft();
        court.refereeVote(id2, false);
        _log("refereeVote (deciding innocent: bond split between 2 referees)", g);
        vm.assertEq(uint256(court.getChallenge(id2).status), uint256(ChallengeStatus.Rejected), "rejected");

        vm.prank(challenger);
        uint256 id3 = court.challengeTraining{value: CHALLENGE_BOND}(taskId, 0, 0, 3);
        vm.prank(court.getChallenge(id3).accused);
        g = gasleft();
        court.answerTraining(id3); // answered: an undecided claim expires
        _log("answerTraining", g);
        warpTo(block.timestamp + CHALLENGE_WINDOW + 1);
        g = gasleft();
        court.expireChallenge(id3);
        _log("expireChallenge", g);
    }
}
