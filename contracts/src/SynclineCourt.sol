// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ISynclineCourt} from "./ISynclineCourt.sol";
import {SynclineStorage} from "./SynclineStorage.sol";
import {
    TaskSpec,
    TaskState,
    TaskStatus,
    TrainerRecord,
    WitnessRecord,
    Submission,
    RoundRecord,
    RoundStatus,
    AggregationRule,
    Commitment,
    Vote,
    Challenge,
    ChallengeKind,
    ChallengeStatus,
    AggregationProof,
    TrainingReceipt,
    TrainerReceipt,
    WitnessReceipt
} from "./SynclineTypes.sol";
import {ChunkAggregation} from "./libraries/ChunkAggregation.sol";
import {ChunkMerkle} from "./libraries/ChunkMerkle.sol";
import {ShardAssignment} from "./libraries/ShardAssignment.sol";
import {TierPolicy} from "./libraries/TierPolicy.sol";

/// @title SynclineCourt
/// @notice Fraud proofs for the Syncline market, run by delegatecall on the market's storage
/// (see `ISynclineCourt` for the rules). Equivocation and aggregation proofs are checked entirely
/// on chain in one transaction; a censorship claim waits out a defence period; a training-fraud
/// claim is refereed by the witness committee re-executing one inner-loop segment (k-of-N).
/// @dev No external calls: money only moves between the task's obligations and pull credits, so
/// the market's money invariant holds through every path here.
contract SynclineCourt is ISynclineCourt, SynclineStorage {
    /// @dev This module's own address: direct calls (not delegated by the market) are refused.
    address private immutable SELF = address(this);

    /// @dev `which` values of `SynclineBadMerkleProof` for the two state openings.
    uint256 private constant PREV_STATE = type(uint256).max - 1;
    uint256 private constant CLAIMED_STATE = type(uint256).max;

    modifier onlyDelegated() {
        if (address(this) == SELF) revert SynclineCourtDirectCall();
        _;
    }

    // ------------------------------------------------------------------ equivocation

    /// @inheritdoc ISynclineCourt
    function proveTrainerEquivocation(
        Commitment calldata a,
        bytes calldata sigA,
        Commitment calldata b,
        bytes calldata sigB
    ) external payable onlyDelegated returns (uint256 challengeId) {
        if (a.taskId != b.taskId || a.round != b.round || a.fragment != b.fragment) {
            revert SynclineNotEquivocation();
        }
        bytes32 digestA = _commitmentDigest(a);
        bytes32 digestB = _commitmentDigest(b);
        if (digestA == digestB) revert SynclineNotEquivocation();
        uint256 taskId = a.taskId;
        (TaskState storage t,) = _requireChallengeable(taskId, a.round, false);
        if (a.fragment >= t.enrolled) revert SynclineNotEquivocation();
        address trainer = _trainersByFragment[taskId][a.fragment];
        address signerA = _recover(digestA, sigA);
        if (signerA != trainer) revert SynclineWrongSigner(signerA, trainer);
        address signerB = _recover(digestB, sigB);
        if (signerB != trainer) revert SynclineWrongSigner(signerB, trainer);
        if (_trainerRecords[taskId][trainer].stake == 0) revert SynclineNothingToSlash(taskId, trainer);

        challengeId = _open(
            ChallengeKind.TrainerEquivocation,
            taskId,
            a.round,
            a.fragment,
            0,
            trainer,
            keccak256(abi.encode(ChallengeKind.TrainerEquivocation, taskId, a.round, a.fragment))
        );
        _uphold(challengeId, _convictTrainer(taskId, a.round, a.fragment, trainer));
    }

    /// @inheritdoc ISynclineCourt
    function proveWitnessEquivocation(Vote calldata a, bytes calldata sigA, Vote calldata b, bytes calldata sigB)
        external
        payable
        onlyDelegated
        returns (uint256 challengeId)
    {
        if (a.taskId != b.taskId || a.round != b.round || a.prevStateRoot != b.prevStateRoot) {
            revert SynclineNotEquivocation();
        }
        bytes32 digestA = _voteDigest(a);
        bytes32 digestB = _voteDigest(b);
        if (digestA == digestB) revert SynclineNotEquivocation();
        uint256 taskId = a.taskId;
        _requireChallengeable(taskId, a.round, false);
        address witness = _recover(digestA, sigA);
        if (!_isWitness[taskId][witness]) revert SynclineNotWitness(taskId, witness);
        address signerB = _recover(digestB, sigB);
        if (signerB != witness) revert SynclineWrongSigner(signerB, witness);
        if (_witnessRecords[taskId][witness].bond == 0) revert SynclineNothingToSlash(taskId, witness);

        challengeId = _open(
            ChallengeKind.WitnessEquivocation,
            taskId,
            a.round,
            0,
            0,
            witness,
            keccak256(abi.encode(ChallengeKind.WitnessEquivocation, taskId, a.round, witness))
        );
        _uphold(challengeId, _slashWitness(taskId, witness));
    }

    // ------------------------------------------------------------------ aggregation fraud

    /// @inheritdoc ISynclineCourt
    function proveAggregationFraud(AggregationProof calldata proof)
        external
        payable
        onlyDelegated
        returns (uint256 challengeId)
    {
        uint256 taskId = proof.taskId;
        uint32 round = proof.round;
        (, RoundRecord storage rr) = _requireChallengeable(taskId, round, true);
        TaskSpec storage spec = _specs[taskId];
        if (
            spec.rule != AggregationRule.Mean && spec.rule != AggregationRule.TrimmedMean
                && spec.rule != AggregationRule.CoordinateMedian
        ) revert SynclineRuleNotChunkProvable(spec.rule);
        if (!_recomputationDiffers(proof, rr, spec)) {
            revert SynclineAggregationCorrect(taskId, round, proof.chunkIndex);
        }

        challengeId = _open(
            ChallengeKind.AggregationFraud,
            taskId,
            round,
            0,
            proof.chunkIndex,
            address(0),
            keccak256(abi.encode(ChallengeKind.AggregationFraud, taskId, round))
        );
        _uphold(challengeId, _convictRound(taskId, round, rr.result));
    }

    /// @dev Verifies every opening, then recomputes coordinates `[lo, hi)` of the chunk and
    /// compares them with the finalized state. An accepted input chunk that is malformed is a
    /// fault by itself (honest witnesses reject such a submission): a wrong length or header
    /// anywhere, an out-of-range value (`-qmax - 1`) inside the window. Only the window's values
    /// are scanned (a 256-value scan costs ~60k gas per input); a challenger who found such a
    /// value opens a window that holds it.
    function _recomputationDiffers(AggregationProof calldata p, RoundRecord storage rr, TaskSpec storage spec)
        private
        view
        returns (bool)
    {
        (uint256 chunkCount, uint256 count) = _chunkShape(spec.paramCount, p.chunkIndex);
        uint256 n = p.inputChunks.length;
        uint256 mask = rr.acceptedMask;
        if (mask == 0) {
            // No accepted input: the honest result is the previous state unchanged (the
            // protocol's `compute_round`), so any other state root is the fault; nothing to open.
            if (n != 0 || p.inputProofs.length != 0) revert SynclineBadOpening(p.taskId, p.round, p.chunkIndex);
            return rr.stateRoot != rr.prevStateRoot;
        }
        if (count == 0 || p.lo >= p.hi || p.hi > count || n != ShardAssignment.count(mask) || p.inputProofs.length != n)
        {
            revert SynclineBadOpening(p.taskId, p.round, p.chunkIndex);
        }

        if (!ChunkMerkle.verify(rr.prevStateRoot, p.chunkIndex, chunkCount, keccak256(p.prevChunk), p.prevProof)) {
            revert SynclineBadMerkleProof(PREV_STATE, rr.prevStateRoot);
        }
        if (!ChunkMerkle.verify(rr.stateRoot, p.chunkIndex, chunkCount, keccak256(p.claimedChunk), p.claimedProof)) {
            revert SynclineBadMerkleProof(CLAIMED_STATE, rr.stateRoot);
        }
        if (p.prevChunk.length != 16 * count) revert SynclineBadOpening(p.taskId, p.round, p.chunkIndex);
        // A finalized state chunk that is not `16 * count` bytes is no honest result by itself.
        if (p.claimedChunk.length != 16 * count) return true;

        bytes[] memory window = new bytes[](n);
        uint256 width = spec.gradientBits / 8;
        for (uint256 i = 0; i < n; ++i) {
            uint16 fragment = _lowestBit(mask);
            mask &= mask - 1;
            bytes32 root = _submissions[p.taskId][p.round][fragment].chunkRoot;
            bytes calldata chunk = p.inputChunks[i];
            if (!ChunkMerkle.verify(root, p.chunkIndex, chunkCount, keccak256(chunk), p.inputProofs[i])) {
                revert SynclineBadMerkleProof(i, root);
            }
            if (chunk.length != 2 + count * width) return true;
            bytes memory values = bytes.concat(chunk[0:2], chunk[2 + p.lo * width:2 + p.hi * width]);
            if (!ChunkAggregation.isWellFormedGradientChunk(values, spec.gradientBits, p.hi - p.lo)) return true;
            window[i] = values;
        }
        bytes memory recomputed = ChunkAggregation.recomputeStateChunk(
            window,
            spec.gradientBits,
            uint8(spec.rule),
            spec.rule == AggregationRule.TrimmedMean ? spec.ruleParam : 0,
            _stateWindow(p.prevChunk, count, p.lo, p.hi),
            spec.outerLrPpm,
            spec.outerMomentumPpm
        );
        return keccak256(recomputed) != keccak256(_stateWindow(p.claimedChunk, count, p.lo, p.hi));
    }

    /// @dev Coordinates `[lo, hi)` of a state chunk of `count` coordinates: weights then momentum.
    function _stateWindow(bytes calldata chunk, uint256 count, uint256 lo, uint256 hi)
        private
        pure
        returns (bytes memory)
    {
        return bytes.concat(chunk[8 * lo:8 * hi], chunk[8 * (count + lo):8 * (count + hi)]);
    }

    /// @dev Number of chunks of a `paramCount`-parameter state, and the coordinates in chunk
    /// `index` (0 if the index is out of range).
    function _chunkShape(uint64 paramCount, uint32 index) private pure returns (uint256 chunkCount, uint256 count) {
        chunkCount = (uint256(paramCount) + ChunkAggregation.CHUNK_SIZE - 1) / ChunkAggregation.CHUNK_SIZE;
        if (index >= chunkCount) return (chunkCount, 0);
        uint256 rest = uint256(paramCount) - uint256(index) * ChunkAggregation.CHUNK_SIZE;
        count = rest < ChunkAggregation.CHUNK_SIZE ? rest : ChunkAggregation.CHUNK_SIZE;
    }

    // ------------------------------------------------------------------ censorship

    /// @inheritdoc ISynclineCourt
    function challengeCensorship(uint256 taskId, uint32 round, uint16 fragment)
        external
        payable
        onlyDelegated
        returns (uint256 challengeId)
    {
        (, RoundRecord storage rr) = _requireChallengeable(taskId, round, true);
        // Krum and Multi-Krum exclude valid inputs by design (whole-vector distances the chain
        // cannot check), so an exclusion under them is no provable censorship.
        AggregationRule rule = _specs[taskId].rule;
        if (rule == AggregationRule.Krum || rule == AggregationRule.MultiKrum) {
            revert SynclineRuleNotChunkProvable(rule);
        }
        uint256 bit = uint256(1) << fragment;
        if (rr.committedMask & bit == 0 || rr.acceptedMask & bit != 0) {
            revert SynclineNotCensored(taskId, round, fragment);
        }
        challengeId = _open(
            ChallengeKind.Censorship,
            taskId,
            round,
            fragment,
            0,
            address(0),
            keccak256(abi.encode(ChallengeKind.Censorship, taskId, round, fragment))
        );
    }

    /// @inheritdoc ISynclineCourt
    function answerCensorship(uint256 challengeId, uint32 chunkIndex, bytes calldata chunk, bytes32[] calldata proof)
        external
        onlyDelegated
    {
        Challenge storage c = _requireOpen(challengeId, ChallengeKind.Censorship);
        if (block.timestamp > c.deadline) revert SynclineChallengeDeadline(challengeId, c.deadline);
        TaskSpec storage spec = _specs[c.taskId];
        (uint256 chunkCount, uint256 count) = _chunkShape(spec.paramCount, chunkIndex);
        if (count == 0) revert SynclineBadOpening(c.taskId, c.round, chunkIndex);
        bytes32 root = _submissions[c.taskId][c.round][c.fragment].chunkRoot;
        if (!ChunkMerkle.verify(root, chunkIndex, chunkCount, keccak256(chunk), proof)) {
            revert SynclineBadMerkleProof(0, root);
        }
        if (ChunkAggregation.isWellFormedGradientChunk(chunk, spec.gradientBits, count)) {
            revert SynclineChunkWellFormed(challengeId, chunkIndex);
        }
        _reject(challengeId, c);
        _credit(c.taskId, msg.sender, c.bond, REASON_FORFEIT);
    }

    /// @inheritdoc ISynclineCourt
    function resolveCensorship(uint256 challengeId) external onlyDelegated {
        Challenge storage c = _requireOpen(challengeId, ChallengeKind.Censorship);
        if (block.timestamp <= c.deadline) revert SynclineChallengeDeadline(challengeId, c.deadline);
        RoundRecord storage rr = _rounds[c.taskId][c.round];
        if (rr.status != RoundStatus.Finalized) {
            // Another proof already voided the round: nothing left to uphold, the bond goes back.
            _expire(challengeId, c);
            return;
        }
        _uphold(challengeId, _convictRound(c.taskId, c.round, rr.result));
    }

    // ------------------------------------------------------------------ training fraud

    /// @inheritdoc ISynclineCourt
    function challengeTraining(uint256 taskId, uint32 round, uint16 fragment, uint32 segment)
        external
        payable
        onlyDelegated
        returns (uint256 challengeId)
    {
        (, RoundRecord storage rr) = _requireChallengeable(taskId, round, true);
        uint256 bit = uint256(1) << fragment;
        if (rr.acceptedMask & bit == 0 || rr.revokedMask & bit != 0) {
            revert SynclineNotAccepted(taskId, round, fragment);
        }
        TaskSpec storage spec = _specs[taskId];
        uint32 segments = (spec.innerSteps + spec.checkpointInterval - 1) / spec.checkpointInterval;
        if (segment > segments) revert SynclineBadSegment(segment, segments);
        challengeId = _open(
            ChallengeKind.TrainingFraud,
            taskId,
            round,
            fragment,
            segment,
            _submissions[taskId][round][fragment].trainer,
            keccak256(abi.encode(ChallengeKind.TrainingFraud, taskId, round, fragment, segment))
        );
    }

    /// @inheritdoc ISynclineCourt
    function refereeVote(uint256 challengeId, bool guilty) external onlyDelegated {
        Challenge storage c = _requireOpen(challengeId, ChallengeKind.TrainingFraud);
        if (block.timestamp > c.deadline) revert SynclineChallengeDeadline(challengeId, c.deadline);
        uint256 taskId = c.taskId;
        if (!_isWitness[taskId][msg.sender]) revert SynclineNotWitness(taskId, msg.sender);
        if (_specs[taskId].witnessBond != 0 && _witnessRecords[taskId][msg.sender].bond == 0) {
            revert SynclineWitnessUnbonded(taskId, msg.sender);
        }
        if (_refereeVerdicts[challengeId][msg.sender] != RefereeVerdict.None) {
            revert SynclineAlreadyRefereed(challengeId, msg.sender);
        }
        _refereeVerdicts[challengeId][msg.sender] = guilty ? RefereeVerdict.Guilty : RefereeVerdict.Innocent;
        emit RefereeVoted(challengeId, msg.sender, guilty);

        TaskSpec storage spec = _specs[taskId];
        if (guilty) {
            if (++c.guiltyVotes < spec.threshold) return;
            _uphold(challengeId, _convictTrainer(taskId, c.round, c.fragment, c.accused));
        } else {
            uint256 innocent = ++c.innocentVotes;
            if (innocent <= spec.witnesses.length - spec.threshold) return;
            // Guilty can no longer reach the threshold: the bond pays the referees' re-execution,
            // split between those that voted innocent (the dust goes to the reward pool).
            _reject(challengeId, c);
            uint256 share = c.bond / innocent;
            address[] storage referees = spec.witnesses;
            for (uint256 i = 0; i < referees.length; ++i) {
                if (_refereeVerdicts[challengeId][referees[i]] == RefereeVerdict.Innocent) {
                    _credit(taskId, referees[i], share, REASON_FORFEIT);
                }
            }
            _tasks[taskId].rewardPool += c.bond - share * innocent;
        }
    }

    /// @inheritdoc ISynclineCourt
    function expireChallenge(uint256 challengeId) external onlyDelegated {
        Challenge storage c = _requireOpen(challengeId, ChallengeKind.TrainingFraud);
        if (block.timestamp <= c.deadline) revert SynclineChallengeDeadline(challengeId, c.deadline);
        _expire(challengeId, c);
    }

    // ------------------------------------------------------------------ views

    /// @inheritdoc ISynclineCourt
    function getChallenge(uint256 challengeId) external view returns (Challenge memory) {
        if (challengeId == 0 || challengeId > _challengeCount) revert SynclineUnknownChallenge(challengeId);
        return _challenges[challengeId];
    }

    /// @inheritdoc ISynclineCourt
    function getReceipt(uint256 taskId) external view returns (TrainingReceipt memory receipt) {
        TaskState storage t = _requireTask(taskId);
        TaskSpec storage spec = _specs[taskId];
        receipt.taskId = taskId;
        receipt.specHash = spec.specHash;
        receipt.status = t.status;
        receipt.finalStateRoot = t.stateRoot;
        receipt.roundsTotal = spec.rounds;
        receipt.roundsFinalized = t.roundsFinalized;
        receipt.roundsCarried = t.roundsCarried;
        receipt.roundsInvalidated = t.roundsInvalidated;
        receipt.rewardPool = t.status == TaskStatus.Sealed ? t.sealedPool : t.rewardPool;
        receipt.sponsorRefund = t.sponsorRefund;

        bool settled = t.status == TaskStatus.Sealed || t.status == TaskStatus.Cancelled;
        address[] storage trainers = _trainersByFragment[taskId];
        receipt.trainers = new TrainerReceipt[](trainers.length);
        for (uint256 i = 0; i < trainers.length; ++i) {
            TrainerRecord storage r = _trainerRecords[taskId][trainers[i]];
            receipt.trainers[i] = TrainerReceipt({
                trainer: trainers[i],
                fragment: r.fragment,
                evicted: r.evicted,
                submitted: r.submitted,
                accepted: r.accepted,
                missed: r.missed,
                acceptedWeight: r.acceptedWeight,
                reward: r.reward,
                stakeRefund: settled ? uint256(spec.trainerStake) - r.slashed : 0,
                slashed: r.slashed
            });
        }
        address[] storage witnesses = spec.witnesses;
        receipt.witnesses = new WitnessReceipt[](witnesses.length);
        for (uint256 i = 0; i < witnesses.length; ++i) {
            WitnessRecord storage w = _witnessRecords[taskId][witnesses[i]];
            receipt.witnesses[i] = WitnessReceipt({
                witness: witnesses[i],
                votes: w.votes,
                matched: w.matched,
                dissents: w.dissents,
                fees: w.fees,
                bond: w.bonded ? spec.witnessBond : 0,
                slashed: w.slashed
            });
        }
    }

    /// @inheritdoc ISynclineCourt
    function challengeCount() external view returns (uint256) {
        return _challengeCount;
    }

    // ------------------------------------------------------------------ checks

    /// @dev A challenge is heard while the run is running or waiting to seal, and until
    /// `challengeWindow` after the challenged round closed; an open round (equivocation only,
    /// `mustBeFinalized` false) can be challenged while it is open.
    function _requireChallengeable(uint256 taskId, uint32 round, bool mustBeFinalized)
        private
        view
        returns (TaskState storage t, RoundRecord storage rr)
    {
        t = _requireTask(taskId);
        if (t.status != TaskStatus.Running && t.status != TaskStatus.AwaitingSeal) {
            revert SynclineWrongTaskStatus(taskId, t.status, TaskStatus.Running);
        }
        rr = _rounds[taskId][round];
        if (mustBeFinalized && rr.status != RoundStatus.Finalized) revert SynclineRoundNotFinalized(taskId, round);
        if (rr.closedAt == 0) {
            bool current = t.status == TaskStatus.Running && round == t.currentRound;
            if (!current) revert SynclineRoundNotFinalized(taskId, round);
            return (t, rr);
        }
        uint64 until = rr.closedAt + _specs[taskId].challengeWindow;
        if (block.timestamp > until) revert SynclineChallengeWindowClosed(taskId, round, until);
    }

    function _requireOpen(uint256 challengeId, ChallengeKind kind) private view returns (Challenge storage c) {
        if (challengeId == 0 || challengeId > _challengeCount) revert SynclineUnknownChallenge(challengeId);
        c = _challenges[challengeId];
        if (c.kind != kind) revert SynclineWrongChallengeKind(challengeId, c.kind);
        if (c.status != ChallengeStatus.Open) revert SynclineChallengeNotOpen(challengeId, c.status);
    }

    // ------------------------------------------------------------------ challenge life cycle

    /// @dev Takes the bond, claims the fault key and records an open challenge. Synchronous
    /// proofs resolve it in the same transaction.
    function _open(
        ChallengeKind kind,
        uint256 taskId,
        uint32 round,
        uint16 fragment,
        uint32 segment,
        address accused,
        bytes32 faultKey
    ) private returns (uint256 challengeId) {
        uint256 required = _specs[taskId].challengeBond;
        if (msg.value != required) revert SynclineWrongBond(msg.value, required);
        uint256 claimed = _faults[faultKey];
        if (claimed != 0) revert SynclineDuplicateChallenge(faultKey, claimed);

        challengeId = ++_challengeCount;
        _faults[faultKey] = challengeId;
        uint64 deadline = uint64(block.timestamp) + _specs[taskId].challengeWindow;
        Challenge storage c = _challenges[challengeId];
        c.kind = kind;
        c.status = ChallengeStatus.Open;
        c.fragment = fragment;
        c.round = round;
        c.segment = segment;
        c.openedAt = uint64(block.timestamp);
        c.deadline = deadline;
        c.challenger = msg.sender;
        c.accused = accused;
        c.taskId = taskId;
        c.bond = msg.value;
        TaskState storage t = _tasks[taskId];
        t.bondsHeld += msg.value;
        if (_isAsynchronous(kind)) t.openChallenges += 1;
        emit ChallengeOpened(challengeId, taskId, round, kind, msg.sender, accused, fragment, segment, deadline);
    }

    /// @dev The kinds decided in a later transaction (a defence or referee period): while open
    /// they count in `openChallenges`, which holds back the seal.
    function _isAsynchronous(ChallengeKind kind) private pure returns (bool) {
        return kind == ChallengeKind.Censorship || kind == ChallengeKind.TrainingFraud;
    }

    /// @dev Every way out of `Open` goes through here: records `status`, takes the bond out of
    /// the task's obligations (the caller credits it) and closes the `openChallenges` count.
    function _close(Challenge storage c, ChallengeStatus status) private returns (TaskState storage t) {
        c.status = status;
        t = _tasks[c.taskId];
        t.bondsHeld -= c.bond;
        if (_isAsynchronous(c.kind)) t.openChallenges -= 1;
    }

    /// @dev Upheld: the challenger gets its bond back plus its share of what was slashed (the
    /// slash is already in the reward pool).
    function _uphold(uint256 challengeId, uint256 slashed) private {
        Challenge storage c = _challenges[challengeId];
        TaskState storage t = _close(c, ChallengeStatus.Upheld);
        uint256 bounty = (slashed * CHALLENGER_SHARE_BPS) / TierPolicy.BPS;
        c.slashed = slashed;
        t.rewardPool -= bounty;
        _credit(c.taskId, c.challenger, c.bond, REASON_BOND);
        _credit(c.taskId, c.challenger, bounty, REASON_BOUNTY);
        emit ChallengeResolved(challengeId, c.taskId, ChallengeStatus.Upheld, slashed, bounty);
    }

    /// @dev Rejected: the caller pays the forfeited bond out.
    function _reject(uint256 challengeId, Challenge storage c) private {
        _close(c, ChallengeStatus.Rejected);
        emit ChallengeResolved(challengeId, c.taskId, ChallengeStatus.Rejected, 0, 0);
    }

    /// @dev Expired (nobody decided in time, or the round was voided by another proof): bond back.
    function _expire(uint256 challengeId, Challenge storage c) private {
        _close(c, ChallengeStatus.Expired);
        _credit(c.taskId, c.challenger, c.bond, REASON_BOND);
        emit ChallengeResolved(challengeId, c.taskId, ChallengeStatus.Expired, 0, 0);
    }

    // ------------------------------------------------------------------ consequences

    /// @dev A proven trainer fault: slashes the trainer's whole remaining stake, evicts it
    /// (rebalancing shards while the run is running) and revokes its reward for `round`.
    function _convictTrainer(uint256 taskId, uint32 round, uint16 fragment, address trainer)
        private
        returns (uint256 slashed)
    {
        TrainerRecord storage r = _trainerRecords[taskId][trainer];
        slashed = _slash(taskId, trainer, r.stake);
        if (!r.evicted) {
            _markEvicted(taskId, trainer, round);
            TaskState storage t = _tasks[taskId];
            if (t.status == TaskStatus.Running && t.active > 0) _assignShards(taskId, _specs[taskId].shardCount);
        }
        _revokeReward(taskId, round, fragment);
    }

    /// @dev Takes back an accepted submission's weight (its share of the pool at seal).
    function _revokeReward(uint256 taskId, uint32 round, uint16 fragment) private {
        RoundRecord storage rr = _rounds[taskId][round];
        uint256 bit = uint256(1) << fragment;
        if (rr.status != RoundStatus.Finalized || rr.acceptedMask & bit == 0 || rr.revokedMask & bit != 0) return;
        rr.revokedMask |= bit;
        Submission storage s = _submissions[taskId][round][fragment];
        TrainerRecord storage r = _trainerRecords[taskId][s.trainer];
        r.accepted -= 1;
        r.acceptedWeight -= s.weight;
        _tasks[taskId].totalWeight -= s.weight;
        emit RewardRevoked(taskId, round, s.trainer, s.weight);
    }

    /// @dev A proven round fault (its finalized `result` is wrong): slashes the bond of every
    /// witness that voted for it, then voids the round onwards (`_invalidateFrom`).
    function _convictRound(uint256 taskId, uint32 round, bytes32 result) private returns (uint256 slashed) {
        address[] storage witnesses = _specs[taskId].witnesses;
        for (uint256 i = 0; i < witnesses.length; ++i) {
            if (_votes[taskId][round][witnesses[i]] == result) slashed += _slashWitness(taskId, witnesses[i]);
        }
        _invalidateFrom(taskId, round);
    }

    /// @dev Voids `round` and every round finalized after it (their rewards and witness fees are
    /// reversed) and rolls the task's state root back to `round`'s previous state root. A running
    /// run carries on from that root; a completed one seals with it.
    function _invalidateFrom(uint256 taskId, uint32 round) private {
        TaskState storage t = _tasks[taskId];
        TaskSpec storage spec = _specs[taskId];
        uint32 end = t.status == TaskStatus.Running ? t.currentRound : spec.rounds;
        for (uint32 r = round; r < end; ++r) {
            RoundRecord storage rr = _rounds[taskId][r];
            if (rr.status == RoundStatus.Finalized) _voidRound(taskId, t, spec, rr, r);
        }
        bytes32 restored = _rounds[taskId][round].prevStateRoot;
        t.stateRoot = restored;
        emit RoundsInvalidated(taskId, round, end - 1, restored);
    }

    function _voidRound(uint256 taskId, TaskState storage t, TaskSpec storage spec, RoundRecord storage rr, uint32 r)
        private
    {
        rr.status = RoundStatus.Invalidated;
        t.roundsFinalized -= 1;
        t.roundsInvalidated += 1;
        uint256 mask = rr.acceptedMask & ~rr.revokedMask;
        uint256 total = 0;
        while (mask != 0) {
            uint16 fragment = _lowestBit(mask);
            mask &= mask - 1;
            Submission storage s = _submissions[taskId][r][fragment];
            TrainerRecord storage tr = _trainerRecords[taskId][s.trainer];
            tr.accepted -= 1;
            tr.acceptedWeight -= s.weight;
            total += s.weight;
        }
        t.totalWeight -= total;

        address[] storage witnesses = spec.witnesses;
        uint256 fee = spec.witnessFee;
        for (uint256 i = 0; i < witnesses.length; ++i) {
            if (_votes[taskId][r][witnesses[i]] != rr.result) continue;
            WitnessRecord storage w = _witnessRecords[taskId][witnesses[i]];
            w.matched -= 1;
            w.fees -= fee;
            t.feesEarned -= fee;
            t.feeBudget += fee;
        }
    }
}
