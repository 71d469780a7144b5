// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ISynclineMarket} from "./ISynclineMarket.sol";
import {TrainerStaking} from "./TrainerStaking.sol";
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
} from "./SynclineTypes.sol";
import {ShardAssignment} from "./libraries/ShardAssignment.sol";

/// @title RoundLedger
/// @notice Sync rounds: trainer commitments before the deadline, the k-of-N witness quorum with
/// idempotent finalize and fork detection (votes count after the deadline, or earlier once every
/// active trainer committed: early close), carry-forward after the grace window, missed-round
/// accounting and eviction.
abstract contract RoundLedger is TrainerStaking {
    /// @inheritdoc ISynclineMarket
    function commitSubmission(Commitment calldata c, bytes calldata signature) external {
        uint256 taskId = c.taskId;
        uint32 round = c.round;
        uint16 fragment = c.fragment;
        TaskState storage t = _requireStatus(taskId, TaskStatus.Running);
        if (fragment >= t.enrolled) revert SynclineUnassignedFragment(taskId, fragment, msg.sender);
        address trainer = _trainersByFragment[taskId][fragment];
        address signer = _recover(_commitmentDigest(c), signature);
        if (signer != trainer) revert SynclineWrongSigner(signer, trainer);
        RoundRecord storage rr = _rounds[taskId][round];
        uint256 bit = uint256(1) << fragment;
        Submission storage s = _submissions[taskId][round][fragment];
        if (rr.committedMask & bit != 0) {
            // INVARIANT: a relayed copy of the trainer's own signed commitment is harmless. The
            // identical commitment (uri included) is already on record: succeed, change nothing.
            if (
                s.payloadHash == c.payloadHash && s.chunkRoot == c.chunkRoot && s.checkpointRoot == c.checkpointRoot
                    && keccak256(bytes(s.uri)) == keccak256(bytes(c.uri))
            ) return;
            revert SynclineDuplicateSubmission(taskId, round, fragment);
        }
        TrainerRecord storage r = _trainerRecords[taskId][trainer];
        if (r.evicted) revert SynclineNotActiveTrainer(taskId, trainer);
        if (round != t.currentRound) revert SynclineWrongRound(taskId, round, t.currentRound);
        {
            uint64 deadline = _commitDeadline(t, _specs[taskId].roundDuration, rr);
            if (block.timestamp > deadline) revert SynclineSubmissionLate(taskId, round, deadline);
        }
        if (c.payloadHash == bytes32(0) || c.chunkRoot == bytes32(0) || c.checkpointRoot == bytes32(0)) {
            revert SynclineEmptyCommitment();
        }
        _markIfLate(taskId, t, rr, round, fragment, trainer);

        uint16 weight = ShardAssignment.count(r.shardMask);
        uint256 committed = rr.committedMask | bit;
        rr.committedMask = committed;
        r.submitted += 1;
        s.trainer = trainer;
        s.weight = weight;
        s.committedAt = uint64(block.timestamp);
        s.payloadHash = c.payloadHash;
        s.chunkRoot = c.chunkRoot;
        s.checkpointRoot = c.checkpointRoot;
        s.uri = c.uri;
        emit SubmissionCommitted(
            taskId, round, fragment, trainer, c.payloadHash, c.chunkRoot, c.checkpointRoot, c.uri, weight, signature
        );
        // The committer is active, so the active set is not empty: this commitment completes it or not.
        if (_activeMask[taskId] & ~committed == 0) emit RoundWorkComplete(taskId, round, committed);
    }

    /// @inheritdoc ISynclineMarket
    function finalizeRound(Vote calldata v, bytes calldata signature) external {
        uint256 taskId = v.taskId;
        uint32 round = v.round;
        bytes32 stateRoot = v.stateRoot;
        bytes32 aggregateRoot = v.aggregateRoot;
        uint256 acceptedMask = v.acceptedMask;
        address witness = _recover(_voteDigest(v), signature);
        TaskState storage t = _requireTask(taskId);
        if (!_isWitness[taskId][witness]) revert SynclineNotWitness(taskId, witness);
        if (stateRoot == bytes32(0)) revert SynclineEmptyStateRoot();
        bytes32 result = keccak256(abi.encode(stateRoot, aggregateRoot, acceptedMask));
        RoundRecord storage rr = _rounds[taskId][round];

        // Idempotence and fork detection come first: they hold in any later task status.
        if (rr.status == RoundStatus.Finalized) {
            if (rr.result == result) return;
            revert ConflictingFinalize(round, rr.result, result);
        }
        if (rr.status == RoundStatus.CarriedForward || rr.status == RoundStatus.Invalidated) {
            revert SynclineRoundCarriedForward(taskId, round);
        }
        if (t.status != TaskStatus.Running) revert SynclineWrongTaskStatus(taskId, t.status, TaskStatus.Running);
        if (round != t.currentRound) revert SynclineWrongRound(taskId, round, t.currentRound);
        uint64 deadline = _commitDeadline(t, _specs[taskId].roundDuration, rr);
        // Early close: once every active trainer committed, nothing more can be committed.
        if (block.timestamp <= deadline && !_workComplete(taskId, rr.committedMask)) {
            revert SynclineRoundStillOpen(taskId, round, deadline);
        }
        // Nobody committed by the extended deadline: nothing to vote on (no vote, no fee);
        // `carryForward` closes the round empty.
        if (rr.committedMask == 0) revert SynclineNothingToVote();
        uint256 stray = acceptedMask & ~rr.committedMask;
        if (stray != 0) revert SynclineAcceptedNotCommitted(taskId, round, stray);
        bytes32 prevStateRoot = t.stateRoot;
        if (v.prevStateRoot != prevStateRoot) {
            revert SynclineWrongPrevStateRoot(v.prevStateRoot, prevStateRoot);
        }
        // INVARIANT: every vote on record for the open round built on `rr.prevStateRoot`. A
        // rollback since the last vote (a proven fault in an earlier round) made them stale:
        // they stop counting, and their witnesses may vote again on the restored root.
        if (rr.prevStateRoot != prevStateRoot) {
            if (rr.voteCount != 0) _discardVotes(taskId, rr, round, prevStateRoot);
            rr.prevStateRoot = prevStateRoot;
        }

        bytes32 previous = _votes[taskId][round][witness];
        if (previous == result) return;
        if (previous != bytes32(0)) revert SynclineAlreadyVoted(taskId, round, witness, previous);
        WitnessRecord storage w = _witnessRecords[taskId][witness];
        // An unbonded witness, or one whose bond was slashed away, has nothing at stake: no vote.
        if (w.bond == 0) revert SynclineWitnessUnbonded(taskId, witness);

        _votes[taskId][round][witness] = result;
        uint16 tally = ++_tally[taskId][round][result];
        rr.voteCount += 1;
        w.votes += 1;
        emit VoteCast(
            taskId, round, witness, result, prevStateRoot, stateRoot, aggregateRoot, acceptedMask, v.metric, signature
        );
        if (rr.firstVote == bytes32(0)) {
            rr.firstVote = result;
        } else if (rr.firstVote != result) {
            w.dissents += 1;
            emit DissentRecorded(taskId, round, witness, result, rr.firstVote);
        }

        if (tally >= _specs[taskId].threshold) {
            _finalize(taskId, t, rr, round, result, stateRoot, aggregateRoot, acceptedMask);
        }
    }

    /// @inheritdoc ISynclineMarket
    function carryForward(uint256 taskId, uint32 round) external {
        TaskState storage t = _requireStatus(taskId, TaskStatus.Running);
        if (round != t.currentRound) revert SynclineWrongRound(taskId, round, t.currentRound);
        TaskSpec storage spec = _specs[taskId];
        RoundRecord storage rr = _rounds[taskId][round];
        // A round with commitments waits a grace window past its deadline for the quorum; an
        // empty one (nobody committed by its extended deadline) has nothing to wait for.
        uint64 earliest = _commitDeadline(t, spec.roundDuration, rr);
        if (rr.committedMask != 0) earliest += spec.graceWindow;
        if (block.timestamp <= earliest) revert SynclineGraceWindowOpen(taskId, round, earliest);

        bytes32 root = t.stateRoot;
        rr.status = RoundStatus.CarriedForward;
        rr.openedAt = t.roundOpenedAt;
        rr.closedAt = uint64(block.timestamp);
        rr.closedBlock = uint64(block.number);
        rr.stateRoot = root;
        t.roundsCarried += 1;
        emit RoundCarriedForward(taskId, round, root, msg.sender);
        // Empty: no vote, no fee and no miss for anyone (`_closeRound`).
        if (rr.committedMask == 0) emit SynclineRoundEmpty(taskId, round, root);
        _closeRound(taskId, t, spec, rr, round);
    }

    /// @inheritdoc ISynclineMarket
    function getRound(uint256 taskId, uint32 round) external view returns (RoundRecord memory rr) {
        TaskState storage t = _requireTask(taskId);
        rr = _rounds[taskId][round];
        if (rr.status == RoundStatus.Pending && round == t.currentRound && t.status == TaskStatus.Running) {
            rr.openedAt = t.roundOpenedAt;
        }
    }

    // ------------------------------------------------------------------ internal

    /// @dev Drops the open round's votes cast on a root a rollback replaced (at most one pass per
    /// rollback, bounded by the witness set): they no longer count toward quorum, fees or dissent.
    function _discardVotes(uint256 taskId, RoundRecord storage rr, uint32 round, bytes32 prevStateRoot) private {
        address[] storage witnesses = _specs[taskId].witnesses;
        for (uint256 i = 0; i < witnesses.length; ++i) {
            bytes32 stale = _votes[taskId][round][witnesses[i]];
            if (stale == bytes32(0)) continue;
            delete _votes[taskId][round][witnesses[i]];
            delete _tally[taskId][round][stale];
        }
        emit VotesDiscarded(taskId, round, rr.prevStateRoot, prevStateRoot);
        rr.voteCount = 0;
        rr.firstVote = bytes32(0);
    }

    /// @dev A commitment after the round's first deadline, within its extension (nobody had
    /// committed by then): recorded like any other, counted late (`lateMask`, the receipt's `late`).
    function _markIfLate(
        uint256 taskId,
        TaskState storage t,
        RoundRecord storage rr,
        uint32 round,
        uint16 fragment,
        address trainer
    ) private {
        // unchecked: as in `_commitDeadline`.
        unchecked {
            if (block.timestamp <= t.roundOpenedAt + _specs[taskId].roundDuration) return;
        }
        rr.lateMask |= uint256(1) << fragment;
        emit SubmissionLate(taskId, round, trainer);
    }

    function _finalize(
        uint256 taskId,
        TaskState storage t,
        RoundRecord storage rr,
        uint32 round,
        bytes32 result,
        bytes32 stateRoot,
        bytes32 aggregateRoot,
        uint256 acceptedMask
    ) private {
        TaskSpec storage spec = _specs[taskId];
        rr.status = RoundStatus.Finalized;
        rr.openedAt = t.roundOpenedAt;
        rr.closedAt = uint64(block.timestamp);
        rr.closedBlock = uint64(block.number);
        rr.result = result;
        rr.stateRoot = stateRoot;
        rr.aggregateRoot = aggregateRoot;
        rr.acceptedMask = acceptedMask;
        t.stateRoot = stateRoot; // rr.prevStateRoot holds the root the votes built on

        t.roundsFinalized += 1;
        emit RoundFinalized(taskId, round, result, stateRoot, aggregateRoot, acceptedMask);

        _creditAcceptedWork(taskId, t, rr, round, acceptedMask);
        _earnWitnessFees(taskId, t, spec, round, result);
        _closeRound(taskId, t, spec, rr, round);
    }

    /// @dev Adds each accepted submission's weight to its trainer (paid pro rata at seal). A
    /// trainer evicted for a proven fault while the round was open earns nothing for it: its
    /// submission is marked revoked instead.
    function _creditAcceptedWork(
        uint256 taskId,
        TaskState storage t,
        RoundRecord storage rr,
        uint32 round,
        uint256 mask
    ) private {
        uint256 total = 0;
        while (mask != 0) {
            uint16 fragment = _lowestBit(mask);
            mask &= mask - 1;
            Submission storage s = _submissions[taskId][round][fragment];
            TrainerRecord storage r = _trainerRecords[taskId][s.trainer];
            if (r.evicted) {
                rr.revokedMask |= uint256(1) << fragment;
                emit RewardRevoked(taskId, round, s.trainer, s.weight);
                continue;
            }
            r.accepted += 1;
            r.acceptedWeight += s.weight;
            total += s.weight;
        }
        t.totalWeight += total;
    }

    /// @dev The witnesses whose vote matched the finalized result earn one fee each.
    function _earnWitnessFees(uint256 taskId, TaskState storage t, TaskSpec storage spec, uint32 round, bytes32 result)
        private
    {
        address[] storage witnesses = spec.witnesses;
        uint256 fee = spec.witnessFee;
        for (uint256 i = 0; i < witnesses.length; ++i) {
            if (_votes[taskId][round][witnesses[i]] != result) continue;
            WitnessRecord storage w = _witnessRecords[taskId][witnesses[i]];
            w.matched += 1;
            w.fees += fee;
            t.feeBudget -= fee;
            t.feesEarned += fee;
        }
    }

    /// @dev Missed-round accounting and eviction for the closed round, then opens the next one.
    /// A round nobody committed to counts no miss: it tells an outage of what every trainer shares
    /// (blob service, RPC, the run's state) from one lazy trainer, and an outage slashes no one.
    function _closeRound(
        uint256 taskId,
        TaskState storage t,
        TaskSpec storage spec,
        RoundRecord storage rr,
        uint32 round
    ) private {
        address[] storage trainers = _trainersByFragment[taskId];
        bool evicted = false;
        uint256 count = rr.committedMask == 0 ? 0 : trainers.length;
        for (uint256 i = 0; i < count; ++i) {
            TrainerRecord storage r = _trainerRecords[taskId][trainers[i]];
            if (r.evicted) continue;
            if (rr.committedMask & (uint256(1) << r.fragment) != 0) {
                r.consecutiveMissed = 0;
                continue;
            }
            r.missed += 1;
            r.consecutiveMissed += 1;
            emit RoundMissed(taskId, round, trainers[i], r.consecutiveMissed);
            if (r.consecutiveMissed > spec.maxMissedRounds) {
                _evict(taskId, trainers[i], round);
                evicted = true;
            }
        }
        if (evicted && t.active > 0) _assignShards(taskId, spec.shardCount);

        t.lastClosedAt = uint64(block.timestamp);
        t.lastClosedBlock = uint64(block.number);
        if (round + 1 >= spec.rounds) {
            t.status = TaskStatus.AwaitingSeal;
            emit RunCompleted(taskId, t.stateRoot, uint64(block.timestamp) + spec.challengeWindow);
        } else {
            t.currentRound = round + 1;
            t.roundOpenedAt = uint64(block.timestamp);
            emit RoundOpened(taskId, round + 1, uint64(block.timestamp), uint64(block.timestamp) + spec.roundDuration);
        }
    }
}
