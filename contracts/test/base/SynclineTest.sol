// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "./Vm.sol";

import {Vm} from "./Vm.sol";
import {SynclineSigning} from "./SynclineSigning.sol";
import {SynclineMarket} from "../../src/SynclineMarket.sol";
import {ISynclineTaskPosting} from "../../src/ISynclineTaskPosting.sol";
import {ISynclineEvents} from "../../src/ISynclineEvents.sol";
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
    TrainingReceipt,
    Commitment,
    Vote
} from "../../src/SynclineTypes.sol";

/// @title SynclineTest
/// @notice Market test base (no forge-std): a deployed market (with its court module), funded
/// actors with private keys, a default valid `TaskSpec` and helpers that drive a task through its
/// life cycle. Trainers and witnesses sign their commitments and votes (EIP-712, see
/// `SynclineSigning`); the helpers relay them from the signer's own account.
abstract contract SynclineTest is SynclineSigning {
    /// @dev A realistic start time (forge starts at timestamp 1).
    uint256 internal constant T0 = 1_700_000_000;
    uint256 internal constant ACTOR_FUNDS = 1_000_000 ether;

    // Default spec values.
    uint256 internal constant POOL = 10 ether;
    /// @dev Deters at the default pool, any shape and every ppm the tests use: `STAKE * PPM >= 2 * R * 1e6`
    /// with `R <= POOL` (postTask's deterrence rule).
    uint128 internal constant STAKE = 20 ether;
    /// @dev The committee's spot-check rate: every submission (ppm 1e6).
    uint32 internal constant SPOT_CHECK_PPM = 1_000_000;
    uint128 internal constant FEE = 0.01 ether;
    uint16 internal constant SHARDS = 10;
    uint32 internal constant ROUNDS = 3;
    uint32 internal constant INNER_STEPS = 500;
    uint32 internal constant CHECKPOINT_INTERVAL = 50;
    uint64 internal constant PARAM_COUNT = 1_000_000;
    uint64 internal constant ROUND_DURATION = 1 hours;
    uint64 internal constant GRACE = 30 minutes;
    uint64 internal constant CHALLENGE_WINDOW = 1 days;
    /// @dev `SynclineStorage.MIN_CHALLENGE_WINDOW` (internal there: no getter).
    uint64 internal constant MIN_CHALLENGE_WINDOW = 10 minutes;
    uint64 internal constant ENROLL_PERIOD = 1 days;
    uint16 internal constant MIN_TRAINERS = 2;
    uint16 internal constant MAX_TRAINERS = 4;
    uint16 internal constant MAX_MISSED = 1;
    uint16 internal constant SLASH_BPS = 2500;
    uint8 internal constant THRESHOLD = 2;
    uint256 internal constant N_WITNESSES = 3;
    /// @dev Every witness posts this bond before it votes (a spec's `witnessBond` is never 0).
    uint128 internal constant WITNESS_BOND = 0.5 ether;
    uint128 internal constant CHALLENGE_BOND = 0.1 ether;
    uint256 internal constant METRIC = 1_234_567;
    string internal constant URI = "ipfs://bafy-outer-gradient";

    SynclineMarket internal market;
    /// @dev The deployed `SynclineCourt` module (its code; calls to it go through the market).
    address internal courtModule;
    /// @dev The market, addressed through its court functions (served by the module).
    ISynclineCourt internal court;
    address internal sponsor;
    address internal stranger;
    address[] internal witnesses;
    address[] internal trainers;

    function setUp() public virtual {
        warpTo(T0);
        courtModule = _deployCourt();
        vm.label(courtModule, "SynclineCourt");
        market = _deployMarket(courtModule);
        vm.label(address(market), "SynclineMarket");
        court = ISynclineCourt(address(market));
        sponsor = _actor("sponsor");
        stranger = _actor("stranger");
        for (uint256 i = 0; i < N_WITNESSES; ++i) {
            witnesses.push(_actor(string.concat("witness", _itoa(i))));
        }
        for (uint256 i = 0; i < 8; ++i) {
            trainers.push(_actor(string.concat("trainer", _itoa(i))));
        }
    }

    /// @dev The court module the market delegates challenge calls to.
    function _deployCourt() internal returns (address) {
        return vm.deployCode("SynclineCourt.sol:SynclineCourt");
    }

    /// @dev A market (from its artifact, so the test contracts do not embed its creation code).
    function _deployMarket(address module) internal returns (SynclineMarket) {
        return SynclineMarket(payable(vm.deployCode("SynclineMarket.sol:SynclineMarket", abi.encode(module))));
    }

    // ------------------------------------------------------------------ generic helpers

    /// @dev A fresh funded EOA with a private key (see `_keyOf`) and a label.
    function _actor(string memory name) internal virtual returns (address a) {
        a = _keyedActor(string.concat("syncline-actor", name));
        vm.deal(a, ACTOR_FUNDS);
        vm.label(a, name);
    }

    /// @dev The i-th extra trainer beyond the default ones (for large runs).
    function _extraTrainer(uint256 i) internal returns (address) {
        return _actor(string.concat("xtrainer", _itoa(i)));
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

    function _countLogs(Vm.Log[] memory logs, bytes32 topic0) internal view returns (uint256 n) {
        for (uint256 i = 0; i < logs.length; ++i) {
            if (logs[i].emitter == address(market) && logs[i].topics.length > 0 && logs[i].topics[0] == topic0) ++n;
        }
    }

    // ------------------------------------------------------------------ spec fixtures

    function _witnessArray() internal view returns (address[] memory ws) {
        ws = new address[](witnesses.length);
        for (uint256 i = 0; i < witnesses.length; ++i) {
            ws[i] = witnesses[i];
        }
    }

    /// @dev A valid Open/Mean spec: 3 rounds, 2..4 trainers over 10 shards, 2-of-3 witnesses.
    function _defaultSpec() internal view returns (TaskSpec memory s) {
        s.specHash = keccak256("syncline-spec-v1");
        s.specURI = "ipfs://bafy-spec";
        s.modelHash = keccak256("model");
        s.datasetRoot = keccak256("dataset");
        s.initialStateRoot = keccak256("initial-state");
        s.modality = Modality.Language;
        s.tier = Tier.Open;
        s.rule = AggregationRule.Mean;
        s.ruleParam = 0;
        s.shardCount = SHARDS;
        s.innerSteps = INNER_STEPS;
        s.rounds = ROUNDS;
        s.roundDuration = ROUND_DURATION;
        s.graceWindow = GRACE;
        s.challengeWindow = CHALLENGE_WINDOW;
        s.enrollmentDeadline = uint64(block.timestamp) + ENROLL_PERIOD;
        s.trainerStake = STAKE;
        s.minTrainers = MIN_TRAINERS;
        s.maxTrainers = MAX_TRAINERS;
        s.maxMissedRounds = MAX_MISSED;
        s.evictionSlashBps = SLASH_BPS;
        s.threshold = THRESHOLD;
        s.witnessFee = FEE;
        s.outerLrPpm = 700_000;
        s.outerMomentumPpm = 900_000;
        s.gradientBits = 8;
        s.paramCount = PARAM_COUNT;
        s.checkpointInterval = CHECKPOINT_INTERVAL;
        s.witnessBond = WITNESS_BOND;
        s.challengeBond = CHALLENGE_BOND;
        s.spotCheckPpm = SPOT_CHECK_PPM;
        s.witnesses = _witnessArray();
    }

    /// @dev The default spec (its witness bond is `WITNESS_BOND`), named where the bond matters.
    function _bondedSpec() internal view returns (TaskSpec memory s) {
        s = _defaultSpec();
        s.witnessBond = WITNESS_BOND;
    }

    /// @dev `pool` capped (at least 1 wei) so that the spec deters at its ppm (postTask's rule:
    /// `stake * ppm >= 2 * ceil(pool / (rounds * minTrainers)) * 1e6`); fuzzed pools use it.
    function _deterredPool(TaskSpec memory s, uint256 pool) internal pure returns (uint256) {
        uint256 maxPool = uint256(s.rounds) * s.minTrainers * ((uint256(s.trainerStake) * s.spotCheckPpm) / 2_000_000);
        if (maxPool == 0) return 1;
        return pool < maxPool ? pool : maxPool;
    }

    function _feeBudget(TaskSpec memory s) internal pure returns (uint256) {
        return uint256(s.witnessFee) * s.threshold * s.rounds;
    }

    // ------------------------------------------------------------------ life-cycle helpers

    function _post(TaskSpec memory s, uint256 pool) internal returns (uint256 taskId) {
        vm.prank(sponsor);
        taskId = ISynclineTaskPosting(address(market)).postTask{value: pool + _feeBudget(s)}(s);
    }

    function _postDefault() internal returns (uint256) {
        return _post(_defaultSpec(), POOL);
    }

    function _enroll(uint256 taskId, address trainer) internal returns (uint16 fragment) {
        uint256 stake = market.getSpec(taskId).trainerStake;
        vm.prank(trainer);
        fragment = market.enroll{value: stake}(taskId);
    }

    /// @dev Enrolls the first `n` default trainers (extra ones beyond 8).
    function _enrollMany(uint256 taskId, uint256 n) internal {
        for (uint256 i = 0; i < n; ++i) {
            _enroll(taskId, _trainerAt(i));
        }
    }

    function _trainerAt(uint256 i) internal returns (address) {
        return i < trainers.length ? trainers[i] : _extraTrainer(i);
    }

    /// @dev Posts the default task, bonds its witnesses and fills it to maxTrainers, which starts the run.
    function _postAndStart() internal returns (uint256 taskId) {
        taskId = _postDefault();
        _bondAll(taskId);
        _enrollMany(taskId, MAX_TRAINERS);
    }

    function _payload(uint256 taskId, uint32 round, uint16 fragment) internal pure returns (bytes32) {
        return keccak256(abi.encode("payload", taskId, round, fragment));
    }

    function _chunk(uint256 taskId, uint32 round, uint16 fragment) internal pure returns (bytes32) {
        return keccak256(abi.encode("chunks", taskId, round, fragment));
    }

    function _checkpoints(uint256 taskId, uint32 round, uint16 fragment) internal pure returns (bytes32) {
        return keccak256(abi.encode("checkpoints", taskId, round, fragment));
    }

    /// @dev The honest commitment of `fragment` in `round`.
    function _commitment(uint256 taskId, uint32 round, uint16 fragment) internal pure returns (Commitment memory) {
        return Commitment({
            taskId: taskId,
            round: round,
            fragment: fragment,
            payloadHash: _payload(taskId, round, fragment),
            chunkRoot: _chunk(taskId, round, fragment),
            checkpointRoot: _checkpoints(taskId, round, fragment),
            uri: URI
        });
    }

    /// @dev A commitment with the given hashes and a non-zero checkpoint root.
    function _rawCommitment(uint256 taskId, uint32 round, uint16 fragment, bytes32 payloadHash, bytes32 chunkRoot)
        internal
        pure
        returns (Commitment memory)
    {
        return Commitment({
            taskId: taskId,
            round: round,
            fragment: fragment,
            payloadHash: payloadHash,
            chunkRoot: chunkRoot,
            checkpointRoot: keccak256("checkpoints"),
            uri: URI
        });
    }

    /// @dev `signer`'s EIP-712 signature of `c` for this market on the current chain.
    function _signC(address signer, Commitment memory c) internal view returns (bytes memory) {
        return _signCommitment(_keyOf(signer), c, address(market));
    }

    /// @dev `signer`'s EIP-712 signature of `v` for this market on the current chain.
    function _signV(address signer, Vote memory v) internal view returns (bytes memory) {
        return _signVote(_keyOf(signer), v, address(market));
    }

    /// @dev `trainer` signs and sends its honest commitment for `round`.
    function _commit(uint256 taskId, uint32 round, address trainer) internal {
        uint16 fragment = market.getTrainer(taskId, trainer).fragment;
        Commitment memory c = _commitment(taskId, round, fragment);
        bytes memory sig = _signC(trainer, c);
        vm.prank(trainer);
        market.commitSubmission(c, sig);
    }

    /// @dev `trainer` signs `c` and sends it (for commitments that are expected to revert).
    function _commitSigned(address trainer, Commitment memory c) internal {
        bytes memory sig = _signC(trainer, c);
        vm.prank(trainer);
        market.commitSubmission(c, sig);
    }

    /// @dev Every non-evicted trainer commits; returns the committed fragment mask.
    function _commitAll(uint256 taskId, uint32 round) internal returns (uint256 mask) {
        address[] memory ts = market.getTrainers(taskId);
        for (uint256 i = 0; i < ts.length; ++i) {
            TrainerRecord memory r = market.getTrainer(taskId, ts[i]);
            if (r.evicted) continue;
            _commit(taskId, round, ts[i]);
            mask |= uint256(1) << r.fragment;
        }
    }

    function _deadline(uint256 taskId) internal view returns (uint256) {
        return uint256(market.getTaskState(taskId).roundOpenedAt) + market.getSpec(taskId).roundDuration;
    }

    function _warpPastDeadline(uint256 taskId) internal {
        warpTo(_deadline(taskId) + 1);
    }

    /// @dev Past the open round's earliest carry-forward: its deadline plus the grace window, or,
    /// for a round nobody committed to, its one extension (`ROUND_EXTENSION` = 3 round durations).
    function _warpPastGrace(uint256 taskId) internal {
        uint256 earliest = _deadline(taskId) + market.getSpec(taskId).graceWindow;
        uint32 round = market.getTaskState(taskId).currentRound;
        if (market.getRound(taskId, round).committedMask == 0) {
            uint256 extended = _deadline(taskId) + 3 * uint256(market.getSpec(taskId).roundDuration);
            if (extended > earliest) earliest = extended;
        }
        warpTo(earliest + 1);
    }

    function _stateRoot(uint256 taskId, uint32 round) internal pure returns (bytes32) {
        return keccak256(abi.encode("state", taskId, round));
    }

    function _aggRoot(uint256 taskId, uint32 round) internal pure returns (bytes32) {
        return keccak256(abi.encode("aggregate", taskId, round));
    }

    function _result(bytes32 stateRoot, bytes32 aggregateRoot, uint256 acceptedMask) internal pure returns (bytes32) {
        return keccak256(abi.encode(stateRoot, aggregateRoot, acceptedMask));
    }

    /// @dev Storage slots of `SynclineStorage` (ReentrancyGuard `_status` 0, EIP712's two fallback
    /// strings 1-2, then `_taskCount` 3, `_specs` 4, `_tasks` 5, ..., `_rounds` 11), read with
    /// `vm.load` so that vote helpers make no call (a call would consume a pending `expectRevert`
    /// or `prank`). `test_prevRoot_matchesViews` keeps them honest.
    uint256 internal constant TASKS_SLOT = 5;
    uint256 internal constant ROUNDS_SLOT = 11;

    /// @dev The state root a vote on `round` builds on: the finalized round's previous root, else
    /// the task's current root (what an honest witness reads when it votes).
    function _prevRoot(uint256 taskId, uint32 round) internal view returns (bytes32) {
        bytes32 task = keccak256(abi.encode(taskId, TASKS_SLOT));
        bytes32 rr = keccak256(abi.encode(round, keccak256(abi.encode(taskId, ROUNDS_SLOT))));
        // RoundRecord: status is the lowest byte of its first slot, prevStateRoot its 8th slot.
        bool finalized = uint8(uint256(vm.load(address(market), rr))) == uint8(RoundStatus.Finalized);
        if (finalized) return vm.load(address(market), bytes32(uint256(rr) + 7));
        // TaskState: stateRoot is its 3rd slot.
        return vm.load(address(market), bytes32(uint256(task) + 2));
    }

    /// @dev A vote (metric `METRIC`) built on the round's previous root (`_prevRoot`).
    function _voteMsg(uint256 taskId, uint32 round, bytes32 stateRoot, bytes32 agg, uint256 mask)
        internal
        view
        returns (Vote memory)
    {
        return Vote({
            taskId: taskId,
            round: round,
            prevStateRoot: _prevRoot(taskId, round),
            stateRoot: stateRoot,
            aggregateRoot: agg,
            acceptedMask: mask,
            metric: METRIC
        });
    }

    /// @dev `witness` signs and sends a vote (metric `METRIC`).
    function _vote(uint256 taskId, uint32 round, address witness, bytes32 stateRoot, bytes32 agg, uint256 mask)
        internal
    {
        _voteWithMetric(_voteMsg(taskId, round, stateRoot, agg, mask), witness, METRIC);
    }

    /// @dev `witness` signs `v` with `metric` and sends it.
    function _voteWithMetric(Vote memory v, address witness, uint256 metric) internal {
        v.metric = metric;
        bytes memory sig = _signV(witness, v);
        vm.prank(witness);
        market.finalizeRound(v, sig);
    }

    /// @dev `witness` posts the task's witness bond.
    function _bond(uint256 taskId, address witness) internal {
        uint256 amount = market.getSpec(taskId).witnessBond;
        vm.prank(witness);
        market.bondWitness{value: amount}(taskId);
    }

    /// @dev Every witness of the task posts its bond.
    function _bondAll(uint256 taskId) internal {
        address[] memory ws = market.getSpec(taskId).witnesses;
        for (uint256 i = 0; i < ws.length; ++i) {
            _bond(taskId, ws[i]);
        }
    }

    /// @dev The first `threshold` witnesses vote the honest result with `mask` accepted.
    function _finalize(uint256 taskId, uint32 round, uint256 mask) internal {
        uint8 k = market.getSpec(taskId).threshold;
        for (uint256 i = 0; i < k; ++i) {
            _vote(taskId, round, witnesses[i], _stateRoot(taskId, round), _aggRoot(taskId, round), mask);
        }
    }

    /// @dev The first `threshold - 1` witnesses vote the honest result (no quorum yet).
    function _prepareQuorum(uint256 taskId, uint32 round, uint256 mask) internal {
        uint8 k = market.getSpec(taskId).threshold;
        for (uint256 i = 0; i + 1 < k; ++i) {
            _vote(taskId, round, witnesses[i], _stateRoot(taskId, round), _aggRoot(taskId, round), mask);
        }
    }

    /// @dev The `threshold`-th witness casts the vote that completes the quorum (use after `_prepareQuorum`).
    function _closeQuorum(uint256 taskId, uint32 round, uint256 mask) internal {
        uint8 k = market.getSpec(taskId).threshold;
        _vote(taskId, round, witnesses[k - 1], _stateRoot(taskId, round), _aggRoot(taskId, round), mask);
    }

    /// @dev All active trainers commit, the deadline passes, the round finalizes accepting everything.
    function _runRound(uint256 taskId, uint32 round) internal returns (uint256 mask) {
        mask = _commitAll(taskId, round);
        _warpPastDeadline(taskId);
        _finalize(taskId, round, mask);
    }

    function _runAllRounds(uint256 taskId) internal {
        uint32 rounds = market.getSpec(taskId).rounds;
        for (uint32 r = 0; r < rounds; ++r) {
            _runRound(taskId, r);
        }
    }

    function _sealTime(uint256 taskId) internal view returns (uint256) {
        return uint256(market.getTaskState(taskId).lastClosedAt) + market.getSpec(taskId).challengeWindow;
    }

    /// @dev To the earliest seal: the last round's filing window passed in time and in blocks
    /// (`MIN_CHALLENGE_BLOCKS` = 50 after the block it closed in).
    function _warpToSeal(uint256 taskId) internal {
        uint256 until = _sealTime(taskId);
        if (block.timestamp < until) warpTo(until);
        uint256 sealBlock = uint256(market.getTaskState(taskId).lastClosedBlock) + 50;
        if (block.number < sealBlock) vm.roll(sealBlock);
    }

    function _warpAndSeal(uint256 taskId) internal {
        _warpToSeal(taskId);
        market.seal(taskId);
    }

    /// @dev The task's `TrainingReceipt` (served by the court module through the market's fallback).
    function _receipt(uint256 taskId) internal view returns (TrainingReceipt memory) {
        return court.getReceipt(taskId);
    }

    function _status(uint256 taskId) internal view returns (TaskStatus) {
        return market.getTaskState(taskId).status;
    }

    function _assertStatus(uint256 taskId, TaskStatus expected, string memory what) internal view {
        vm.assertEq(uint256(_status(taskId)), uint256(expected), what);
    }

    function _assertRoundStatus(uint256 taskId, uint32 round, RoundStatus expected, string memory what) internal view {
        vm.assertEq(uint256(market.getRound(taskId, round).status), uint256(expected), what);
    }

    /// @dev Shard masks of the non-evicted trainers are pairwise disjoint, non-empty, cover exactly
    /// [0, shardCount) and differ in size by at most one; evicted trainers hold none.
    function _assertShardPartition(uint256 taskId) internal view {
        uint256 shardCount = market.getSpec(taskId).shardCount;
        address[] memory ts = market.getTrainers(taskId);
        uint256 union;
        uint256 minSize = type(uint256).max;
        uint256 maxSize;
        for (uint256 i = 0; i < ts.length; ++i) {
            TrainerRecord memory r = market.getTrainer(taskId, ts[i]);
            if (r.evicted) {
                vm.assertEq(r.shardMask, 0, "evicted trainer holds shards");
                continue;
            }
            vm.assertEq(union & r.shardMask, 0, "shard masks overlap");
            union |= r.shardMask;
            uint256 size = _popcount(r.shardMask);
            vm.assertGt(size, 0, "active trainer without shards");
            if (size < minSize) minSize = size;
            if (size > maxSize) maxSize = size;
        }
        vm.assertEq(union, _fullMask(shardCount), "shard masks do not cover exactly shardCount shards");
        vm.assertLe(maxSize - minSize, 1, "shard sizes differ by more than one");
    }

    /// @dev Fails unless the market holds exactly the task escrows plus the credits of `accounts`.
    function _assertMoneyInvariant(uint256[] memory taskIds, address[] memory accounts) internal view {
        uint256 sum;
        for (uint256 i = 0; i < taskIds.length; ++i) {
            sum += market.escrowOf(taskIds[i]);
        }
        for (uint256 i = 0; i < accounts.length; ++i) {
            sum += market.creditOf(accounts[i]);
        }
        vm.assertEq(address(market).balance, sum, "market balance != escrows + credits");
    }

    function _allActors() internal view returns (address[] memory a) {
        a = new address[](2 + witnesses.length + trainers.length);
        a[0] = sponsor;
        a[1] = stranger;
        for (uint256 i = 0; i < witnesses.length; ++i) {
            a[2 + i] = witnesses[i];
        }
        for (uint256 i = 0; i < trainers.length; ++i) {
            a[2 + witnesses.length + i] = trainers[i];
        }
    }

    function _one(uint256 x) internal pure returns (uint256[] memory a) {
        a = new uint256[](1);
        a[0] = x;
    }

    function _two(uint256 x, uint256 y) internal pure returns (uint256[] memory a) {
        a = new uint256[](2);
        a[0] = x;
        a[1] = y;
    }
}
