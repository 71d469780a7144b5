// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {
    TaskSpec,
    TaskState,
    RoundRecord,
    TrainerRecord,
    WitnessRecord,
    Commitment,
    Vote
} from "./SynclineTypes.sol";
import {ISynclineEvents} from "./ISynclineEvents.sol";

/// @title Syncline training market
/// @notice A sponsor escrows a reward pool and posts a training task; trainers stake and commit
/// outer gradients each round; a k-of-N witness committee finalizes each round's state root;
/// the run seals and everyone withdraws what it is owed (pull payments).
interface ISynclineMarket is ISynclineEvents {
    // ------------------------------------------------------------------ sponsor
    // `postTask` is served at this address by the court's confidential module (`TaskPosting`,
    // `ISynclineTaskPosting`): the market has no room left under EIP-170.

    /// @notice Cancel a task whose enrollment deadline passed with fewer than `minTrainers`
    /// trainers; the sponsor and every enrolled trainer are refunded in full. Anyone may call.
    function cancelUnderfilled(uint256 taskId) external;

    // ------------------------------------------------------------------ trainers
    /// @notice Enroll in a task by bonding exactly `trainerStake` wei. The run starts
    /// as soon as `maxTrainers` have enrolled. A Confidential task refuses it
    /// (`SynclineUseEnrollAttested`): its trainers enroll with an attestation report through
    /// `ISynclineConfidential.enrollAttested`.
    /// @return fragment The fragment (slot) the trainer commits for.
    function enroll(uint256 taskId) external payable returns (uint16 fragment);

    /// @notice Start a run after its enrollment deadline if at least `minTrainers` enrolled. Anyone may call.
    function startRun(uint256 taskId) external;

    /// @notice Commit a trainer's outer gradient for the open round, before its deadline, once.
    /// The commitment is EIP-712 typed data signed by the trainer holding `c.fragment`; anyone
    /// may relay it (the signer, not `msg.sender`, is the trainer). Everything a verifier needs
    /// to locate and check the submission is signed, so a relayed copy is harmless: sending the
    /// identical commitment again succeeds and changes nothing; a different one reverts.
    /// @param c taskId, round, fragment, payloadHash (keccak256 of the payload blob), chunkRoot
    /// (Merkle root over the payload's chunks), checkpointRoot (Merkle root over the inner-loop
    /// checkpoint hashes), uri (where the blob can be fetched: a locator; the hash is the check).
    /// @param signature The trainer's EIP-712 signature of `c`.
    function commitSubmission(Commitment calldata c, bytes calldata signature) external;

    // ------------------------------------------------------------------ witnesses
    /// @notice Post the exact `witnessBond` of a task; a witness must be bonded before it votes.
    /// The bond is refunded at seal (or cancel) minus anything slashed.
    function bondWitness(uint256 taskId) external payable;

    /// @notice Vote for a round's result after its deadline, or before it once the round's work is
    /// complete: every active (enrolled, non-evicted) trainer has committed (`RoundWorkComplete`),
    /// so nothing more can be committed. `threshold` matching votes finalize.
    /// Idempotent: once finalized, the same result succeeds and changes nothing; a different one
    /// reverts with `ConflictingFinalize`. Before quorum, a differing vote is recorded as dissent.
    /// The vote is EIP-712 typed data signed by a witness of the task; anyone may relay it. It
    /// must build on the round's current previous state root; votes cast before a rollback of
    /// that root stop counting, and their witnesses may vote again on the restored root.
    /// @param v taskId, round, prevStateRoot (the state root the round builds on), stateRoot
    /// (Merkle root of the new fixed-point state), aggregateRoot (Merkle root of the aggregated
    /// outer gradient), acceptedMask (bit i = fragment i accepted), metric (validation loss x 1e6,
    /// informational: not part of the result).
    /// @param signature The witness's EIP-712 signature of `v`.
    function finalizeRound(Vote calldata v, bytes calldata signature) external;

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
    /// @notice Trainers in fragment order.
    function getTrainers(uint256 taskId) external view returns (address[] memory);
    /// @notice One trainer's record.
    function getTrainer(uint256 taskId, address trainer) external view returns (TrainerRecord memory);
    /// @notice One witness's record.
    function getWitness(uint256 taskId, address witness) external view returns (WitnessRecord memory);
    /// @notice Wei the contract holds for a task: reward pool + fee budget + earned fees + stakes.
    function escrowOf(uint256 taskId) external view returns (uint256);
    /// @notice Withdrawable credit of an account.
    function creditOf(address account) external view returns (uint256);
}
