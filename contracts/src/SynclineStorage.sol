// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {ISynclineEvents} from "./ISynclineEvents.sol";
import {
    TaskSpec,
    TaskState,
    TaskStatus,
    TrainerRecord,
    WitnessRecord,
    Submission,
    RoundRecord,
    Commitment,
    Vote,
    Challenge
} from "./SynclineTypes.sol";
import {ShardAssignment} from "./libraries/ShardAssignment.sol";
import {TierPolicy} from "./libraries/TierPolicy.sol";

/// @title SynclineStorage
/// @notice The one storage layout of the Syncline market, shared by `SynclineMarket` and the
/// `SynclineCourt` module it delegates challenge calls to, plus the internal helpers both need
/// (task lookup, credits, slashing, eviction, EIP-712 signer recovery).
/// @dev Every state variable of the market lives here and nowhere else, so the market and the
/// court (run by `delegatecall`) always agree on slots. Money invariant, per task:
/// `escrowOf = rewardPool + feeBudget + feesEarned + stakeHeld + bondsHeld`, and
/// `address(this).balance == sum of escrowOf + sum of credits`.
abstract contract SynclineStorage is ISynclineEvents, ReentrancyGuard, EIP712 {
    /// @notice Most trainers a task may have (fragment masks are uint256, eviction loops are bounded).
    uint16 public constant MAX_TRAINERS = 64;
    /// @notice Most witnesses a task may have.
    uint256 public constant MAX_WITNESSES = 32;
    /// @dev Round durations a round's commit deadline extends by, once, when nobody committed
    /// (internal: no getter, the market is at its size limit; `commitDeadline` answers).
    uint64 internal constant ROUND_EXTENSION = 3;
    /// @notice Longest round duration, grace window, challenge window or enrollment period.
    uint64 public constant MAX_WINDOW = 365 days;
    /// @notice The shortest challenge window a task may set. An accused trainer answers a claim
    /// within half of it (5 minutes at the minimum), and the committee escalates an undelivered
    /// spot check half of it after the round closed: long enough for an honest agent behind a GC
    /// pause, a slow disk, a restart or a congested mempool, and for checkpoints of a large model
    /// to be uploaded. A devnet demo passes it quickly with a fast clock (`DevnetClock`), never by
    /// a shorter window.
    /// (internal: the modules are at their size limit; `docs/protocol.md` states the value.)
    uint64 internal constant MIN_CHALLENGE_WINDOW = 10 minutes;
    /// @notice The same minimum in blocks (10 minutes of 12-second slots). Every window an honest
    /// party must meet stays open until its time AND its blocks have passed: the filing window
    /// (`MIN_CHALLENGE_BLOCKS` blocks past the round's close), a response window (an accused's
    /// answer, an availability demand: half of it). A block producer who skews timestamps forward
    /// cannot close a window on an agent faster than the chain makes blocks.
    uint64 internal constant MIN_CHALLENGE_BLOCKS = 50;
    /// @notice Share of a proven fault's slash paid to the challenger, in basis points; the rest
    /// goes to the task's reward pool.
    uint256 public constant CHALLENGER_SHARE_BPS = 5_000;

    bytes32 internal constant REASON_REWARD = "reward";
    bytes32 internal constant REASON_STAKE = "stake-refund";
    bytes32 internal constant REASON_FEE = "witness-fee";
    bytes32 internal constant REASON_SPONSOR = "sponsor-refund";
    bytes32 internal constant REASON_BOND = "bond-refund";
    bytes32 internal constant REASON_BOUNTY = "challenge-bounty";
    bytes32 internal constant REASON_FORFEIT = "forfeited-bond";

    bytes32 internal constant COMMITMENT_TYPEHASH = keccak256(
        "Commitment(uint256 taskId,uint32 round,uint16 fragment,bytes32 payloadHash,bytes32 chunkRoot,bytes32 checkpointRoot,string uri)"
    );
    bytes32 internal constant VOTE_TYPEHASH = keccak256(
        "Vote(uint256 taskId,uint32 round,bytes32 prevStateRoot,bytes32 stateRoot,bytes32 aggregateRoot,uint256 acceptedMask,uint256 metric)"
    );

    /// @dev A committee member's verdict on a training-fraud challenge (`None`: not voted).
    /// `Guilty` / `Innocent` are replay verdicts (final); `Unavailable` (issue 27) says the
    /// answered segment's data is absent from the task's blob store, and is replaced by a replay
    /// verdict if the data shows up before the deadline.
    enum RefereeVerdict {
        None,
        Guilty,
        Innocent,
        Unavailable
    }

    // ------------------------------------------------------------------ storage (never reorder)

    uint256 internal _taskCount;
    mapping(uint256 taskId => TaskSpec) internal _specs;
    mapping(uint256 taskId => TaskState) internal _tasks;
    mapping(uint256 taskId => mapping(address witness => bool)) internal _isWitness;
    mapping(uint256 taskId => mapping(address witness => WitnessRecord)) internal _witnessRecords;
    mapping(uint256 taskId => mapping(address trainer => TrainerRecord)) internal _trainerRecords;
    mapping(uint256 taskId => address[]) internal _trainersByFragment;
    mapping(address account => uint256) internal _credits;

    mapping(uint256 taskId => mapping(uint32 round => RoundRecord)) internal _rounds;
    mapping(uint256 taskId => mapping(uint32 round => mapping(uint16 fragment => Submission))) internal _submissions;
    mapping(uint256 taskId => mapping(uint32 round => mapping(bytes32 result => uint16))) internal _tally;
    mapping(uint256 taskId => mapping(uint32 round => mapping(address witness => bytes32))) internal _votes;

    /// @dev Challenges by id (ids start at 1).
    uint256 internal _challengeCount;
    mapping(uint256 challengeId => Challenge) internal _challenges;
    /// @dev Fault key (what a challenge claims: its kind and slot, see `SynclineCourt`) =>
    /// challenge id that claimed it; rejects duplicates.
    mapping(bytes32 faultKey => uint256 challengeId) internal _faults;
    /// @dev Referee verdicts on training-fraud challenges (a rejection pays the innocent voters).
    mapping(uint256 challengeId => mapping(address witness => RefereeVerdict)) internal _refereeVerdicts;

    // ------------------------------------------------------------------ appended (issue 10)

    /// @dev A proven round fault's rollback, voided in bounded batches: rounds `[next, end)` are
    /// still to be voided (`next == end`: nothing pending); `from` is the earliest voided round.
    struct Invalidation {
        uint32 from;
        uint32 next;
        uint32 end;
    }

    /// @dev A data-availability demand on a censorship claim: the accused submission's chunk
    /// `chunkIndex` must be opened by `deadline`. `demanders` voters of the round demanded it.
    /// On a training claim: the accused's response window (`deadline`, `answered`), and
    /// `demanders` counts the referees whose standing verdict is `Unavailable`.
    struct AvailabilityDemand {
        uint64 deadline;
        uint32 chunkIndex;
        uint16 demanders;
        bool answered;
        /// The window also lasts until this block (`MIN_CHALLENGE_BLOCKS / 2` past its opening).
        uint64 deadlineBlock;
    }

    /// @dev Pending (or last) rollback per task.
    mapping(uint256 taskId => Invalidation) internal _invalidations;
    /// @dev Data-availability demand per censorship claim.
    mapping(uint256 challengeId => AvailabilityDemand) internal _demands;
    /// @dev Voters that demanded availability on a censorship claim.
    mapping(uint256 challengeId => mapping(address witness => bool)) internal _demanded;

    // ------------------------------------------------------------------ appended (issue 12)

    /// @dev Fragments of the task's active (enrolled, non-evicted) trainers: set at enrollment,
    /// cleared at eviction. A round's work is complete once it is a subset of the round's
    /// `committedMask` (`_workComplete`), which lets the round close before its deadline.
    mapping(uint256 taskId => uint256 mask) internal _activeMask;

    // ------------------------------------------------------------------ appended (issue 15)

    /// @dev A Confidential task's attestation policy (`configureConfidential`) and its current
    /// sealed-data manifest (`installSealedManifest`; `manifestVersion` 0: none installed).
    struct ConfidentialConfig {
        address verifier;
        uint32 manifestVersion;
        bytes32 manifestHash;
        string manifestURI;
        bytes32[] measurements;
    }

    /// @dev An admitted enclave: the X25519 public key sealed data is wrapped to, and the
    /// measurement the attestation report bound it to.
    struct Enclave {
        bytes32 pubkey;
        bytes32 measurement;
    }

    /// @dev Attestation policy and sealed manifest per Confidential task.
    mapping(uint256 taskId => ConfidentialConfig) internal _confidential;
    /// @dev Measurements on a task's allow-list (the same set as `_confidential[taskId].measurements`).
    mapping(uint256 taskId => mapping(bytes32 measurement => bool)) internal _measurementAllowed;
    /// @dev Admitted enclave per (task, trainer or witness account).
    mapping(uint256 taskId => mapping(address account => Enclave)) internal _enclaves;
    /// @dev Account an enclave key was admitted for, per task: one enclave serves one account.
    mapping(uint256 taskId => mapping(bytes32 enclavePubkey => address account)) internal _enclaveHolder;

    /// @dev The EIP-712 domain is ("Syncline", "1", chain id, this market). The court module runs
    /// by delegatecall, so `address(this)` is the market there too.
    constructor() EIP712("Syncline", "1") {}

    // ------------------------------------------------------------------ task lookup

    function _requireTask(uint256 taskId) internal view returns (TaskState storage t) {
        t = _tasks[taskId];
        if (t.status == TaskStatus.None) revert SynclineUnknownTask(taskId);
    }

    function _requireStatus(uint256 taskId, TaskStatus required) internal view returns (TaskState storage t) {
        t = _requireTask(taskId);
        if (t.status != required) revert SynclineWrongTaskStatus(taskId, t.status, required);
    }

    // ------------------------------------------------------------------ money

    /// @dev Moves `amount` from a task's obligations (already decremented by the caller) into `account`'s credit.
    function _credit(uint256 taskId, address account, uint256 amount, bytes32 reason) internal {
        if (amount == 0) return;
        _credits[account] += amount;
        emit Credited(taskId, account, amount, reason);
    }

    /// @dev Moves `amount` (capped at the remaining stake) of a trainer's stake into the reward pool.
    function _slash(uint256 taskId, address trainer, uint256 amount) internal returns (uint256 slashed) {
        TrainerRecord storage r = _trainerRecords[taskId][trainer];
        slashed = amount > r.stake ? r.stake : amount;
        if (slashed == 0) return 0;
        TaskState storage t = _tasks[taskId];
        // casting to 'uint128' is safe because slashed <= r.stake, which is a uint128
        // forge-lint: disable-next-line(unsafe-typecast)
        r.stake -= uint128(slashed);
        // forge-lint: disable-next-line(unsafe-typecast)
        r.slashed += uint128(slashed);
        t.stakeHeld -= slashed;
        t.rewardPool += slashed;
        emit StakeSlashed(taskId, trainer, slashed, r.stake);
    }

    /// @dev Moves a witness's whole remaining bond into the reward pool.
    function _slashWitness(uint256 taskId, address witness) internal returns (uint256 slashed) {
        WitnessRecord storage w = _witnessRecords[taskId][witness];
        slashed = w.bond;
        if (slashed == 0) return 0;
        TaskState storage t = _tasks[taskId];
        w.bond = 0;
        // casting to 'uint128' is safe because slashed was a uint128 bond
        // forge-lint: disable-next-line(unsafe-typecast)
        w.slashed += uint128(slashed);
        t.bondsHeld -= slashed;
        t.rewardPool += slashed;
        emit WitnessSlashed(taskId, witness, slashed);
    }

    // ------------------------------------------------------------------ trainers

    /// @dev Enrolls `msg.sender` with `msg.value` as its stake (checks and effects of `enroll`,
    /// shared with `enrollAttested`); the enrollment that reaches `maxTrainers` starts the run.
    function _enroll(uint256 taskId) internal returns (uint16 fragment) {
        TaskState storage t = _requireStatus(taskId, TaskStatus.Enrolling);
        TaskSpec storage spec = _specs[taskId];
        if (block.timestamp > spec.enrollmentDeadline) {
            revert SynclineEnrollmentClosed(taskId, spec.enrollmentDeadline);
        }
        if (msg.value != spec.trainerStake) revert SynclineWrongStake(msg.value, spec.trainerStake);
        if (_isWitness[taskId][msg.sender]) revert SynclineWitnessCannotTrain(taskId, msg.sender);
        TrainerRecord storage r = _trainerRecords[taskId][msg.sender];
        if (r.enrolled) revert SynclineAlreadyEnrolled(taskId, msg.sender);

        fragment = t.enrolled;
        r.enrolled = true;
        r.fragment = fragment;
        r.stake = spec.trainerStake;
        t.enrolled = fragment + 1;
        t.active = fragment + 1;
        t.stakeHeld += msg.value;
        _activeMask[taskId] |= uint256(1) << fragment;
        _trainersByFragment[taskId].push(msg.sender);
        emit TrainerEnrolled(taskId, msg.sender, fragment, msg.value);

        if (t.enrolled == spec.maxTrainers) _startRun(taskId, t, spec);
    }

    /// @dev Starts the run: assigns the shards and opens round 0.
    function _startRun(uint256 taskId, TaskState storage t, TaskSpec storage spec) internal {
        t.status = TaskStatus.Running;
        t.roundOpenedAt = uint64(block.timestamp);
        emit RunStarted(taskId, t.enrolled, spec.initialStateRoot);
        _assignShards(taskId, spec.shardCount);
        emit RoundOpened(taskId, 0, uint64(block.timestamp), uint64(block.timestamp) + spec.roundDuration);
    }

    /// @dev Splits the shards over the non-evicted trainers in fragment order and emits the assignment.
    function _assignShards(uint256 taskId, uint256 shardCount) internal {
        address[] storage trainers = _trainersByFragment[taskId];
        uint256 active = _tasks[taskId].active;
        uint256 position = 0;
        for (uint256 i = 0; i < trainers.length; ++i) {
            TrainerRecord storage r = _trainerRecords[taskId][trainers[i]];
            if (r.evicted) continue;
            uint256 mask = ShardAssignment.maskFor(shardCount, active, position++);
            r.shardMask = mask;
            emit ShardsAssigned(taskId, trainers[i], r.fragment, mask);
        }
    }

    /// @dev Marks a trainer evicted (no slash) and drops it from the active set. The caller
    /// slashes and rebalances shards.
    function _markEvicted(uint256 taskId, address trainer, uint32 round) internal {
        TrainerRecord storage r = _trainerRecords[taskId][trainer];
        r.evicted = true;
        r.shardMask = 0;
        _tasks[taskId].active -= 1;
        _activeMask[taskId] &= ~(uint256(1) << r.fragment);
        emit TrainerEvicted(taskId, trainer, round);
    }

    /// @dev Whether every active trainer of the task is in `committedMask` (and at least one is
    /// active): the open round's work is complete. O(1): one mask, no loop over trainers.
    function _workComplete(uint256 taskId, uint256 committedMask) internal view returns (bool) {
        uint256 active = _activeMask[taskId];
        return active != 0 && active & ~committedMask == 0;
    }

    /// @dev The open round's commit deadline: `roundOpenedAt + roundDuration`, extended once, to
    /// `ROUND_EXTENSION` more round durations, when nobody committed by then (a machine too slow
    /// for the round, not one lazy trainer). Once extended it stays so: every commit after the
    /// first deadline is late (`lateMask`), so none is on time.
    function _commitDeadline(TaskState storage t, uint64 roundDuration, RoundRecord storage rr)
        internal
        view
        returns (uint64 deadline)
    {
        // unchecked: a timestamp plus at most (1 + ROUND_EXTENSION) * MAX_WINDOW fits in 64 bits.
        unchecked {
            deadline = t.roundOpenedAt + roundDuration;
            if (block.timestamp > deadline && rr.committedMask & ~rr.lateMask == 0) {
                deadline += ROUND_EXTENSION * roundDuration;
            }
        }
    }

    /// @dev Evicts a trainer for missed rounds: slashes `evictionSlashBps` of its stake into the
    /// reward pool. The rest of its stake stays bonded until the run seals. The caller rebalances.
    function _evict(uint256 taskId, address trainer, uint32 round) internal {
        _markEvicted(taskId, trainer, round);
        uint256 amount =
            (uint256(_trainerRecords[taskId][trainer].stake) * _specs[taskId].evictionSlashBps) / TierPolicy.BPS;
        _slash(taskId, trainer, amount);
    }

    // ------------------------------------------------------------------ signatures

    /// @dev EIP-712 digest of a trainer commitment (the `string uri` member is hashed, per EIP-712).
    function _commitmentDigest(Commitment calldata c) internal view returns (bytes32) {
        return _hashTypedDataV4(
            keccak256(
                abi.encode(
                    COMMITMENT_TYPEHASH,
                    c.taskId,
                    c.round,
                    c.fragment,
                    c.payloadHash,
                    c.chunkRoot,
                    c.checkpointRoot,
                    keccak256(bytes(c.uri))
                )
            )
        );
    }

    /// @dev EIP-712 digest of a witness vote.
    function _voteDigest(Vote calldata v) internal view returns (bytes32) {
        return _hashTypedDataV4(
            keccak256(
                abi.encode(
                    VOTE_TYPEHASH,
                    v.taskId,
                    v.round,
                    v.prevStateRoot,
                    v.stateRoot,
                    v.aggregateRoot,
                    v.acceptedMask,
                    v.metric
                )
            )
        );
    }

    /// @dev Signer of `digest`; reverts `SynclineBadSignature` for a malformed or malleable signature.
    function _recover(bytes32 digest, bytes calldata signature) internal pure returns (address signer) {
        (address recovered, ECDSA.RecoverError err,) = ECDSA.tryRecover(digest, signature);
        if (err != ECDSA.RecoverError.NoError || recovered == address(0)) revert SynclineBadSignature();
        return recovered;
    }

    // ------------------------------------------------------------------ bits

    /// @dev Index of the lowest set bit of a non-zero mask (masks are fragment sets).
    function _lowestBit(uint256 mask) internal pure returns (uint16 index) {
        // unchecked: mask != 0, so index stays below 256.
        unchecked {
            while (mask & 1 == 0) {
                mask >>= 1;
                ++index;
            }
        }
    }

    /// @dev Opens a response window of half the task's challenge window (and half the minimum
    /// in blocks) from now.
    function _openResponse(AvailabilityDemand storage d, uint256 taskId) internal {
        d.deadline = uint64(block.timestamp) + _specs[taskId].challengeWindow / 2;
        d.deadlineBlock = uint64(block.number) + MIN_CHALLENGE_BLOCKS / 2;
    }

    /// @dev Whether a response window still runs: until its time AND its blocks have passed.
    function _responseOpen(AvailabilityDemand storage d) internal view returns (bool) {
        return block.timestamp <= d.deadline || block.number <= d.deadlineBlock;
    }
}
