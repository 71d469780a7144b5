// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {SynclineCourtCore} from "./SynclineCourtCore.sol";
import {
    TaskSpec,
    TaskState,
    TrainerRecord,
    WitnessRecord,
    Submission,
    RoundRecord,
    Challenge,
    ChallengeKind,
    ChallengeStatus
} from "./SynclineTypes.sol";
import {ChunkAggregation} from "./libraries/ChunkAggregation.sol";
import {ChunkMerkle} from "./libraries/ChunkMerkle.sol";

/// @title SynclineRulings
/// @notice The court's rulings on asynchronous claims, split off `SynclineCourt` to keep each
/// module under the EIP-170 size limit: the defence of a censorship claim (`answerCensorship`,
/// the data-availability sub-game `demandAvailability` / `answerAvailability`), its ruling
/// (`resolveCensorship`), a referee's `Unavailable` verdict and the expiry of a training claim,
/// and the batched rollback
/// (`continueInvalidation`). `SynclineCourt` creates it and forwards these selectors to it by
/// delegatecall, so it runs on the market's storage too (see `ISynclineCourt` for the rules).
contract SynclineRulings is SynclineCourtCore {
    /// @notice See `ISynclineCourt` (reached through `SynclineCourt`).
    function answerCensorship(uint256 challengeId, uint32 chunkIndex, bytes calldata chunk, bytes32[] calldata proof)
        external
        onlyDelegated
    {
        Challenge storage c = _requireOpen(challengeId, ChallengeKind.Censorship);
        if (block.timestamp > c.deadline) revert SynclineChallengeDeadline(challengeId, c.deadline);
        // INVARIANT: only a voter of the finalized result defends it, never the claimant.
        if (!_votedResult(c, msg.sender)) revert SynclineNotDefender(challengeId, msg.sender);
        if (_openedChunkWellFormed(c, chunkIndex, chunk, proof)) revert SynclineChunkWellFormed(challengeId, chunkIndex);
        _reject(challengeId, c);
        _credit(c.taskId, msg.sender, c.bond, REASON_FORFEIT);
    }

    /// @notice See `ISynclineCourt` (reached through `SynclineCourt`).
    function demandAvailability(uint256 challengeId, uint32 chunkIndex) external onlyDelegated {
        Challenge storage c = _requireOpen(challengeId, ChallengeKind.Censorship);
        if (block.timestamp > c.deadline) revert SynclineChallengeDeadline(challengeId, c.deadline);
        if (!_votedResult(c, msg.sender)) revert SynclineNotDefender(challengeId, msg.sender);
        if (_demanded[challengeId][msg.sender]) revert SynclineAlreadyDemanded(challengeId, msg.sender);
        AvailabilityDemand storage d = _demands[challengeId];
        if (d.deadline == 0) {
            TaskSpec storage spec = _specs[c.taskId];
            (, uint256 count) = _chunkShape(spec.paramCount, chunkIndex);
            if (count == 0) revert SynclineBadOpening(c.taskId, c.round, chunkIndex);
            _openResponse(d, c.taskId);
            d.chunkIndex = chunkIndex;
        }
        // A later voter joins the first demand (its chunk and window) until the claim's deadline,
        // even once answered: demanding is what keeps a voter's bond, and costs at most its fee.
        _demanded[challengeId][msg.sender] = true;
        d.demanders += 1;
        emit AvailabilityDemanded(challengeId, msg.sender, d.chunkIndex, d.deadline);
    }

    /// @notice See `ISynclineCourt` (reached through `SynclineCourt`).
    function answerAvailability(uint256 challengeId, bytes calldata chunk, bytes32[] calldata proof)
        external
        onlyDelegated
    {
        Challenge storage c = _requireOpen(challengeId, ChallengeKind.Censorship);
        AvailabilityDemand storage d = _demands[challengeId];
        if (d.deadline == 0 || d.answered || !_responseOpen(d)) {
            revert SynclineAvailabilityClosed(challengeId, d.deadline);
        }
        if (!_openedChunkWellFormed(c, d.chunkIndex, chunk, proof)) {
            // The opened chunk proves the exclusion was justified: the claim fails.
            _rejectUnavailable(challengeId, c, false);
            return;
        }
        d.answered = true;
        emit AvailabilityAnswered(challengeId, msg.sender, d.chunkIndex);
    }

    /// @notice See `ISynclineCourt` (reached through `SynclineCourt`).
    function resolveCensorship(uint256 challengeId) external onlyDelegated {
        Challenge storage c = _requireOpen(challengeId, ChallengeKind.Censorship);
        if (block.timestamp <= c.deadline) revert SynclineChallengeDeadline(challengeId, c.deadline);
        AvailabilityDemand storage d = _demands[challengeId];
        if (d.deadline != 0 && !d.answered && _responseOpen(d)) {
            revert SynclineChallengeDeadline(challengeId, d.deadline);
        }
        uint256 taskId = c.taskId;
        RoundRecord storage rr = _rounds[taskId][c.round];
        if (d.deadline != 0 && !d.answered) {
            // INVARIANT: data demanded and not shown in the response window is unavailable; the
            // claim fails and its bond pays the demanders.
            _rejectUnavailable(challengeId, c, true);
        } else if (_isVoid(taskId, c.round)) {
            // Another proof already voided the round: nothing left to uphold, the bond goes back.
            _expire(challengeId, c);
        } else if (d.deadline == 0) {
            _uphold(challengeId, _convictRound(taskId, c.round, rr.result));
        } else {
            _settleLateAvailability(challengeId, c);
        }
    }

    /// @dev The demanded chunk was opened, so the submission's data exists, but it was shown only
    /// after the vote, and the chain cannot tell data withheld until then from data a voter failed
    /// to fetch (or a claimant that is the trainer's own second address). Neither side is at fault
    /// on what the chain can see, so nothing moves: the round stands as voted, no voter is slashed
    /// or gives up its fee, the trainer is not credited the round (showing data late earns nothing
    /// that showing it in time would not have), and the claim expires (its bond back).
    function _settleLateAvailability(uint256 challengeId, Challenge storage c) internal {
        // INVARIANT: late data never turns a voter into a culprit, nor a withholder into a payee.
        emit AvailabilityShownLate(challengeId, c.taskId, c.round, c.fragment);
        _expire(challengeId, c);
    }

    /// @dev The claim fails for the submission's own fault (malformed or unavailable): the bond
    /// is split between the voters that demanded availability (dust to the reward pool).
    function _rejectUnavailable(uint256 challengeId, Challenge storage c, bool unavailable) internal {
        _reject(challengeId, c);
        if (unavailable) emit SubmissionUnavailable(c.taskId, c.round, c.fragment, challengeId);
        _splitBond(challengeId, c, _demands[challengeId].demanders, PAY_DEMANDERS);
    }

    /// @dev Whether `who` voted the finalized result of the claim's round and is not the claimant.
    function _votedResult(Challenge storage c, address who) internal view returns (bool) {
        return who != c.challenger && _votes[c.taskId][c.round][who] == _rounds[c.taskId][c.round].result;
    }

    /// @dev Verifies chunk `chunkIndex` of the accused submission against its committed chunk
    /// root (the binding commitment of its bytes) and says whether it is well formed.
    function _openedChunkWellFormed(Challenge storage c, uint32 chunkIndex, bytes calldata chunk, bytes32[] calldata proof)
        internal
        view
        returns (bool)
    {
        TaskSpec storage spec = _specs[c.taskId];
        (uint256 chunkCount, uint256 count) = _chunkShape(spec.paramCount, chunkIndex);
        if (count == 0) revert SynclineBadOpening(c.taskId, c.round, chunkIndex);
        bytes32 root = _submissions[c.taskId][c.round][c.fragment].chunkRoot;
        if (!ChunkMerkle.verify(root, chunkIndex, chunkCount, keccak256(chunk), proof)) {
            revert SynclineBadMerkleProof(0, root);
        }
        return ChunkAggregation.isWellFormedGradientChunk(chunk, spec.gradientBits, count);
    }

    /// @notice See `ISynclineCourt` (reached through `SynclineCourt`).
    function continueInvalidation(uint256 taskId) external onlyDelegated {
        TaskState storage t = _requireTask(taskId);
        Invalidation storage inv = _invalidations[taskId];
        if (inv.next == inv.end) revert SynclineNothingToInvalidate(taskId);
        _continueInvalidation(taskId, t, inv);
    }

    /// @notice See `ISynclineCourt` (reached through `SynclineCourt`).
    function answerTraining(uint256 challengeId) external onlyDelegated {
        Challenge storage c = _requireOpen(challengeId, ChallengeKind.TrainingFraud);
        if (msg.sender != c.accused) revert SynclineNotAccused(challengeId, msg.sender);
        AvailabilityDemand storage d = _demands[challengeId];
        if (d.answered || !_responseOpen(d)) revert SynclineAvailabilityClosed(challengeId, d.deadline);
        d.answered = true;
        emit TrainingAnswered(challengeId, msg.sender);
    }

    /// @notice See `ISynclineCourt` (reached through `SynclineCourt`).
    function refereeUnavailable(uint256 challengeId) external onlyDelegated {
        Challenge storage c = _requireOpen(challengeId, ChallengeKind.TrainingFraud);
        if (block.timestamp > c.deadline) revert SynclineChallengeDeadline(challengeId, c.deadline);
        AvailabilityDemand storage d = _demands[challengeId];
        // INVARIANT: only data the accused said it published can be missing: before its answer a
        // failed fetch says nothing (the response window is still running).
        if (!d.answered) revert SynclineTrainingNotAnswered(challengeId);
        _requireReferee(c.taskId);
        if (_refereeVerdicts[challengeId][msg.sender] != RefereeVerdict.None) {
            revert SynclineAlreadyRefereed(challengeId, msg.sender);
        }
        _refereeVerdicts[challengeId][msg.sender] = RefereeVerdict.Unavailable;
        ++d.demanders;
        emit RefereeUnavailable(challengeId, msg.sender);
    }

    /// @notice See `ISynclineCourt` (reached through `SynclineCourt`).
    function expireChallenge(uint256 challengeId) external onlyDelegated {
        Challenge storage c = _requireOpen(challengeId, ChallengeKind.TrainingFraud);
        AvailabilityDemand storage d = _demands[challengeId];
        if (!d.answered) {
            // INVARIANT: the accused was told on chain (the claim) and had the response window (in
            // time and in blocks) to answer; only its silence convicts, never a referee's failure
            // to fetch.
            if (_responseOpen(d)) revert SynclineChallengeDeadline(challengeId, d.deadline);
            emit SegmentWithheld(challengeId, c.taskId, c.round, c.fragment);
            _uphold(challengeId, _convictTrainer(c.taskId, c.round, c.fragment, c.accused));
            return;
        }
        if (block.timestamp <= c.deadline) revert SynclineChallengeDeadline(challengeId, c.deadline);
        if (c.guiltyVotes + d.demanders >= _specs[c.taskId].threshold) {
            // INVARIANT: the accused answered (it said the segment is published), and at the
            // deadline `threshold` bonded referees stand by a guilty or an `Unavailable` verdict
            // (the task's store reachable, the committed data absent from it): upheld.
            emit SegmentUnavailable(challengeId, c.taskId, c.round, c.fragment, d.demanders);
            _uphold(challengeId, _convictTrainer(c.taskId, c.round, c.fragment, c.accused));
            return;
        }
        // Answered and undecided: each referee that replayed the segment is paid `bond / (2N)`,
        // the claimant gets the rest back (`_refundBond`).
        _close(c, ChallengeStatus.Expired);
        _refundBond(challengeId, c);
        emit ChallengeResolved(challengeId, c.taskId, ChallengeStatus.Expired, 0, 0);
    }
}
