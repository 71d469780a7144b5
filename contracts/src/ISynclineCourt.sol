// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Commitment, Vote, Challenge, AggregationProof, Submission, TrainingReceipt} from "./SynclineTypes.sol";
import {ISynclineEvents} from "./ISynclineEvents.sol";

/// @title Syncline fraud court
/// @notice Bonded challenges against a task's trainers and witnesses. Every function is called on
/// the market's address (the market delegates to the court module), and every challenge must be
/// brought within `challengeWindow` of the challenged round's close, before the task seals.
///
/// A proven fault slashes the guilty party's whole remaining stake (trainer) or bond (witness).
/// The challenger is credited its bond plus `CHALLENGER_SHARE_BPS` of the slash; the rest goes to
/// the reward pool. A proven aggregation or censorship fault also invalidates the round and every
/// round finalized after it: their rewards and witness fees are reversed and the task's state root
/// rolls back to the round's previous state root; the run carries on from there. The rounds are
/// voided 32 per call (the ruling, then `continueInvalidation` by anyone), so no call outgrows a
/// block; the pending rollback counts in `openChallenges` and holds the seal until it is done.
/// Each fault can be claimed once (duplicates revert `SynclineDuplicateChallenge`).
interface ISynclineCourt is ISynclineEvents {
    /// @notice Prove that a trainer signed two different commitments for one (task, round, fragment)
    /// (any signed field differs, the uri included).
    /// Slashes and evicts the trainer; revokes its reward for that round if it was accepted.
    /// @dev `msg.value` must equal the task's `challengeBond`.
    function proveTrainerEquivocation(
        Commitment calldata a,
        bytes calldata sigA,
        Commitment calldata b,
        bytes calldata sigB
    ) external payable returns (uint256 challengeId);

    /// @notice Prove that a witness signed two different votes for one (task, round, prevStateRoot)
    /// (any signed field differs, the metric included). Votes on different previous roots are
    /// no equivocation: a rollback lets a witness vote again on the restored root. Slashes its bond.
    function proveWitnessEquivocation(Vote calldata a, bytes calldata sigA, Vote calldata b, bytes calldata sigB)
        external
        payable
        returns (uint256 challengeId);

    /// @notice Prove that a finalized round's state is not the task's rule and outer step applied to
    /// the accepted inputs, by recomputing coordinates `[lo, hi)` of one chunk in exact integer
    /// arithmetic. Mean, TrimmedMean and CoordinateMedian only. Slashes every witness that voted
    /// for the finalized result and invalidates the round onwards.
    /// @dev Every accepted input's whole chunk is opened (its hash is what the Merkle path proves)
    /// and its header and length are checked; quantized values are checked only inside the window,
    /// so a malformed value proves fraud when the window contains it. A round finalized with no
    /// accepted input must keep its previous state: send no openings, and any other state root is
    /// proven wrong.
    function proveAggregationFraud(AggregationProof calldata proof) external payable returns (uint256 challengeId);

    /// @notice Claim that `fragment`'s on-time committed submission was left out of a finalized
    /// round. Opens a defence period of `challengeWindow`. A voter of the finalized result defends
    /// it with `answerCensorship` (a malformed chunk) or `demandAvailability` (the data-availability
    /// sub-game); undefended, `resolveCensorship` upholds it.
    function challengeCensorship(uint256 taskId, uint32 round, uint16 fragment)
        external
        payable
        returns (uint256 challengeId);

    /// @notice Defend an exclusion: open chunk `chunkIndex` of the excluded submission against its
    /// committed chunk root and show it is malformed. Rejects the challenge; its bond goes to the
    /// caller. Only a witness that voted the finalized result may answer, never the claimant.
    function answerCensorship(uint256 challengeId, uint32 chunkIndex, bytes calldata chunk, bytes32[] calldata proof)
        external;

    /// @notice A witness that voted the finalized result (never the claimant) says it could not
    /// get the excluded submission's data: chunk `chunkIndex` of it must be opened against its
    /// chunk root by `answerAvailability` within `challengeWindow / 2` of the first demand (later
    /// demands join the first one's chunk and window, until the claim's deadline). Unanswered,
    /// the claim fails: its bond pays the demanders and the submission is unavailable for good.
    /// Answered (data shown only after the vote, which the chain cannot tell from a voter that
    /// failed to fetch it): the round stands, no voter is slashed or gives up its fee, the trainer
    /// is not credited the round, and the claim expires (bond back; `AvailabilityShownLate`).
    function demandAvailability(uint256 challengeId, uint32 chunkIndex) external;

    /// @notice Open the demanded chunk of the excluded submission (anyone; normally its trainer).
    /// A malformed chunk rejects the claim (bond to the demanders).
    function answerAvailability(uint256 challengeId, bytes calldata chunk, bytes32[] calldata proof) external;

    /// @notice After the defence period (and any response window): unanswered demand -> rejected
    /// (bond to the demanders); no demand -> upheld (slash the voters, roll the round back);
    /// demand answered -> expired, nothing else moves (see `demandAvailability`). Anyone may call.
    function resolveCensorship(uint256 challengeId) external;

    /// @notice Void the next batch of a pending rollback (a proven round fault voids the round and
    /// every later one in batches, so no call outgrows a block). Anyone may call; the seal waits.
    function continueInvalidation(uint256 taskId) external;

    /// @notice Claim that an accepted submission was not produced by honest training: segment
    /// `segment` of its inner loop (or, for `segment == ceil(innerSteps / checkpointInterval)`,
    /// the derivation of the payload from the last checkpoint) does not reproduce the committed
    /// checkpoint. The committee re-executes the segment and votes with `refereeVote`. The accused
    /// must answer (`answerTraining`) within `challengeWindow / 2`, publishing the segment's
    /// checkpoints off chain; unanswered, `expireChallenge` upholds the claim. Answered but not
    /// published, the referees vote `refereeUnavailable` and `expireChallenge` upholds it too.
    function challengeTraining(uint256 taskId, uint32 round, uint16 fragment, uint32 segment)
        external
        payable
        returns (uint256 challengeId);

    /// @notice A committee member's replay verdict on a training challenge, until its deadline.
    /// `threshold` guilty votes slash and evict the trainer at once; `N - threshold + 1` innocent
    /// votes acquit at once (status `Rejected`): each referee with a replay verdict (guilty or
    /// innocent) is paid `bond / (2N)` and the claimant gets the rest back, so it loses at most half
    /// the bond (0.1 ETH bond, N = 3: 0.0166 ETH per referee, 0.0667 ETH back after 2 votes). A
    /// witness whose verdict is `Unavailable` may replace it with a replay verdict; a replay
    /// verdict is final (`SynclineAlreadyRefereed`).
    function refereeVote(uint256 challengeId, bool guilty) external;

    /// @notice A committee member's `Unavailable` verdict: the accused answered, the task's blob
    /// store is reachable and the segment's committed data is absent from it (or its bytes do not
    /// match the committed hash). Only a bonded committee witness with no verdict yet, after the
    /// answer (`SynclineTrainingNotAnswered` before) and until the claim's deadline; replaceable by
    /// a replay verdict through `refereeVote`. At the deadline `expireChallenge` upholds the claim
    /// when guilty + `Unavailable` verdicts reach `threshold`. `availabilityDemand(challengeId)`'s
    /// `demanders` counts the standing `Unavailable` verdicts.
    function refereeUnavailable(uint256 challengeId) external;

    /// @notice The accused trainer answers a training claim: it has published the named segment's
    /// checkpoints (bound by its committed checkpoint root) for the referees. Only the accused, once,
    /// within the response window (`availabilityDemand(challengeId)` gives its deadline).
    function answerTraining(uint256 challengeId) external;

    /// @notice Close a training challenge that cannot be decided otherwise. Unanswered after the
    /// response window: upheld (the trainer withheld the segment; slashed and evicted like a
    /// guilty verdict, `SegmentWithheld`). Answered, after the deadline: upheld when guilty +
    /// `Unavailable` verdicts reach `threshold` (`SegmentUnavailable`: it answered but did not
    /// publish); otherwise expired: each referee with a replay verdict is paid `bond / (2N)` for its
    /// re-execution and the challenger gets the rest back (at least half the bond). Anyone may call.
    function expireChallenge(uint256 challengeId) external;

    /// @notice A censorship claim's availability demand (`deadline` 0: none made), or a training
    /// claim's response window (`deadline`, and `answered` once the accused answered; `demanders`:
    /// its referees' standing `Unavailable` verdicts).
    function availabilityDemand(uint256 challengeId)
        external
        view
        returns (uint64 deadline, uint32 chunkIndex, uint16 demanders, bool answered, uint64 deadlineBlock);

    /// @notice Whether `witness` demanded availability on censorship claim `challengeId`.
    function demandedBy(uint256 challengeId, address witness) external view returns (bool);

    /// @notice The task's rollback: rounds `[next, end)` are still to be voided (pending while
    /// `next < end`), `from` is the round it started at.
    function invalidation(uint256 taskId) external view returns (uint32 from, uint32 next, uint32 end);

    /// @notice A fragment's submission in a round (zero trainer = none). Served by the court
    /// module, like the receipt, to keep the market under the contract size limit.
    function getSubmission(uint256 taskId, uint32 round, uint16 fragment) external view returns (Submission memory);

    /// @notice The vote a witness cast in a round (zero = none). Served by the court module.
    function voteOf(uint256 taskId, uint32 round, address witness) external view returns (bytes32);

    /// @notice Whether the open round `round` of a running task has its work in: every active
    /// (enrolled, non-evicted) trainer committed, so witnesses may finalize it before its deadline
    /// (`RoundWorkComplete`). False for any other round, and while no trainer is active.
    function roundWorkComplete(uint256 taskId, uint32 round) external view returns (bool);

    /// @notice The open round's commit deadline (a running task): `roundOpenedAt + roundDuration`,
    /// or, once that passed with nobody committed, `ROUND_EXTENSION` round durations later (once).
    /// Agents follow this, not their own sum. Served by the court module.
    function commitDeadline(uint256 taskId) external view returns (uint64);

    /// @notice Fragments of the task's active (enrolled, non-evicted) trainers (bit i = fragment i).
    function activeMask(uint256 taskId) external view returns (uint256);

    /// @notice One challenge.
    function getChallenge(uint256 challengeId) external view returns (Challenge memory);

    /// @notice What a run produced and paid, readable for every task in any status (served by the
    /// court module to keep the market under the contract size limit).
    function getReceipt(uint256 taskId) external view returns (TrainingReceipt memory);

    /// @notice Number of challenges ever opened (ids run 1..challengeCount).
    function challengeCount() external view returns (uint256);
}
