// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "../base/Vm.sol";

import {SynclineTest} from "../base/SynclineTest.sol";
import {MerkleRef} from "./MerkleRef.sol";
import {ChunkAggregationHarness} from "../harness/ChunkAggregationHarness.sol";
import {
    TaskSpec,
    TaskStatus,
    Tier,
    AggregationRule,
    RoundStatus,
    Commitment,
    Vote,
    Challenge,
    ChallengeKind,
    ChallengeStatus,
    AggregationProof
} from "../../src/SynclineTypes.sol";

/// @title CourtTestBase
/// @notice Base of the court tests, on the shared market test base (`SynclineTest`: the market
/// and its court module, actors with private keys, EIP-712 signing checked against an independent
/// implementation, the generic life-cycle helpers). Adds the court fixture: a challenger and an
/// answerer, 32 trainers, a 5-trainer task over 600 parameters with bonded witnesses, money checks
/// over every actor and task, and real round data: int8 gradient chunks, state chunks, Merkle
/// trees and proofs, and the honest new state recomputed with `ChunkAggregation`.
abstract contract CourtTestBase is SynclineTest {
    // ------------------------------------------------------------------ fixture constants
    // (the pool, stake, fee, shards, windows, quorum and bonds are the shared ones of `SynclineTest`)

    uint32 internal constant COURT_ROUNDS = 2;
    /// 600 parameters: chunks of 256, 256 and 88 coordinates.
    uint64 internal constant PARAMS = 600;
    uint256 internal constant CHUNKS = 3;
    uint16 internal constant N_TRAINERS = 5;
    uint32 internal constant LR_PPM = 700_000;
    uint32 internal constant MOM_PPM = 900_000;
    uint32 internal constant TRIM_BPS = 2_000;
    /// Every trainer holds SHARDS / N_TRAINERS = 2 shards: the weight of an accepted submission.
    uint256 internal constant WEIGHT = 2;
    uint256 internal constant ALL = (1 << N_TRAINERS) - 1;

    bytes32 internal constant REASON_REWARD = "reward";
    bytes32 internal constant REASON_BOND = "bond-refund";
    bytes32 internal constant REASON_BOUNTY = "challenge-bounty";
    bytes32 internal constant REASON_FORFEIT = "forfeited-bond";

    ChunkAggregationHarness internal agg;
    address internal challenger;
    address internal answerer;
    /// Every actor (for the money check: sum of credits).
    address[] internal everyone;
    /// Every task posted (for the money check: sum of escrows).
    uint256[] internal tasks;

    function setUp() public virtual override {
        super.setUp();
        agg = ChunkAggregationHarness(vm.deployCode("ChunkAggregationHarness.sol:ChunkAggregationHarness"));
        challenger = _actor("challenger");
        answerer = _actor("answerer");
        for (uint256 i = trainers.length; i < 32; ++i) {
            trainers.push(_actor(string.concat("trainer", _itoa(i))));
        }
    }

    /// @dev Every actor is registered for the money checks.
    function _actor(string memory name) internal virtual override returns (address a) {
        a = super._actor(name);
        everyone.push(a);
    }

    // ------------------------------------------------------------------ specs and tasks

    /// @dev The shared bonded spec (`_bondedSpec`) made the court fixture: 5 trainers (the run
    /// starts at the 5th), 2 shards each, `COURT_ROUNDS` rounds over a real 600-parameter initial
    /// state, `rule` (Verified tier for the robust rules), no eviction within the run.
    function _spec(AggregationRule rule) internal view returns (TaskSpec memory s) {
        s = _bondedSpec();
        s.specHash = keccak256("court-spec");
        s.specURI = "ipfs://court-spec";
        s.initialStateRoot = _initialStateRoot();
        s.tier = rule == AggregationRule.Mean ? Tier.Open : Tier.Verified;
        s.rule = rule;
        s.ruleParam = rule == AggregationRule.TrimmedMean ? TRIM_BPS : (rule == AggregationRule.CenteredClip ? 1 : 0);
        s.rounds = COURT_ROUNDS;
        s.minTrainers = N_TRAINERS;
        s.maxTrainers = N_TRAINERS;
        s.maxMissedRounds = 10;
        s.outerLrPpm = LR_PPM;
        s.outerMomentumPpm = MOM_PPM;
        s.paramCount = PARAMS;
    }

    /// @dev Posts `s` with a `POOL` reward pool and registers it for the money checks.
    function _post(TaskSpec memory s) internal returns (uint256 taskId) {
        taskId = _post(s, POOL);
        tasks.push(taskId);
    }

    /// @dev Posts `s`, bonds every witness and enrolls `maxTrainers` trainers (the run starts).
    function _start(TaskSpec memory s) internal returns (uint256 taskId) {
        taskId = _post(s);
        if (s.witnessBond != 0) _bondAll(taskId);
        _enrollMany(taskId, s.maxTrainers);
    }

    function _startRule(AggregationRule rule) internal returns (uint256) {
        return _start(_spec(rule));
    }

    // ------------------------------------------------------------------ commitments and votes

    function _commitment(uint256 taskId, uint32 round, uint16 fragment, bytes32 chunkRoot)
        internal
        pure
        returns (Commitment memory)
    {
        return Commitment({
            taskId: taskId,
            round: round,
            fragment: fragment,
            payloadHash: keccak256(abi.encode("payload", taskId, round, fragment, chunkRoot)),
            chunkRoot: chunkRoot,
            checkpointRoot: keccak256(abi.encode("checkpoints", taskId, round, fragment)),
            uri: URI
        });
    }

    /// @dev The trainer of `fragment` signs and relays its commitment of `chunkRoot`.
    function _commit(uint256 taskId, uint32 round, uint16 fragment, bytes32 chunkRoot) internal {
        _commitSigned(market.getTrainers(taskId)[fragment], _commitment(taskId, round, fragment, chunkRoot));
    }

    /// @dev Every fragment in `mask` commits its real gradient chunk root for `round`.
    function _commitAll(uint256 taskId, uint32 round, uint256 mask) internal {
        for (uint16 f = 0; f < 64; ++f) {
            if (mask >> f & 1 == 1) _commit(taskId, round, f, _gradRoot(round, f));
        }
    }

    /// @dev The vote for `(stateRoot, mask)` (its aggregate root derived from the state root).
    function _voteMsg(uint256 taskId, uint32 round, bytes32 stateRoot, uint256 mask)
        internal
        view
        returns (Vote memory)
    {
        return _voteMsg(taskId, round, stateRoot, keccak256(abi.encode("aggregate", stateRoot)), mask);
    }

    /// @dev Witness number `witness` signs and sends its vote for `(stateRoot, mask)`.
    function _vote(uint256 taskId, uint32 round, uint256 witness, bytes32 stateRoot, uint256 mask) internal {
        _voteWithMetric(_voteMsg(taskId, round, stateRoot, mask), witnesses[witness], 1_000_000);
    }

    function _pastDeadline(uint256 taskId) internal {
        uint256 d = _deadline(taskId) + 1;
        if (block.timestamp < d) warpTo(d);
    }

    /// @dev Witnesses 0 and 1 vote `(stateRoot, mask)` after the deadline: the round finalizes.
    function _finalize(uint256 taskId, uint32 round, bytes32 stateRoot, uint256 mask) internal {
        _finalizeBy(taskId, round, stateRoot, mask, 0, 1);
    }

    /// @dev Witnesses `wa` and `wb` vote `(stateRoot, mask)` after the deadline.
    function _finalizeBy(uint256 taskId, uint32 round, bytes32 stateRoot, uint256 mask, uint256 wa, uint256 wb)
        internal
    {
        _pastDeadline(taskId);
        _vote(taskId, round, wa, stateRoot, mask);
        _vote(taskId, round, wb, stateRoot, mask);
        require(market.getRound(taskId, round).status == RoundStatus.Finalized, "not finalized");
    }

    /// @dev Carries `round` forward at the earliest time the market allows: after the grace
    /// window, or, for a round nobody committed to, after its one extension (3 round durations).
    function _carry(uint256 taskId, uint32 round) internal {
        uint256 earliest = _deadline(taskId) + market.getSpec(taskId).graceWindow + 1;
        if (market.getRound(taskId, round).committedMask == 0) {
            uint256 extended = _deadline(taskId) + 3 * uint256(market.getSpec(taskId).roundDuration) + 1;
            if (extended > earliest) earliest = extended;
        }
        if (block.timestamp < earliest) warpTo(earliest);
        market.carryForward(taskId, round);
    }

    // ------------------------------------------------------------------ round data

    function _next(uint256 x) internal pure returns (uint256) {
        unchecked {
            return x * 6364136223846793005 + 1442695040888963407;
        }
    }

    /// @dev Coordinates of chunk `c` of a `PARAMS`-parameter tensor.
    function _count(uint256 c) internal pure returns (uint256) {
        uint256 rest = PARAMS - c * 256;
        return rest < 256 ? rest : 256;
    }

    /// @dev A pseudo-random int8 gradient chunk: header (8, exponent in [16, 34]), values in [-127, 127].
    function _gradChunk(uint256 seed, uint256 count) internal pure returns (bytes memory c) {
        c = new bytes(2 + count);
        uint256 x = uint256(keccak256(abi.encode("grad", seed)));
        c[0] = bytes1(uint8(8));
        c[1] = bytes1(uint8(16 + (x % 19)));
        for (uint256 j = 0; j < count; ++j) {
            x = _next(x);
            c[2 + j] = bytes1(uint8(int8(int256((x >> 128) % 255) - 127)));
        }
    }

    /// @dev The gradient chunks fragment `fragment` trains in `round`.
    function _gradChunks(uint32 round, uint16 fragment) internal pure returns (bytes[] memory out) {
        out = new bytes[](CHUNKS);
        for (uint256 c = 0; c < CHUNKS; ++c) {
            out[c] = _gradChunk(uint256(keccak256(abi.encode(round, fragment, c))), _count(c));
        }
    }

    function _gradRoot(uint32 round, uint16 fragment) internal pure returns (bytes32) {
        return MerkleRef.root(MerkleRef.hashes(_gradChunks(round, fragment)));
    }

    /// @dev A state chunk of `count` coordinates, |weight|, |momentum| < 2**40.
    function _stateChunk(uint256 seed, uint256 count) internal pure returns (bytes memory out) {
        out = new bytes(16 * count);
        uint256 x = uint256(keccak256(abi.encode("state", seed)));
        for (uint256 j = 0; j < 2 * count; ++j) {
            x = _next(x);
            int256 v = int256((x >> 100) % (1 << 41)) - int256(1 << 40);
            _putInt64(out, j, v);
        }
    }

    function _putInt64(bytes memory b, uint256 slot, int256 v) internal pure {
        uint64 u = uint64(int64(v));
        for (uint256 k = 0; k < 8; ++k) {
            b[8 * slot + k] = bytes1(uint8(u >> (56 - 8 * k)));
        }
    }

    function _getInt64(bytes memory b, uint256 slot) internal pure returns (int256) {
        uint64 u;
        for (uint256 k = 0; k < 8; ++k) {
            u = (u << 8) | uint8(b[8 * slot + k]);
        }
        return int256(int64(u));
    }

    function _initialState() internal pure returns (bytes[] memory out) {
        out = new bytes[](CHUNKS);
        for (uint256 c = 0; c < CHUNKS; ++c) {
            out[c] = _stateChunk(c, _count(c));
        }
    }

    function _initialStateRoot() internal pure returns (bytes32) {
        return MerkleRef.root(MerkleRef.hashes(_initialState()));
    }

    function _root(bytes[] memory chunks) internal pure returns (bytes32) {
        return MerkleRef.root(MerkleRef.hashes(chunks));
    }

    /// @dev Fragments of `mask`, ascending.
    function _fragments(uint256 mask) internal pure returns (uint16[] memory out) {
        out = new uint16[](_popcount(mask));
        uint256 n = 0;
        for (uint256 f = 0; f < 256; ++f) {
            if (mask >> f & 1 == 1) out[n++] = uint16(f);
        }
    }

    /// @dev The honest new state of `round`: the task's rule over the `mask` fragments' gradients
    /// and the outer step on `prev`, chunk by chunk (what correct witnesses finalize).
    function _honestState(TaskSpec memory s, uint32 round, uint256 mask, bytes[] memory prev)
        internal
        view
        returns (bytes[] memory out)
    {
        uint16[] memory frags = _fragments(mask);
        out = new bytes[](CHUNKS);
        bytes[][] memory all = new bytes[][](frags.length);
        for (uint256 i = 0; i < frags.length; ++i) {
            all[i] = _gradChunks(round, frags[i]);
        }
        for (uint256 c = 0; c < CHUNKS; ++c) {
            bytes[] memory inputs = new bytes[](frags.length);
            for (uint256 i = 0; i < frags.length; ++i) {
                inputs[i] = all[i][c];
            }
            out[c] = agg.recomputeStateChunk(
                inputs,
                s.gradientBits,
                uint8(s.rule),
                s.rule == AggregationRule.TrimmedMean ? s.ruleParam : 0,
                prev[c],
                s.outerLrPpm,
                s.outerMomentumPpm
            );
        }
    }

    /// @dev A copy of `chunks` with one int64 of chunk `c` changed by `delta`: weight `j`
    /// (`momentum` false) or momentum `j`.
    function _tamper(bytes[] memory chunks, uint256 c, uint256 j, bool momentum, int256 delta)
        internal
        pure
        returns (bytes[] memory out)
    {
        out = new bytes[](chunks.length);
        for (uint256 i = 0; i < chunks.length; ++i) {
            out[i] = bytes.concat(chunks[i]);
        }
        uint256 slot = momentum ? _count(c) + j : j;
        _putInt64(out[c], slot, _getInt64(out[c], slot) + delta);
    }

    /// @dev An aggregation proof opening chunk `ci`, window `[lo, hi)`: the `inputs[i]` chunk
    /// lists are the accepted submissions' gradients in fragment order.
    function _aggProof(
        uint256 taskId,
        uint32 round,
        uint32 ci,
        uint16 lo,
        uint16 hi,
        bytes[][] memory inputs,
        bytes[] memory prev,
        bytes[] memory claimed
    ) internal pure returns (AggregationProof memory p) {
        p.taskId = taskId;
        p.round = round;
        p.chunkIndex = ci;
        p.lo = lo;
        p.hi = hi;
        p.inputChunks = new bytes[](inputs.length);
        p.inputProofs = new bytes32[][](inputs.length);
        for (uint256 i = 0; i < inputs.length; ++i) {
            p.inputChunks[i] = inputs[i][ci];
            p.inputProofs[i] = MerkleRef.proof(MerkleRef.hashes(inputs[i]), ci);
        }
        p.prevChunk = prev[ci];
        p.prevProof = MerkleRef.proof(MerkleRef.hashes(prev), ci);
        p.claimedChunk = claimed[ci];
        p.claimedProof = MerkleRef.proof(MerkleRef.hashes(claimed), ci);
    }

    /// @dev The gradient chunk lists of the `mask` fragments in `round`, in fragment order.
    function _inputs(uint32 round, uint256 mask) internal pure returns (bytes[][] memory all) {
        uint16[] memory frags = _fragments(mask);
        all = new bytes[][](frags.length);
        for (uint256 i = 0; i < frags.length; ++i) {
            all[i] = _gradChunks(round, frags[i]);
        }
    }

    /// @dev A malformed variant of a well-formed int8 chunk: 0 a value of -128, 1 exponent 35,
    /// 2 bits byte 16, 3 one byte short, 4 one byte long, 5 only one byte.
    function _malform(bytes memory chunk, uint256 kind) internal pure returns (bytes memory out) {
        if (kind == 3) {
            out = new bytes(chunk.length - 1);
            for (uint256 i = 0; i < out.length; ++i) {
                out[i] = chunk[i];
            }
            return out;
        }
        if (kind == 4) return bytes.concat(chunk, hex"01");
        if (kind == 5) return hex"08";
        out = bytes.concat(chunk);
        if (kind == 0) out[2 + 7] = bytes1(uint8(0x80));
        else if (kind == 1) out[1] = bytes1(uint8(35));
        else out[0] = bytes1(uint8(16));
    }

    // ------------------------------------------------------------------ challenges

    /// @dev The challenger claims `fragment` was left out of `round` (with the bond).
    function _challengeCensorship(uint256 taskId, uint32 round, uint16 fragment) internal returns (uint256) {
        vm.prank(challenger);
        return court.challengeCensorship{value: CHALLENGE_BOND}(taskId, round, fragment);
    }

    /// @dev The challenger claims `segment` of `fragment`'s accepted training in `round` is wrong
    /// (with the bond).
    function _challengeTraining(uint256 taskId, uint32 round, uint16 fragment, uint32 segment)
        internal
        returns (uint256)
    {
        vm.prank(challenger);
        return court.challengeTraining{value: CHALLENGE_BOND}(taskId, round, fragment, segment);
    }

    /// @dev Witness number `w` referees training challenge `id`.
    function _referee(uint256 id, uint256 w, bool guilty) internal {
        vm.prank(witnesses[w]);
        court.refereeVote(id, guilty);
    }

    function _assertChallenge(uint256 id, ChallengeKind kind, ChallengeStatus status, uint256 slashed) internal view {
        Challenge memory c = court.getChallenge(id);
        vm.assertEq(uint256(c.kind), uint256(kind), "challenge kind");
        vm.assertEq(uint256(c.status), uint256(status), "challenge status");
        vm.assertEq(c.slashed, slashed, "challenge slashed");
    }

    // ------------------------------------------------------------------ money

    /// @dev The market holds exactly the obligations of every task posted plus the pull credits
    /// of every actor.
    function _assertMoney() internal view {
        _assertMoneyInvariant(tasks, everyone);
    }

    /// @dev Waits out the last challenge window and seals; the task then holds nothing.
    function _seal(uint256 taskId) internal {
        _warpToSeal(taskId);
        market.seal(taskId);
        _assertStatus(taskId, TaskStatus.Sealed, "sealed");
        vm.assertEq(market.escrowOf(taskId), 0, "a sealed task holds nothing");
        _assertMoney();
    }

    /// @dev Expected credits: one entry per actor, checked to the wei (actors not listed must
    /// have no credit at all).
    function _assertCredits(address[] memory who, uint256[] memory amounts) internal view {
        require(who.length == amounts.length, "lengths");
        for (uint256 i = 0; i < everyone.length; ++i) {
            address a = everyone[i];
            uint256 expected = 0;
            for (uint256 k = 0; k < who.length; ++k) {
                if (who[k] == a) expected += amounts[k];
            }
            vm.assertEq(market.creditOf(a), expected, string.concat("credit of ", _nameOf(a)));
        }
    }

    function _nameOf(address a) internal view returns (string memory) {
        if (a == sponsor) return "sponsor";
        if (a == challenger) return "challenger";
        if (a == answerer) return "answerer";
        if (a == stranger) return "stranger";
        for (uint256 i = 0; i < witnesses.length; ++i) {
            if (a == witnesses[i]) return string.concat("witness", _itoa(i));
        }
        for (uint256 i = 0; i < trainers.length; ++i) {
            if (a == trainers[i]) return string.concat("trainer", _itoa(i));
        }
        return "?";
    }

    /// @dev A credit ledger built up by a test: `_add(who, amount)` accumulates.
    address[] internal _expWho;
    uint256[] internal _expAmt;

    function _add(address who, uint256 amount) internal {
        _expWho.push(who);
        _expAmt.push(amount);
    }

    function _checkExpected() internal view {
        _assertCredits(_expWho, _expAmt);
    }

    /// @dev Pro-rata reward of `weight` out of `total` from `pool`, as `seal` computes it.
    function _share(uint256 pool, uint256 weight, uint256 total) internal pure returns (uint256) {
        return total == 0 ? 0 : (pool * weight) / total;
    }

    /// @dev Books what the seal pays the fixture's trainers: trainer i its pro-rata reward of
    /// `pool` for `weights[i]` (out of their sum) plus its stake, unless it is in `slashedMask`
    /// (stake slashed away). Returns the rewards paid (the sponsor gets `pool` minus that back).
    function _addTrainerPayouts(uint256 pool, uint256[N_TRAINERS] memory weights, uint256 slashedMask)
        internal
        returns (uint256 paid)
    {
        uint256 total = 0;
        for (uint256 i = 0; i < N_TRAINERS; ++i) {
            total += weights[i];
        }
        for (uint256 i = 0; i < N_TRAINERS; ++i) {
            uint256 reward = _share(pool, weights[i], total);
            paid += reward;
            _add(trainers[i], reward + ((slashedMask >> i) & 1 == 1 ? 0 : STAKE));
        }
    }

    /// @dev `weight` for every fixture trainer.
    function _weights(uint256 weight) internal pure returns (uint256[N_TRAINERS] memory w) {
        for (uint256 i = 0; i < N_TRAINERS; ++i) {
            w[i] = weight;
        }
    }
}
