// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @notice Trust tier of a run. It gates which aggregation rules the run may use.
enum Tier {
    Open,
    Verified,
    Confidential
}

/// @notice Aggregation rule the witness committee applies to the trainers' outer gradients.
/// @dev The numeric values are part of the protocol: the Python library uses the same ones.
enum AggregationRule {
    Mean,
    TrimmedMean,
    CoordinateMedian,
    Krum,
    MultiKrum,
    CenteredClip
}

/// @notice What kind of data the run trains on.
enum Modality {
    Language,
    TimeSeries,
    Vision
}

/// @notice Life cycle of a task.
/// @dev Enrolling -> Running -> AwaitingSeal -> Sealed, or Enrolling -> Cancelled.
enum TaskStatus {
    None,
    Enrolling,
    Running,
    AwaitingSeal,
    Sealed,
    Cancelled
}

/// @notice Life cycle of one sync round.
enum RoundStatus {
    Pending,
    Finalized,
    CarriedForward,
    /// A proven aggregation or censorship fault (or a fault in an earlier round) voided the result.
    Invalidated
}

/// @notice The faults a challenger can prove.
enum ChallengeKind {
    TrainerEquivocation,
    WitnessEquivocation,
    AggregationFraud,
    Censorship,
    TrainingFraud
}

/// @notice Life cycle of a challenge. Equivocation and aggregation proofs resolve in their own
/// transaction (Upheld); censorship waits for a defence, training fraud for the referees' votes.
enum ChallengeStatus {
    None,
    Open,
    Upheld,
    Rejected,
    Expired
}

/// @notice The on-chain part of a `TrainingTaskSpec`. The whole spec is a content-addressed
/// artifact whose keccak256 is `specHash`; these are the fields the contract enforces.
struct TaskSpec {
    bytes32 specHash;
    string specURI;
    bytes32 modelHash;
    bytes32 datasetRoot;
    bytes32 initialStateRoot;
    Modality modality;
    Tier tier;
    AggregationRule rule;
    /// TrimmedMean: fraction trimmed from each side in basis points; Krum/MultiKrum: f;
    /// CenteredClip: clipping radius (fixed point, protocol scale). Unused for Mean/CoordinateMedian.
    uint32 ruleParam;
    uint16 shardCount;
    uint32 innerSteps;
    uint32 rounds;
    uint64 roundDuration;
    uint64 graceWindow;
    uint64 challengeWindow;
    uint64 enrollmentDeadline;
    uint128 trainerStake;
    uint16 minTrainers;
    uint16 maxTrainers;
    uint16 maxMissedRounds;
    uint16 evictionSlashBps;
    uint8 threshold;
    uint128 witnessFee;
    /// Outer Nesterov optimizer, parts per million (0.7 -> 700000).
    uint32 outerLrPpm;
    uint32 outerMomentumPpm;
    /// Bits per quantized outer-gradient coordinate (8 or 16).
    uint8 gradientBits;
    /// Number of model parameters; the chunk trees have ceil(paramCount / 256) leaves.
    uint64 paramCount;
    /// Inner steps between committed checkpoints (1..innerSteps) for training-fraud proofs.
    uint32 checkpointInterval;
    /// Bond every witness posts before it may vote; slashed on a proven witness fault.
    uint128 witnessBond;
    /// Bond a challenger posts with each challenge; returned when the fault is proven.
    uint128 challengeBond;
    /// Rate of the committee's public spot-check draw, parts per million (1..1_000_000): a
    /// submission is drawn iff its 64-bit draw is below floor(spotCheckPpm * 2^64 / 1e6).
    /// `postTask` requires `trainerStake * spotCheckPpm >= 2 * rewardPerSubmission * 1e6`.
    uint32 spotCheckPpm;
    address[] witnesses;
}

/// @notice Mutable state of a task.
struct TaskState {
    address sponsor;
    TaskStatus status;
    uint16 enrolled;
    uint16 active;
    uint32 currentRound;
    uint32 roundsFinalized;
    uint32 roundsCarried;
    uint64 roundOpenedAt;
    uint64 lastClosedAt;
    bytes32 stateRoot;
    /// Reward escrow plus stake slashed into the pool.
    uint256 rewardPool;
    /// Witness fees escrowed and not yet earned.
    uint256 feeBudget;
    /// Witness fees earned and not yet credited (credited at seal).
    uint256 feesEarned;
    /// Trainer stakes held by the contract for this task.
    uint256 stakeHeld;
    /// Sum over trainers of accepted submissions weighted by fragment size.
    uint256 totalWeight;
    /// What the sponsor got back when the task was sealed or cancelled.
    uint256 sponsorRefund;
    /// The reward pool (escrow plus slashes) that sealing distributed.
    uint256 sealedPool;
    /// Witness bonds and open challenge bonds held for this task.
    uint256 bondsHeld;
    /// Challenges still waiting for a defence or the referees; the task cannot seal meanwhile.
    uint32 openChallenges;
    uint32 roundsInvalidated;
    /// The block of `lastClosedAt`: the task seals only after `MIN_CHALLENGE_BLOCKS` more blocks.
    uint64 lastClosedBlock;
}

/// @notice One trainer's standing in one task.
struct TrainerRecord {
    bool enrolled;
    bool evicted;
    uint16 fragment;
    uint32 submitted;
    uint32 accepted;
    uint32 missed;
    uint32 consecutiveMissed;
    uint128 stake;
    uint128 slashed;
    uint256 shardMask;
    uint256 acceptedWeight;
    uint256 reward;
}

/// @notice One witness's standing in one task.
struct WitnessRecord {
    uint32 votes;
    uint32 matched;
    uint32 dissents;
    bool bonded;
    uint128 bond;
    uint128 slashed;
    uint256 fees;
}

/// @notice A trainer's commitment of its outer gradient for one round.
struct Submission {
    address trainer;
    uint16 weight;
    uint64 committedAt;
    bytes32 payloadHash;
    bytes32 chunkRoot;
    /// Merkle root over the hashes of the inner-loop checkpoints (training-fraud proofs).
    bytes32 checkpointRoot;
    string uri;
}

/// @notice EIP-712 message a trainer signs for its round commitment (`Commitment` type): everything
/// a verifier needs to locate and check the submission.
struct Commitment {
    uint256 taskId;
    uint32 round;
    uint16 fragment;
    bytes32 payloadHash;
    bytes32 chunkRoot;
    bytes32 checkpointRoot;
    /// Where the payload can be fetched. Signed, so whoever relays the commitment cannot
    /// substitute another locator (EIP-712 `string`: its keccak256 is hashed into the struct).
    string uri;
}

/// @notice EIP-712 message a witness signs for its round result (`Vote` type).
struct Vote {
    uint256 taskId;
    uint32 round;
    /// The state root the round builds on. The vote counts only while this is the round's
    /// previous root: a rollback (a proven fault in an earlier round) makes it stale.
    bytes32 prevStateRoot;
    bytes32 stateRoot;
    bytes32 aggregateRoot;
    uint256 acceptedMask;
    /// Validation loss x 1e6 of the new state, as the witness measured it (signed, so no
    /// relayer can change it; informational, not part of the result).
    uint256 metric;
}

/// @notice A bonded challenge.
struct Challenge {
    ChallengeKind kind;
    ChallengeStatus status;
    uint16 fragment;
    uint16 guiltyVotes;
    uint16 innocentVotes;
    uint32 round;
    uint32 segment;
    uint64 openedAt;
    uint64 deadline;
    address challenger;
    /// The accused witness (witness equivocation) or trainer (trainer faults); zero for round faults.
    address accused;
    uint256 taskId;
    uint256 bond;
    /// Stake or bond slashed when upheld.
    uint256 slashed;
}

/// @notice Opening of one chunk for an aggregation-fraud proof. `inputChunks[i]` is chunk
/// `chunkIndex` of the i-th accepted submission (ascending fragment order) with its Merkle proof
/// against that submission's chunk root; `prevChunk` opens the round's previous state root and
/// `claimedChunk` its finalized state root. Only coordinates `[lo, hi)` of the chunk are recomputed.
struct AggregationProof {
    uint256 taskId;
    uint32 round;
    uint32 chunkIndex;
    uint16 lo;
    uint16 hi;
    bytes[] inputChunks;
    bytes32[][] inputProofs;
    bytes prevChunk;
    bytes32[] prevProof;
    bytes claimedChunk;
    bytes32[] claimedProof;
}

/// @notice One sync round.
struct RoundRecord {
    RoundStatus status;
    uint16 voteCount;
    uint64 openedAt;
    uint64 closedAt;
    /// The block the round closed in: claims against it may be filed until both
    /// `closedAt + challengeWindow` and `closedBlock + MIN_CHALLENGE_BLOCKS` have passed.
    uint64 closedBlock;
    bytes32 firstVote;
    bytes32 result;
    bytes32 stateRoot;
    bytes32 aggregateRoot;
    uint256 acceptedMask;
    uint256 committedMask;
    /// The state root the round built on (set when it finalizes): aggregation proofs open it.
    bytes32 prevStateRoot;
    /// Accepted submissions whose reward was revoked by a proven trainer fault.
    uint256 revokedMask;
    /// Commitments made after the round's first deadline, within its one extension.
    uint256 lateMask;
}

/// @notice Per-trainer line of a `TrainingReceipt`.
struct TrainerReceipt {
    address trainer;
    uint16 fragment;
    bool evicted;
    uint32 submitted;
    uint32 accepted;
    uint32 missed;
    uint256 acceptedWeight;
    uint256 reward;
    uint256 stakeRefund;
    uint256 slashed;
    /// Commitments made late (after a round's first deadline, within its extension).
    uint32 late;
}

/// @notice Per-witness line of a `TrainingReceipt`.
struct WitnessReceipt {
    address witness;
    uint32 votes;
    uint32 matched;
    uint32 dissents;
    uint256 fees;
    /// Bond posted (refunded at seal minus `slashed`).
    uint256 bond;
    uint256 slashed;
}

/// @notice What a run produced and paid: readable for every task in any status.
struct TrainingReceipt {
    uint256 taskId;
    bytes32 specHash;
    TaskStatus status;
    bytes32 finalStateRoot;
    uint32 roundsTotal;
    uint32 roundsFinalized;
    uint32 roundsCarried;
    uint32 roundsInvalidated;
    uint256 rewardPool;
    uint256 sponsorRefund;
    TrainerReceipt[] trainers;
    WitnessReceipt[] witnesses;
}
