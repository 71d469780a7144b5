// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ISynclineCourt} from "./ISynclineCourt.sol";
import {SynclineCourtCore} from "./SynclineCourtCore.sol";
import {SynclineConfidential} from "./SynclineConfidential.sol";
import {SynclineRulings} from "./SynclineRulings.sol";
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
/// The rulings on asynchronous claims (censorship defence and the data-availability sub-game,
/// `resolveCensorship`, `expireChallenge`, `continueInvalidation`) run in `SynclineRulings`,
/// which this module creates and forwards those selectors to, so each module stays under EIP-170.
/// @dev No external calls: money only moves between the task's obligations and pull credits, so
/// the market's money invariant holds through every path here.
contract SynclineCourt is ISynclineCourt, SynclineCourtCore {
    /// @notice The `SynclineRulings` module this court created; the rulings run there.
    address public immutable RULINGS = address(new SynclineRulings());
    /// @notice The `SynclineConfidential` module this court created: every selector the court
    /// does not implement (the `ISynclineConfidential` functions) runs there.
    address public immutable CONFIDENTIAL = address(new SynclineConfidential());

    /// @dev `which` values of `SynclineBadMerkleProof` for the two state openings.
    uint256 private constant PREV_STATE = type(uint256).max - 1;
    uint256 private constant CLAIMED_STATE = type(uint256).max;

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
        // The accused must show it still has the segment (publishing its checkpoints off chain)
        // by `answerTraining` within half the claim's window; only not answering convicts.
        _openResponse(_demands[challengeId], taskId);
    }

    /// @inheritdoc ISynclineCourt
    function refereeVote(uint256 challengeId, bool guilty) external onlyDelegated {
        Challenge storage c = _requireOpen(challengeId, ChallengeKind.TrainingFraud);
        if (block.timestamp > c.deadline) revert SynclineChallengeDeadline(challengeId, c.deadline);
        uint256 taskId = c.taskId;
        _requireReferee(taskId);
        RefereeVerdict prev = _refereeVerdicts[challengeId][msg.sender];
        // An `Unavailable` verdict gives way to a replay verdict once the data shows up; a replay
        // verdict is final.
        if (prev == RefereeVerdict.Unavailable) --_demands[challengeId].demanders;
        else if (prev != RefereeVerdict.None) revert SynclineAlreadyRefereed(challengeId, msg.sender);
        _refereeVerdicts[challengeId][msg.sender] = guilty ? RefereeVerdict.Guilty : RefereeVerdict.Innocent;
        emit RefereeVoted(challengeId, msg.sender, guilty);

        TaskSpec storage spec = _specs[taskId];
        if (guilty) {
            if (++c.guiltyVotes < spec.threshold) return;
            _uphold(challengeId, _convictTrainer(taskId, c.round, c.fragment, c.accused));
        } else {
            if (++c.innocentVotes <= spec.witnesses.length - spec.threshold) return;
            // Guilty can no longer reach the threshold: acquitted. The referees that replayed are
            // paid `bond / (2N)` each, the claimant gets the rest back (`_refundBond`).
            _reject(challengeId, c);
            _refundBond(challengeId, c);
        }
    }

    /// @inheritdoc ISynclineCourt
    function refereeUnavailable(uint256) external onlyDelegated {
        _forward();
    }

    // ------------------------------------------------------------------ rulings (SynclineRulings)

    /// @inheritdoc ISynclineCourt
    function answerCensorship(uint256, uint32, bytes calldata, bytes32[] calldata) external onlyDelegated {
        _forward();
    }

    /// @inheritdoc ISynclineCourt
    function demandAvailability(uint256, uint32) external onlyDelegated {
        _forward();
    }

    /// @inheritdoc ISynclineCourt
    function answerAvailability(uint256, bytes calldata, bytes32[] calldata) external onlyDelegated {
        _forward();
    }

    /// @inheritdoc ISynclineCourt
    function resolveCensorship(uint256) external onlyDelegated {
        _forward();
    }

    /// @inheritdoc ISynclineCourt
    function expireChallenge(uint256) external onlyDelegated {
        _forward();
    }

    /// @inheritdoc ISynclineCourt
    function answerTraining(uint256) external onlyDelegated {
        _forward();
    }

    /// @inheritdoc ISynclineCourt
    function continueInvalidation(uint256) external onlyDelegated {
        _forward();
    }

    /// @notice Runs the `ISynclineConfidential` functions (and any unknown selector, which reverts
    /// there) in `SynclineConfidential`, by delegatecall: still on the market's storage.
    fallback() external payable onlyDelegated {
        address confidential = CONFIDENTIAL;
        // assembly: as `_forward`, to the confidential module (memory-safe: never returns to Solidity).
        assembly ("memory-safe") {
            let ptr := mload(0x40)
            calldatacopy(ptr, 0, calldatasize())
            let ok := delegatecall(gas(), confidential, ptr, calldatasize(), 0, 0)
            returndatacopy(ptr, 0, returndatasize())
            if iszero(ok) { revert(ptr, returndatasize()) }
            return(ptr, returndatasize())
        }
    }

    /// @dev Runs this call in `SynclineRulings` (by delegatecall: still on the market's storage)
    /// and returns or reverts with its data.
    function _forward() private {
        address rulings = RULINGS;
        // assembly: forward calldata and the return/revert data unchanged, through memory past
        // the free-memory pointer (memory-safe: the call never returns to Solidity).
        assembly ("memory-safe") {
            let ptr := mload(0x40)
            calldatacopy(ptr, 0, calldatasize())
            let ok := delegatecall(gas(), rulings, ptr, calldatasize(), 0, 0)
            returndatacopy(ptr, 0, returndatasize())
            if iszero(ok) { revert(ptr, returndatasize()) }
            return(ptr, returndatasize())
        }
    }

    // ------------------------------------------------------------------ views

    /// @inheritdoc ISynclineCourt
    function availabilityDemand(uint256 challengeId)
        external
        view
        returns (uint64 deadline, uint32 chunkIndex, uint16 demanders, bool answered, uint64 deadlineBlock)
    {
        AvailabilityDemand storage d = _demands[challengeId];
        return (d.deadline, d.chunkIndex, d.demanders, d.answered, d.deadlineBlock);
    }

    /// @inheritdoc ISynclineCourt
    function demandedBy(uint256 challengeId, address witness) external view returns (bool) {
        return _demanded[challengeId][witness];
    }

    /// @inheritdoc ISynclineCourt
    function invalidation(uint256 taskId) external view returns (uint32 from, uint32 next, uint32 end) {
        Invalidation storage inv = _invalidations[taskId];
        return (inv.from, inv.next, inv.end);
    }

    /// @inheritdoc ISynclineCourt
    function getSubmission(uint256 taskId, uint32 round, uint16 fragment) external view returns (Submission memory) {
        _requireTask(taskId);
        return _submissions[taskId][round][fragment];
    }

    /// @inheritdoc ISynclineCourt
    function voteOf(uint256 taskId, uint32 round, address witness) external view returns (bytes32) {
        _requireTask(taskId);
        return _votes[taskId][round][witness];
    }

    /// @inheritdoc ISynclineCourt
    function roundWorkComplete(uint256 taskId, uint32 round) external view returns (bool) {
        TaskState storage t = _requireTask(taskId);
        if (t.status != TaskStatus.Running || round != t.currentRound) return false;
        return _workComplete(taskId, _rounds[taskId][round].committedMask);
    }

    /// @inheritdoc ISynclineCourt
    function commitDeadline(uint256 taskId) external view returns (uint64) {
        TaskState storage t = _requireStatus(taskId, TaskStatus.Running);
        return _commitDeadline(t, _specs[taskId].roundDuration, _rounds[taskId][t.currentRound]);
    }

    /// @inheritdoc ISynclineCourt
    function activeMask(uint256 taskId) external view returns (uint256) {
        _requireTask(taskId);
        return _activeMask[taskId];
    }

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
                slashed: r.slashed,
                late: 0
            });
        }
        _countLate(taskId, t, spec, receipt.trainers);
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

    /// @dev Each trainer's late commitments, from the rounds' `lateMask` (a view: one read a round).
    function _countLate(uint256 taskId, TaskState storage t, TaskSpec storage spec, TrainerReceipt[] memory rows)
        private
        view
    {
        uint32 rounds = t.currentRound < spec.rounds ? t.currentRound + 1 : spec.rounds;
        for (uint32 round = 0; round < rounds; ++round) {
            uint256 mask = _rounds[taskId][round].lateMask;
            for (uint256 i = 0; mask != 0 && i < rows.length; ++i) {
                if (mask >> rows[i].fragment & 1 == 1) rows[i].late += 1;
            }
        }
    }

    /// @inheritdoc ISynclineCourt
    function challengeCount() external view returns (uint256) {
        return _challengeCount;
    }
}
