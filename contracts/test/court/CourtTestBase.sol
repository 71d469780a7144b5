// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {CourtVm} from "./CourtVm.sol";
import {MerkleRef} from "./MerkleRef.sol";
import {CourtAggregationHarness} from "./CourtHarness.sol";
import {ISynclineMarket} from "../../src/ISynclineMarket.sol";
import {ISynclineCourt} from "../../src/ISynclineCourt.sol";
import {
    TaskSpec,
    TaskState,
    TaskStatus,
    Tier,
    AggregationRule,
    Modality,
    RoundRecord,
    RoundStatus,
    TrainerRecord,
    WitnessRecord,
    Commitment,
    Vote,
    Challenge,
    ChallengeKind,
    ChallengeStatus,
    AggregationProof
} from "../../src/SynclineTypes.sol";

/// @title CourtTestBase
/// @notice Self-contained base of the court tests (no forge-std, independent of the shared
/// `contracts/test/base`): deploys `SynclineCourt` and a `SynclineMarket` delegating to it, makes
/// actors from private keys (`vm.addr`), signs `Commitment`/`Vote` EIP-712 messages itself (domain
/// separator computed here from ("Syncline", "1", chainid, market) and the type strings), posts
/// tasks, enrolls trainers, bonds witnesses, commits and finalizes rounds, and builds real
/// round data: int8 gradient chunks, state chunks, Merkle trees and proofs, and the honest new
/// state recomputed with `ChunkAggregation`.
abstract contract CourtTestBase {
    bool public IS_TEST = true;
    CourtVm internal constant vm = CourtVm(address(uint160(uint256(keccak256("hevm cheat code")))));

    uint256 internal constant SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141;
    bytes32 internal constant DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");
    bytes32 internal constant COMMITMENT_TYPEHASH = keccak256(
        "Commitment(uint256 taskId,uint32 round,uint16 fragment,bytes32 payloadHash,bytes32 chunkRoot,bytes32 checkpointRoot)"
    );
    bytes32 internal constant VOTE_TYPEHASH =
        keccak256("Vote(uint256 taskId,uint32 round,bytes32 stateRoot,bytes32 aggregateRoot,uint256 acceptedMask)");

    // ------------------------------------------------------------------ fixture constants

    uint256 internal constant T0 = 1_700_000_000;
    uint256 internal constant FUNDS = 1_000_000 ether;
    uint256 internal constant POOL = 10 ether;
    uint128 internal constant STAKE = 1 ether;
    uint128 internal constant FEE = 0.01 ether;
    uint128 internal constant WBOND = 0.5 ether;
    uint128 internal constant CBOND = 0.1 ether;
    uint16 internal constant SHARDS = 10;
    uint32 internal constant ROUNDS = 2;
    uint32 internal constant INNER_STEPS = 500;
    uint32 internal constant CKPT_INTERVAL = 50;
    /// 600 parameters: chunks of 256, 256 and 88 coordinates.
    uint64 internal constant PARAMS = 600;
    uint256 internal constant CHUNKS = 3;
    uint64 internal constant ROUND_DURATION = 1 hours;
    uint64 internal constant GRACE = 30 minutes;
    uint64 internal constant WINDOW = 1 days;
    uint64 internal constant ENROLL_PERIOD = 1 days;
    uint16 internal constant N_TRAINERS = 5;
    uint256 internal constant N_WITNESSES = 3;
    uint8 internal constant THRESHOLD = 2;
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

    // ------------------------------------------------------------------ deployment and actors

    address internal courtModule;
    address internal marketAddr;
    ISynclineMarket internal market;
    ISynclineCourt internal court;
    CourtAggregationHarness internal agg;

    address internal sponsor;
    address internal challenger;
    address internal answerer;
    address internal stranger;
    address[] internal witnesses;
    address[] internal trainers;
    mapping(address => uint256) internal keyOf;
    /// Every actor (for the money check: sum of credits).
    address[] internal everyone;
    /// Every task posted (for the money check: sum of escrows).
    uint256[] internal tasks;

    function setUp() public virtual {
        vm.warp(T0);
        courtModule = vm.deployCode("SynclineCourt.sol:SynclineCourt");
        marketAddr = vm.deployCode("SynclineMarket.sol:SynclineMarket", abi.encode(courtModule));
        market = ISynclineMarket(marketAddr);
        court = ISynclineCourt(marketAddr);
        agg = new CourtAggregationHarness();
        vm.label(courtModule, "SynclineCourt");
        vm.label(marketAddr, "SynclineMarket");
        sponsor = _actor("sponsor");
        challenger = _actor("challenger");
        answerer = _actor("answerer");
        stranger = _actor("stranger");
        for (uint256 i = 0; i < N_WITNESSES; ++i) {
            witnesses.push(_actor(string.concat("witness", _itoa(i))));
        }
        for (uint256 i = 0; i < 32; ++i) {
            trainers.push(_actor(string.concat("trainer", _itoa(i))));
        }
    }

    function _actor(string memory name) internal returns (address a) {
        uint256 pk = (uint256(keccak256(abi.encodePacked("court-actor", name))) % (SECP256K1_N - 1)) + 1;
        a = vm.addr(pk);
        keyOf[a] = pk;
        vm.deal(a, FUNDS);
        vm.label(a, name);
        everyone.push(a);
    }

    function _itoa(uint256 v) internal pure returns (string memory) {
        if (v == 0) return "0";
        bytes memory b;
        while (v != 0) {
            b = abi.encodePacked(bytes1(uint8(48 + (v % 10))), b);
            v /= 10;
        }
        return string(b);
    }

    function bound(uint256 x, uint256 lo, uint256 hi) internal pure returns (uint256) {
        require(lo <= hi, "bound");
        if (x >= lo && x <= hi) return x;
        return lo + (x % (hi - lo + 1));
    }

    // ------------------------------------------------------------------ EIP-712 (independent)

    function _domain(address verifyingContract, uint256 chainId) internal pure returns (bytes32) {
        return keccak256(abi.encode(DOMAIN_TYPEHASH, keccak256("Syncline"), keccak256("1"), chainId, verifyingContract));
    }

    function _commitmentDigest(Commitment memory c, address verifyingContract, uint256 chainId)
        internal
        pure
        returns (bytes32)
    {
        bytes32 structHash = keccak256(
            abi.encode(COMMITMENT_TYPEHASH, c.taskId, c.round, c.fragment, c.payloadHash, c.chunkRoot, c.checkpointRoot)
        );
        return keccak256(abi.encodePacked(hex"1901", _domain(verifyingContract, chainId), structHash));
    }

    function _voteDigest(Vote memory v, address verifyingContract, uint256 chainId) internal pure returns (bytes32) {
        bytes32 structHash =
            keccak256(abi.encode(VOTE_TYPEHASH, v.taskId, v.round, v.stateRoot, v.aggregateRoot, v.acceptedMask));
        return keccak256(abi.encodePacked(hex"1901", _domain(verifyingContract, chainId), structHash));
    }

    function _sig(uint256 pk, bytes32 digest) internal pure returns (bytes memory) {
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(pk, digest);
        return abi.encodePacked(r, s, v);
    }

    /// @dev `signer`'s signature of `c` for this market on the current chain.
    function _signC(address signer, Commitment memory c) internal view returns (bytes memory) {
        return _sig(keyOf[signer], _commitmentDigest(c, marketAddr, block.chainid));
    }

    function _signV(address signer, Vote memory v) internal view returns (bytes memory) {
        return _sig(keyOf[signer], _voteDigest(v, marketAddr, block.chainid));
    }

    /// @dev The high-s twin of a signature (same signer under raw ecrecover; refused by the market).
    function _malleate(bytes memory sig) internal pure returns (bytes memory) {
        bytes32 r;
        bytes32 s;
        uint8 v;
        assembly ("memory-safe") {
            r := mload(add(sig, 0x20))
            s := mload(add(sig, 0x40))
            v := byte(0, mload(add(sig, 0x60)))
        }
        return abi.encodePacked(r, bytes32(SECP256K1_N - uint256(s)), v == 27 ? uint8(28) : uint8(27));
    }

    // ------------------------------------------------------------------ specs and tasks

    function _witnessArray() internal view returns (address[] memory ws) {
        ws = new address[](witnesses.length);
        for (uint256 i = 0; i < witnesses.length; ++i) {
            ws[i] = witnesses[i];
        }
    }

    /// @dev A valid spec: 5 trainers (the run starts at the 5th), 2 shards each, 2-of-3 witnesses
    /// bonded `WBOND`, `ROUNDS` rounds, 600 parameters, Verified tier for the robust rules.
    function _spec(AggregationRule rule) internal view returns (TaskSpec memory s) {
        s.specHash = keccak256("court-spec");
        s.specURI = "ipfs://court-spec";
        s.modelHash = keccak256("model");
        s.datasetRoot = keccak256("dataset");
        s.initialStateRoot = _initialStateRoot();
        s.modality = Modality.Language;
        s.tier = rule == AggregationRule.Mean ? Tier.Open : Tier.Verified;
        s.rule = rule;
        s.ruleParam = rule == AggregationRule.TrimmedMean ? TRIM_BPS : (rule == AggregationRule.CenteredClip ? 1 : 0);
        s.shardCount = SHARDS;
        s.innerSteps = INNER_STEPS;
        s.rounds = ROUNDS;
        s.roundDuration = ROUND_DURATION;
        s.graceWindow = GRACE;
        s.challengeWindow = WINDOW;
        s.enrollmentDeadline = uint64(block.timestamp) + ENROLL_PERIOD;
        s.trainerStake = STAKE;
        s.minTrainers = N_TRAINERS;
        s.maxTrainers = N_TRAINERS;
        s.maxMissedRounds = 10;
        s.evictionSlashBps = 2_500;
        s.threshold = THRESHOLD;
        s.witnessFee = FEE;
        s.outerLrPpm = LR_PPM;
        s.outerMomentumPpm = MOM_PPM;
        s.gradientBits = 8;
        s.paramCount = PARAMS;
        s.checkpointInterval = CKPT_INTERVAL;
        s.witnessBond = WBOND;
        s.challengeBond = CBOND;
        s.witnesses = _witnessArray();
    }

    function _feeBudget(TaskSpec memory s) internal pure returns (uint256) {
        return uint256(s.witnessFee) * s.threshold * s.rounds;
    }

    function _post(TaskSpec memory s) internal returns (uint256 taskId) {
        vm.prank(sponsor);
        taskId = market.postTask{value: POOL + _feeBudget(s)}(s);
        tasks.push(taskId);
    }

    function _bondWitnesses(uint256 taskId) internal {
        uint256 bond = market.getSpec(taskId).witnessBond;
        for (uint256 i = 0; i < witnesses.length; ++i) {
            vm.prank(witnesses[i]);
            market.bondWitness{value: bond}(taskId);
        }
    }

    function _enroll(uint256 taskId, address trainer) internal returns (uint16 fragment) {
        uint256 stake = market.getSpec(taskId).trainerStake;
        vm.prank(trainer);
        fragment = market.enroll{value: stake}(taskId);
    }

    /// @dev Posts `s`, bonds every witness and enrolls `maxTrainers` trainers (the run starts).
    function _start(TaskSpec memory s) internal returns (uint256 taskId) {
        taskId = _post(s);
        if (s.witnessBond != 0) _bondWitnesses(taskId);
        for (uint256 i = 0; i < s.maxTrainers; ++i) {
            _enroll(taskId, trainers[i]);
        }
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
            checkpointRoot: keccak256(abi.encode("checkpoints", taskId, round, fragment))
        });
    }

    /// @dev The trainer of `fragment` signs and relays its commitment of `chunkRoot`.
    function _commit(uint256 taskId, uint32 round, uint16 fragment, bytes32 chunkRoot) internal {
        address trainer = market.getTrainers(taskId)[fragment];
        Commitment memory c = _commitment(taskId, round, fragment, chunkRoot);
        bytes memory sig = _signC(trainer, c);
        vm.prank(trainer);
        market.commitSubmission(c, "ipfs://gradient", sig);
    }

    /// @dev Every fragment in `mask` commits its real gradient chunk root for `round`.
    function _commitAll(uint256 taskId, uint32 round, uint256 mask) internal {
        for (uint16 f = 0; f < 64; ++f) {
            if (mask >> f & 1 == 1) _commit(taskId, round, f, _gradRoot(round, f));
        }
    }

    function _vote(uint256 taskId, uint32 round, uint256 witness, bytes32 stateRoot, uint256 mask)
        internal
        returns (Vote memory v)
    {
        v = Vote({
            taskId: taskId,
            round: round,
            stateRoot: stateRoot,
            aggregateRoot: keccak256(abi.encode("aggregate", stateRoot)),
            acceptedMask: mask
        });
        bytes memory sig = _signV(witnesses[witness], v);
        vm.prank(witnesses[witness]);
        market.finalizeRound(v, 1_000_000, sig);
    }

    function _deadline(uint256 taskId) internal view returns (uint256) {
        return uint256(market.getTaskState(taskId).roundOpenedAt) + market.getSpec(taskId).roundDuration;
    }

    function _pastDeadline(uint256 taskId) internal {
        uint256 d = _deadline(taskId) + 1;
        if (block.timestamp < d) vm.warp(d);
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

    function _carry(uint256 taskId, uint32 round) internal {
        uint256 earliest = _deadline(taskId) + market.getSpec(taskId).graceWindow + 1;
        if (block.timestamp < earliest) vm.warp(earliest);
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
        uint256 n = 0;
        for (uint256 f = 0; f < 256; ++f) {
            if (mask >> f & 1 == 1) ++n;
        }
        out = new uint16[](n);
        n = 0;
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

    function _challenge(uint256 id) internal view returns (Challenge memory) {
        return court.getChallenge(id);
    }

    function _assertChallenge(uint256 id, ChallengeKind kind, ChallengeStatus status, uint256 slashed) internal view {
        Challenge memory c = court.getChallenge(id);
        vm.assertEq(uint256(c.kind), uint256(kind), "challenge kind");
        vm.assertEq(uint256(c.status), uint256(status), "challenge status");
        vm.assertEq(c.slashed, slashed, "challenge slashed");
    }

    /// @dev Number of logs the market emitted with `topic0`.
    function _countTopic(CourtVm.Log[] memory logs, bytes32 topic0) internal view returns (uint256 n) {
        for (uint256 i = 0; i < logs.length; ++i) {
            if (logs[i].emitter == marketAddr && logs[i].topics.length > 0 && logs[i].topics[0] == topic0) ++n;
        }
    }

    // ------------------------------------------------------------------ money

    /// @dev The market holds exactly the tasks' obligations plus the pull credits, and each
    /// task's escrow is the sum of its buckets.
    function _assertMoney() internal view {
        uint256 sum = 0;
        for (uint256 i = 0; i < tasks.length; ++i) {
            sum += market.escrowOf(tasks[i]);
        }
        for (uint256 i = 0; i < everyone.length; ++i) {
            sum += market.creditOf(everyone[i]);
        }
        vm.assertEq(marketAddr.balance, sum, "balance == sum(escrowOf) + sum(creditOf)");
    }

    /// @dev Waits out the last challenge window and seals; the task then holds nothing.
    function _seal(uint256 taskId) internal {
        uint256 until = uint256(market.getTaskState(taskId).lastClosedAt) + market.getSpec(taskId).challengeWindow;
        if (block.timestamp < until) vm.warp(until);
        market.seal(taskId);
        vm.assertEq(uint256(market.getTaskState(taskId).status), uint256(TaskStatus.Sealed), "sealed");
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
            vm.assertEq(market.creditOf(a), expected, string.concat("credit of ", vm_label(a)));
        }
    }

    function vm_label(address a) internal view returns (string memory) {
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
}
