// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

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
    Challenge,
    ChallengeKind,
    ChallengeStatus
} from "./SynclineTypes.sol";
import {ChunkAggregation} from "./libraries/ChunkAggregation.sol";
import {TierPolicy} from "./libraries/TierPolicy.sol";

/// @title SynclineCourtCore
/// @notice What the court modules share: the challenge life cycle (open, close, uphold,
/// reject, expire), the consequences of a proven fault (slash, evict, revoke, roll back in
/// batches) and the checks. `SynclineCourt`, `SynclineRulings` and `SynclineConfidential` run by
/// delegatecall on the market's storage; each carries only the internals it uses.
abstract contract SynclineCourtCore is SynclineStorage {
    /// @dev This module's own address: direct calls (not delegated by the market) are refused.
    address internal immutable SELF = address(this);

    /// @dev Rounds a rollback voids per call: at 64 trainers and 32 voting witnesses a round
    /// costs ~265k gas, so a batch stays far below a 30M-gas block (see `ClosingGas.t.sol`).
    uint32 internal constant INVALIDATION_BATCH = 32;

    /// @dev Which witnesses a bond is split between (`_payWitnesses`): the referees with a replay
    /// verdict (guilty or innocent) on a training claim, or the voters that demanded availability.
    uint8 internal constant PAY_REFEREES = 1;
    uint8 internal constant PAY_DEMANDERS = 2;

    /// @dev What a referee's replay of a training claim that is not upheld costs its claimant, as
    /// a fraction of the bond per referee: `bond / (REFEREE_FEE_DIVISOR * N)` each, so the at most N
    /// replaying referees together take at most half the bond (`_refundBond`).
    uint256 internal constant REFEREE_FEE_DIVISOR = 2;

    bytes32 internal constant REASON_REFEREE = "referee-fee";

    modifier onlyDelegated() {
        if (address(this) == SELF) revert SynclineCourtDirectCall();
        _;
    }

    /// @dev Number of chunks of a `paramCount`-parameter state, and the coordinates in chunk
    /// `index` (0 if the index is out of range).
    function _chunkShape(uint64 paramCount, uint32 index) internal pure returns (uint256 chunkCount, uint256 count) {
        chunkCount = (uint256(paramCount) + ChunkAggregation.CHUNK_SIZE - 1) / ChunkAggregation.CHUNK_SIZE;
        if (index >= chunkCount) return (chunkCount, 0);
        uint256 rest = uint256(paramCount) - uint256(index) * ChunkAggregation.CHUNK_SIZE;
        count = rest < ChunkAggregation.CHUNK_SIZE ? rest : ChunkAggregation.CHUNK_SIZE;
    }

    /// @dev Splits `c.bond` into `parts` equal shares for the witnesses `mode` selects (their
    /// number is `parts`); the dust, or the whole bond when `parts` is 0, goes to the reward pool.
    function _splitBond(uint256 challengeId, Challenge storage c, uint256 parts, uint8 mode) internal {
        uint256 paid = parts == 0 ? 0 : _payWitnesses(challengeId, c, c.bond / parts, mode);
        _tasks[c.taskId].rewardPool += c.bond - paid;
    }

    /// @dev Credits `share` to every witness `mode` selects (the referees with a replay verdict,
    /// or the voters that demanded availability); returns the total paid.
    function _payWitnesses(uint256 challengeId, Challenge storage c, uint256 share, uint8 mode)
        internal
        returns (uint256 paid)
    {
        address[] storage ws = _specs[c.taskId].witnesses;
        for (uint256 i = 0; i < ws.length; ++i) {
            address w = ws[i];
            RefereeVerdict v = _refereeVerdicts[challengeId][w];
            bool pick = mode == PAY_DEMANDERS
                ? _demanded[challengeId][w]
                : (v == RefereeVerdict.Guilty || v == RefereeVerdict.Innocent);
            if (!pick) continue;
            _credit(c.taskId, w, share, mode == PAY_REFEREES ? REASON_REFEREE : REASON_FORFEIT);
            paid += share;
        }
    }

    /// @dev A training claim that ends without a conviction (acquitted by `N - k + 1` innocent
    /// verdicts, or answered and undecided at its deadline): each referee that re-executed the
    /// segment (a guilty or innocent verdict; not `Unavailable`, not silent) is paid
    /// `bond / (2N)`, at most half the bond in all; the claimant gets the rest back (issue 27:
    /// an honest claimant loses at most the referees' stated cost).
    function _refundBond(uint256 challengeId, Challenge storage c) internal {
        uint256 share = c.bond / (REFEREE_FEE_DIVISOR * _specs[c.taskId].witnesses.length);
        uint256 paid = _payWitnesses(challengeId, c, share, PAY_REFEREES);
        _credit(c.taskId, c.challenger, c.bond - paid, REASON_BOND);
    }

    // ------------------------------------------------------------------ checks

    /// @dev The caller may referee `taskId`'s training claims: a committee witness whose bond (if
    /// the task asks one) is not slashed.
    function _requireReferee(uint256 taskId) internal view {
        if (!_isWitness[taskId][msg.sender]) revert SynclineNotWitness(taskId, msg.sender);
        if (_specs[taskId].witnessBond != 0 && _witnessRecords[taskId][msg.sender].bond == 0) {
            revert SynclineWitnessUnbonded(taskId, msg.sender);
        }
    }

    /// @dev A challenge is heard while the run is running or waiting to seal, and until
    /// `challengeWindow` after the challenged round closed; an open round (equivocation only,
    /// `mustBeFinalized` false) can be challenged while it is open.
    function _requireChallengeable(uint256 taskId, uint32 round, bool mustBeFinalized)
        internal
        view
        returns (TaskState storage t, RoundRecord storage rr)
    {
        t = _requireTask(taskId);
        if (t.status != TaskStatus.Running && t.status != TaskStatus.AwaitingSeal) {
            revert SynclineWrongTaskStatus(taskId, t.status, TaskStatus.Running);
        }
        rr = _rounds[taskId][round];
        if (mustBeFinalized && _isVoid(taskId, round)) revert SynclineRoundNotFinalized(taskId, round);
        if (rr.closedAt == 0) {
            bool current = t.status == TaskStatus.Running && round == t.currentRound;
            if (!current) revert SynclineRoundNotFinalized(taskId, round);
            return (t, rr);
        }
        uint64 until = rr.closedAt + _specs[taskId].challengeWindow;
        if (block.timestamp > until && block.number > rr.closedBlock + MIN_CHALLENGE_BLOCKS) {
            revert SynclineChallengeWindowClosed(taskId, round, until);
        }
    }

    function _requireOpen(uint256 challengeId, ChallengeKind kind) internal view returns (Challenge storage c) {
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
    ) internal returns (uint256 challengeId) {
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
    function _isAsynchronous(ChallengeKind kind) internal pure returns (bool) {
        return kind == ChallengeKind.Censorship || kind == ChallengeKind.TrainingFraud;
    }

    /// @dev Every way out of `Open` goes through here: records `status`, takes the bond out of
    /// the task's obligations (the caller credits it) and closes the `openChallenges` count.
    function _close(Challenge storage c, ChallengeStatus status) internal returns (TaskState storage t) {
        c.status = status;
        t = _tasks[c.taskId];
        t.bondsHeld -= c.bond;
        if (_isAsynchronous(c.kind)) t.openChallenges -= 1;
    }

    /// @dev Upheld: the challenger gets its bond back plus its share of what was slashed (the
    /// slash is already in the reward pool).
    function _uphold(uint256 challengeId, uint256 slashed) internal {
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
    function _reject(uint256 challengeId, Challenge storage c) internal {
        _close(c, ChallengeStatus.Rejected);
        emit ChallengeResolved(challengeId, c.taskId, ChallengeStatus.Rejected, 0, 0);
    }

    /// @dev Expired (nobody decided in time, or the round was voided by another proof): bond back.
    function _expire(uint256 challengeId, Challenge storage c) internal {
        _close(c, ChallengeStatus.Expired);
        _credit(c.taskId, c.challenger, c.bond, REASON_BOND);
        emit ChallengeResolved(challengeId, c.taskId, ChallengeStatus.Expired, 0, 0);
    }

    // ------------------------------------------------------------------ consequences

    /// @dev A proven trainer fault: slashes the trainer's whole remaining stake, evicts it
    /// (rebalancing shards while the run is running) and revokes its reward for `round`.
    function _convictTrainer(uint256 taskId, uint32 round, uint16 fragment, address trainer)
        internal
        returns (uint256 slashed)
    {
        TrainerRecord storage r = _trainerRecords[taskId][trainer];
        slashed = _slash(taskId, trainer, r.stake);
        if (!r.evicted) {
            _markEvicted(taskId, trainer, round);
            TaskState storage t = _tasks[taskId];
            if (t.status == TaskStatus.Running && t.active > 0) {
                _assignShards(taskId, _specs[taskId].shardCount);
                _completedByEviction(taskId, t, r.fragment);
            }
        }
        _revokeReward(taskId, round, fragment);
    }

    /// @dev A trainer evicted while its run is running: if it was the last active trainer still
    /// to commit in the open round, that round's work is now complete (`RoundWorkComplete`).
    /// (An eviction for missed rounds happens while a round closes, and completes nothing.)
    function _completedByEviction(uint256 taskId, TaskState storage t, uint16 fragment) internal {
        uint32 open = t.currentRound;
        uint256 committed = _rounds[taskId][open].committedMask;
        if (committed & (uint256(1) << fragment) != 0) return; // it had committed: nothing changes
        if (_workComplete(taskId, committed)) emit RoundWorkComplete(taskId, open, committed);
    }

    /// @dev Takes back an accepted submission's weight (its share of the pool at seal).
    function _revokeReward(uint256 taskId, uint32 round, uint16 fragment) internal {
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
    function _convictRound(uint256 taskId, uint32 round, bytes32 result) internal returns (uint256 slashed) {
        address[] storage witnesses = _specs[taskId].witnesses;
        for (uint256 i = 0; i < witnesses.length; ++i) {
            if (_votes[taskId][round][witnesses[i]] == result) slashed += _slashWitness(taskId, witnesses[i]);
        }
        _invalidateFrom(taskId, round);
    }

    /// @dev Voids `round` and every round finalized after it (their rewards and witness fees are
    /// reversed) and rolls the task's state root back to `round`'s previous state root. A running
    /// run carries on from that root; a completed one seals with it. The voiding runs in batches
    /// of `INVALIDATION_BATCH` rounds: this call does the first, `continueInvalidation` the rest,
    /// and the rollback counts as an open challenge (the seal waits for it) until it is done.
    /// A rollback from an earlier round while one is pending widens it; rounds inside a pending
    /// rollback already count as void (`_isVoid`), so no later round can be convicted there.
    function _invalidateFrom(uint256 taskId, uint32 round) internal {
        TaskState storage t = _tasks[taskId];
        uint32 end = t.status == TaskStatus.Running ? t.currentRound : _specs[taskId].rounds;
        Invalidation storage inv = _invalidations[taskId];
        if (inv.next == inv.end) {
            // INVARIANT: a pending rollback holds exactly one `openChallenges` count.
            t.openChallenges += 1;
            inv.from = round;
            inv.next = round;
            inv.end = end;
        } else {
            // Rounds in the pending range count as void (`_isVoid`); a round after it built on
            // the restored root, and voiding it needs a second range: finish this one first.
            if (round >= inv.end) revert SynclineInvalidationPending(taskId, inv.next, inv.end);
            inv.from = round;
            inv.next = round;
            if (end > inv.end) inv.end = end;
        }
        bytes32 restored = _rounds[taskId][round].prevStateRoot;
        t.stateRoot = restored;
        emit RoundsInvalidated(taskId, round, end - 1, restored);
        _continueInvalidation(taskId, t, inv);
    }

    /// @dev Voids up to `INVALIDATION_BATCH` rounds of the pending rollback.
    function _continueInvalidation(uint256 taskId, TaskState storage t, Invalidation storage inv) internal {
        TaskSpec storage spec = _specs[taskId];
        uint32 r = inv.next;
        uint32 end = inv.end;
        uint32 stop = end - r > INVALIDATION_BATCH ? r + INVALIDATION_BATCH : end;
        for (; r < stop; ++r) {
            RoundRecord storage rr = _rounds[taskId][r];
            if (rr.status == RoundStatus.Finalized) _voidRound(taskId, t, spec, rr, r);
        }
        inv.next = r;
        if (r == end) t.openChallenges -= 1;
        emit InvalidationProgressed(taskId, r, end);
    }

    /// @dev Whether `round` is void: invalidated, or inside a rollback still being carried out.
    function _isVoid(uint256 taskId, uint32 round) internal view returns (bool) {
        Invalidation storage inv = _invalidations[taskId];
        return _rounds[taskId][round].status != RoundStatus.Finalized
            || (inv.next != inv.end && round >= inv.from && round < inv.end);
    }

    function _voidRound(uint256 taskId, TaskState storage t, TaskSpec storage spec, RoundRecord storage rr, uint32 r)
        internal
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
