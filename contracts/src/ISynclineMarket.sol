// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {
    TaskSpec,
    TaskState,
    TaskStatus,
    Tier,
    AggregationRule,
    RoundRecord,
    Submission,
    TrainerRecord,
    WitnessRecord,
    TrainingReceipt
} from "./SynclineTypes.sol";

/// @title Syncline training market
/// @notice A sponsor escrows a reward pool and posts a training task; trainers stake and commit
/// outer gradients each round; a k-of-N witness committee finalizes each round's state root;
/// the run seals and everyone withdraws what it is owed (pull payments).
interface ISynclineMarket {
    // ------------------------------------------------------------------ errors: task spec
    /// @notice Threshold k must satisfy 0 < k <= number of witnesses.
    error SynclineInvalidThreshold(uint8 threshold, uint256 witnessCount);
    /// @notice A witness is the zero address.
    error SynclineZeroWitness(uint256 index);
    /// @notice A witness appears twice in the set.
    error SynclineDuplicateWitness(address witness);
    /// @notice A spec field that must be positive is zero (name of the field).
    error SynclineZeroSpecField(string field);
    /// @notice The tier does not admit the aggregation rule.
    error SynclineRuleNotAdmitted(Tier tier, AggregationRule rule);
    /// @notice The rule parameter cannot work with `minTrainers` honest-or-not inputs.
    error SynclineRuleParamInconsistent(AggregationRule rule, uint32 ruleParam, uint16 minTrainers);
    /// @notice minTrainers/maxTrainers/shardCount out of range (shards >= maxTrainers >= minTrainers >= 1, max <= 64).
    error SynclineTrainerBoundsInvalid(uint16 minTrainers, uint16 maxTrainers, uint16 shardCount);
    /// @notice The enrollment deadline is not in the future.
    error SynclineDeadlineInPast(uint64 deadline, uint256 nowTimestamp);
    /// @notice A duration (or the enrollment deadline's distance from now) exceeds `max` seconds;
    /// bounded so that deadline arithmetic can never overflow and lock the escrow.
    error SynclineWindowTooLong(string field, uint256 value, uint256 max);
    /// @notice Slash fraction above 100%.
    error SynclineSlashBpsTooHigh(uint16 bps);
    /// @notice Only 8- or 16-bit gradient quantization is defined.
    error SynclineUnsupportedGradientBits(uint8 bits);
    /// @notice The escrow sent does not cover the witness fee budget plus a positive reward pool.
    error SynclineInsufficientEscrow(uint256 sent, uint256 witnessFeeBudget);

    // ------------------------------------------------------------------ errors: life cycle
    /// @notice No task with this id.
    error SynclineUnknownTask(uint256 taskId);
    /// @notice The task is not in the status the call needs.
    error SynclineWrongTaskStatus(uint256 taskId, TaskStatus status, TaskStatus required);
    /// @notice Enrollment closed at `deadline`.
    error SynclineEnrollmentClosed(uint256 taskId, uint64 deadline);
    /// @notice Enrollment is still open until `deadline`.
    error SynclineEnrollmentStillOpen(uint256 taskId, uint64 deadline);
    /// @notice The stake sent is not exactly the required bond.
    error SynclineWrongStake(uint256 sent, uint256 required);
    /// @notice The caller is already enrolled.
    error SynclineAlreadyEnrolled(uint256 taskId, address trainer);
    /// @notice A witness of the task cannot also train in it.
    error SynclineWitnessCannotTrain(uint256 taskId, address witness);
    /// @notice The task has too few trainers to start (it can only be cancelled).
    error SynclineUnderfilled(uint256 taskId, uint16 enrolled, uint16 minTrainers);
    /// @notice The task has enough trainers: it cannot be cancelled as underfilled.
    error SynclineNotUnderfilled(uint256 taskId, uint16 enrolled, uint16 minTrainers);

    // ------------------------------------------------------------------ errors: rounds
    /// @notice The caller is not an enrolled, non-evicted trainer of the task.
    error SynclineNotActiveTrainer(uint256 taskId, address caller);
    /// @notice The fragment is not the one assigned to the caller.
    error SynclineUnassignedFragment(uint256 taskId, uint16 fragment, address caller);
    /// @notice The call names a round other than the open one.
    error SynclineWrongRound(uint256 taskId, uint32 round, uint32 currentRound);
    /// @notice The round's commit deadline has passed.
    error SynclineSubmissionLate(uint256 taskId, uint32 round, uint64 deadline);
    /// @notice This fragment already committed in this round.
    error SynclineDuplicateSubmission(uint256 taskId, uint32 round, uint16 fragment);
    /// @notice payloadHash and chunkRoot must be non-zero.
    error SynclineEmptyCommitment();
    /// @notice The caller is not in the task's witness set.
    error SynclineNotWitness(uint256 taskId, address caller);
    /// @notice Trainers can still commit until `deadline`.
    error SynclineRoundStillOpen(uint256 taskId, uint32 round, uint64 deadline);
    /// @notice The accepted set names fragments that did not commit.
    error SynclineAcceptedNotCommitted(uint256 taskId, uint32 round, uint256 strayMask);
    /// @notice The state root of a result must be non-zero.
    error SynclineEmptyStateRoot();
    /// @notice Fork detection: the round finalized `finalized`, the caller offered `offered`.
    error ConflictingFinalize(uint32 round, bytes32 finalized, bytes32 offered);
    /// @notice The witness already voted `previous` in this round and cannot change its vote.
    error SynclineAlreadyVoted(uint256 taskId, uint32 round, address witness, bytes32 previous);
    /// @notice The round was carried forward; it takes no more votes.
    error SynclineRoundCarriedForward(uint256 taskId, uint32 round);
    /// @notice Carry-forward is possible only once the grace window has ended, strictly after `earliest`
    /// (= round deadline + grace window), like finalize is only possible strictly after the deadline.
    error SynclineGraceWindowOpen(uint256 taskId, uint32 round, uint64 earliest);

    // ------------------------------------------------------------------ errors: settlement
    /// @notice Sealing waits for the last round's challenge window to end at `until`.
    error SynclineChallengeWindowOpen(uint256 taskId, uint64 until);
    /// @notice The caller has no credit to withdraw.
    error SynclineNothingToWithdraw(address account);
    /// @notice Sending the credit failed; the credit was restored.
    error SynclineWithdrawFailed(address account, uint256 amount);

    // ------------------------------------------------------------------ events
    /// @notice A sponsor posted a task and escrowed `rewardPool + witnessFeeBudget`.
    event TaskPosted(
        uint256 indexed taskId,
        address indexed sponsor,
        bytes32 specHash,
        string specURI,
        uint256 rewardPool,
        uint256 witnessFeeBudget
    );
    /// @notice A trainer bonded its stake and got fragment `fragment`.
    event TrainerEnrolled(uint256 indexed taskId, address indexed trainer, uint16 fragment, uint256 stake);
    /// @notice Shards assigned to a trainer (bit i of `shardMask` = shard i); emitted at start and on rebalance.
    event ShardsAssigned(uint256 indexed taskId, address indexed trainer, uint16 fragment, uint256 shardMask);
    /// @notice The run started with `trainers` trainers; round 0 is open.
    event RunStarted(uint256 indexed taskId, uint16 trainers, bytes32 initialStateRoot);
    /// @notice A round opened; trainers commit until `deadline`.
    event RoundOpened(uint256 indexed taskId, uint32 indexed round, uint64 openedAt, uint64 deadline);
    /// @notice A trainer committed its outer gradient for a round.
    event SubmissionCommitted(
        uint256 indexed taskId,
        uint32 indexed round,
        uint16 indexed fragment,
        address trainer,
        bytes32 payloadHash,
        bytes32 chunkRoot,
        string uri,
        uint16 weight
    );
    /// @notice A witness voted for `result` = keccak256(abi.encode(stateRoot, aggregateRoot, acceptedMask)).
    /// `metric` (e.g. validation loss x 1e6) travels with the vote but is not part of the result.
    event VoteCast(
        uint256 indexed taskId,
        uint32 indexed round,
        address indexed witness,
        bytes32 result,
        bytes32 stateRoot,
        uint256 metric
    );
    /// @notice A vote differed from the first vote of the round.
    event DissentRecorded(uint256 indexed taskId, uint32 indexed round, address indexed witness, bytes32 result, bytes32 firstVote);
    /// @notice k matching votes finalized the round.
    event RoundFinalized(
        uint256 indexed taskId,
        uint32 indexed round,
        bytes32 result,
        bytes32 stateRoot,
        bytes32 aggregateRoot,
        uint256 acceptedMask
    );
    /// @notice No quorum within the grace window: the round closed with the previous state root.
    event RoundCarriedForward(uint256 indexed taskId, uint32 indexed round, bytes32 stateRoot, address caller);
    /// @notice A trainer missed a round (it did not commit).
    event RoundMissed(uint256 indexed taskId, uint32 indexed round, address indexed trainer, uint32 consecutive);
    /// @notice A trainer was evicted for missing more than `maxMissedRounds` consecutive rounds.
    event TrainerEvicted(uint256 indexed taskId, address indexed trainer, uint32 round);
    /// @notice Stake was slashed from `offender` into the task's reward pool.
    event StakeSlashed(uint256 indexed taskId, address indexed offender, uint256 amount, uint256 remainingStake);
    /// @notice The last round closed; the run waits for its challenge window, then can be sealed.
    event RunCompleted(uint256 indexed taskId, bytes32 finalStateRoot, uint64 challengeWindowEnds);
    /// @notice The run sealed; rewards, fees and stake refunds were credited.
    event TaskSealed(uint256 indexed taskId, bytes32 finalStateRoot, uint256 rewardsPaid, uint256 feesPaid, uint256 sponsorRefund);
    /// @notice The task never filled; everyone was refunded.
    event TaskCancelled(uint256 indexed taskId, uint16 enrolled, uint256 sponsorRefund);
    /// @notice `amount` was added to `account`'s withdrawable credit.
    event Credited(uint256 indexed taskId, address indexed account, uint256 amount, bytes32 reason);
    /// @notice `account` withdrew `amount`.
    event Withdrawn(address indexed account, uint256 amount);

    // ------------------------------------------------------------------ sponsor
    /// @notice Post a task and escrow its reward pool plus the witness fee budget
    /// (`witnessFee * threshold * rounds`); everything above the budget is the reward pool.
    /// @param spec The on-chain fields of the task spec.
    /// @return taskId The new task's id (ids start at 1).
    function postTask(TaskSpec calldata spec) external payable returns (uint256 taskId);

    /// @notice Cancel a task whose enrollment deadline passed with fewer than `minTrainers`
    /// trainers; the sponsor and every enrolled trainer are refunded in full. Anyone may call.
    function cancelUnderfilled(uint256 taskId) external;

    // ------------------------------------------------------------------ trainers
    /// @notice Enroll in a task by bonding exactly `trainerStake` wei. The run starts
    /// as soon as `maxTrainers` have enrolled.
    /// @return fragment The fragment (slot) the trainer commits for.
    function enroll(uint256 taskId) external payable returns (uint16 fragment);

    /// @notice Start a run after its enrollment deadline if at least `minTrainers` enrolled. Anyone may call.
    function startRun(uint256 taskId) external;

    /// @notice Commit the caller's outer gradient for the open round, before its deadline, once.
    /// @param round The open round.
    /// @param fragment The caller's fragment.
    /// @param payloadHash keccak256 of the payload blob (safetensors bytes).
    /// @param chunkRoot Merkle root over the payload's fixed-size chunks.
    /// @param uri Where the blob can be fetched (a locator only; the hash is the integrity check).
    function commitSubmission(
        uint256 taskId,
        uint32 round,
        uint16 fragment,
        bytes32 payloadHash,
        bytes32 chunkRoot,
        string calldata uri
    ) external;

    // ------------------------------------------------------------------ witnesses
    /// @notice Vote for a round's result after its deadline. `threshold` matching votes finalize.
    /// Idempotent: once finalized, the same result succeeds and changes nothing; a different one
    /// reverts with `ConflictingFinalize`. Before quorum, a differing vote is recorded as dissent.
    /// @param stateRoot Merkle root of the new fixed-point state (weights and momentum).
    /// @param aggregateRoot Merkle root of the aggregated outer gradient.
    /// @param acceptedMask Bit i set = fragment i's submission was accepted.
    /// @param metric Informational (validation loss x 1e6); not part of the result.
    function finalizeRound(
        uint256 taskId,
        uint32 round,
        bytes32 stateRoot,
        bytes32 aggregateRoot,
        uint256 acceptedMask,
        uint256 metric
    ) external;

    /// @notice Close the open round without endorsement once its grace window has passed without
    /// quorum: the previous state root carries forward and the run moves on. Anyone may call.
    function carryForward(uint256 taskId, uint32 round) external;

    // ------------------------------------------------------------------ settlement
    /// @notice Seal a completed run after the last round's challenge window: credit trainers pro rata
    /// to accepted weight, witnesses their earned fees, stakes minus slashing, and the sponsor
    /// what is left. Anyone may call.
    function seal(uint256 taskId) external;

    /// @notice Withdraw the caller's whole credit.
    function withdraw() external;

    // ------------------------------------------------------------------ views
    /// @notice Number of tasks posted so far (the last task id).
    function taskCount() external view returns (uint256);
    /// @notice The on-chain spec of a task.
    function getSpec(uint256 taskId) external view returns (TaskSpec memory);
    /// @notice The mutable state of a task.
    function getTaskState(uint256 taskId) external view returns (TaskState memory);
    /// @notice One round of a task.
    function getRound(uint256 taskId, uint32 round) external view returns (RoundRecord memory);
    /// @notice A fragment's submission in a round (zero trainer = none).
    function getSubmission(uint256 taskId, uint32 round, uint16 fragment) external view returns (Submission memory);
    /// @notice Trainers in fragment order.
    function getTrainers(uint256 taskId) external view returns (address[] memory);
    /// @notice One trainer's record.
    function getTrainer(uint256 taskId, address trainer) external view returns (TrainerRecord memory);
    /// @notice One witness's record.
    function getWitness(uint256 taskId, address witness) external view returns (WitnessRecord memory);
    /// @notice The vote a witness cast in a round (zero = none).
    function voteOf(uint256 taskId, uint32 round, address witness) external view returns (bytes32);
    /// @notice Wei the contract holds for a task: reward pool + fee budget + earned fees + stakes.
    function escrowOf(uint256 taskId) external view returns (uint256);
    /// @notice Withdrawable credit of an account.
    function creditOf(address account) external view returns (uint256);
    /// @notice The `TrainingReceipt` of a task.
    function getReceipt(uint256 taskId) external view returns (TrainingReceipt memory);
}
