// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {TaskStatus, Tier, AggregationRule, ChallengeKind, ChallengeStatus} from "./SynclineTypes.sol";

/// @title Syncline errors and events
/// @notice Everything the market and its court module revert with or emit, in one place so that
/// clients decode both from one ABI.
interface ISynclineEvents {
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
    /// @notice A window is shorter than `min` seconds: an honest party could not meet it (the
    /// challenge window: `MIN_CHALLENGE_WINDOW`).
    error SynclineWindowTooShort(string field, uint256 value, uint256 min);
    /// @notice Slash fraction above 100%.
    error SynclineSlashBpsTooHigh(uint16 bps);
    /// @notice Only 8- or 16-bit gradient quantization is defined.
    error SynclineUnsupportedGradientBits(uint8 bits);
    /// @notice The escrow sent does not cover the witness fee budget plus a positive reward pool.
    error SynclineInsufficientEscrow(uint256 sent, uint256 witnessFeeBudget);
    /// @notice The sponsor listed itself as a witness: the committee must be others with a bond at stake.
    error SynclineSponsorIsWitness(address sponsor, uint256 index);

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
    /// @notice Trainers can still commit until `deadline`: an active trainer has not committed
    /// yet, so the round cannot close early (see `RoundWorkComplete`).
    error SynclineRoundStillOpen(uint256 taskId, uint32 round, uint64 deadline);
    /// @notice The accepted set names fragments that did not commit.
    error SynclineAcceptedNotCommitted(uint256 taskId, uint32 round, uint256 strayMask);
    /// @notice The state root of a result must be non-zero.
    error SynclineEmptyStateRoot();
    /// @notice Fork detection: the round finalized `finalized`, the caller offered `offered`.
    error ConflictingFinalize(uint32 round, bytes32 finalized, bytes32 offered);
    /// @notice The witness already voted `previous` in this round and cannot change its vote.
    error SynclineAlreadyVoted(uint256 taskId, uint32 round, address witness, bytes32 previous);
    /// @notice Nobody committed to the round by its (extended) deadline: there is nothing to vote
    /// on; `carryForward` closes it empty (`SynclineRoundEmpty`).
    error SynclineNothingToVote();
    /// @notice The round was carried forward; it takes no more votes.
    error SynclineRoundCarriedForward(uint256 taskId, uint32 round);
    /// @notice Carry-forward is possible only once the grace window has ended, strictly after `earliest`
    /// (= round deadline + grace window), like finalize is only possible strictly after the deadline.
    error SynclineGraceWindowOpen(uint256 taskId, uint32 round, uint64 earliest);
    /// @notice The vote builds on `offered`, but the round's previous state root is `current`
    /// (a stale vote cast before a rollback, or one for another history).
    error SynclineWrongPrevStateRoot(bytes32 offered, bytes32 current);

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
        bytes32 checkpointRoot,
        string uri,
        uint16 weight,
        bytes signature
    );
    /// @notice Every active (enrolled, non-evicted) trainer has committed for the open `round`
    /// (`committedMask`): its work is complete, and witnesses may finalize it before its deadline.
    /// Emitted by the commitment, or the eviction, that completes the set; at most once per round
    /// and eviction.
    event RoundWorkComplete(uint256 indexed taskId, uint32 indexed round, uint256 committedMask);
    /// @notice A witness voted for `result` = keccak256(abi.encode(stateRoot, aggregateRoot, acceptedMask)),
    /// built on `prevStateRoot`. `metric` (validation loss x 1e6) is signed with the vote but is not
    /// part of the result.
    event VoteCast(
        uint256 indexed taskId,
        uint32 indexed round,
        address indexed witness,
        bytes32 result,
        bytes32 prevStateRoot,
        bytes32 stateRoot,
        bytes32 aggregateRoot,
        uint256 acceptedMask,
        uint256 metric,
        bytes signature
    );
    /// @notice A vote differed from the first vote of the round.
    event DissentRecorded(
        uint256 indexed taskId, uint32 indexed round, address indexed witness, bytes32 result, bytes32 firstVote
    );
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
    /// @notice A trainer committed after the round's first deadline, within its one extension
    /// (nobody had committed by then): recorded and paid like any commitment, counted as late.
    event SubmissionLate(uint256 indexed taskId, uint32 indexed round, address indexed trainer);
    /// @notice Nobody committed by the round's extended deadline: the round carried the state
    /// forward with no vote, no witness fee and no miss for anyone.
    event SynclineRoundEmpty(uint256 indexed taskId, uint32 indexed round, bytes32 stateRoot);
    /// @notice A trainer missed a round (it did not commit).
    event RoundMissed(uint256 indexed taskId, uint32 indexed round, address indexed trainer, uint32 consecutive);
    /// @notice A trainer was evicted for missing more than `maxMissedRounds` consecutive rounds.
    event TrainerEvicted(uint256 indexed taskId, address indexed trainer, uint32 round);
    /// @notice Stake was slashed from `offender` into the task's reward pool.
    event StakeSlashed(uint256 indexed taskId, address indexed offender, uint256 amount, uint256 remainingStake);
    /// @notice The last round closed; the run waits for its challenge window, then can be sealed.
    event RunCompleted(uint256 indexed taskId, bytes32 finalStateRoot, uint64 challengeWindowEnds);
    /// @notice The run sealed; rewards, fees and stake refunds were credited.
    event TaskSealed(
        uint256 indexed taskId, bytes32 finalStateRoot, uint256 rewardsPaid, uint256 feesPaid, uint256 sponsorRefund
    );
    /// @notice The task never filled; everyone was refunded.
    event TaskCancelled(uint256 indexed taskId, uint16 enrolled, uint256 sponsorRefund);
    /// @notice `amount` was added to `account`'s withdrawable credit.
    event Credited(uint256 indexed taskId, address indexed account, uint256 amount, bytes32 reason);
    /// @notice `account` withdrew `amount`.
    event Withdrawn(address indexed account, uint256 amount);

    // ------------------------------------------------------------------ errors: signatures and bonds
    /// @notice A signature is malformed, malleable or recovers to nobody.
    error SynclineBadSignature();
    /// @notice The commitment's signer is not the trainer holding `fragment`.
    error SynclineWrongSigner(address signer, address expected);
    /// @notice The witness has not posted its bond (`witnessBond`), or lost it to a slash, and may not vote.
    error SynclineWitnessUnbonded(uint256 taskId, address witness);
    /// @notice The witness already posted its bond.
    error SynclineWitnessAlreadyBonded(uint256 taskId, address witness);
    /// @notice A bond was not the exact amount the spec requires.
    error SynclineWrongBond(uint256 sent, uint256 required);
    /// @notice Spec field out of range (paramCount, checkpointInterval, spotCheckPpm).
    error SynclineSpecFieldInvalid(string field);
    /// @notice The stake does not deter a cheat at the spot-check rate: `stake * ppm` is below
    /// `DETERRENCE_MARGIN * rewardPerSubmission * 1e6` (`rewardPerSubmission` rounded up).
    error SynclineStakeDoesNotDeter(uint256 stake, uint256 spotCheckPpm, uint256 rewardPerSubmission);
    /// @notice The market takes no plain ether transfers (use postTask, enroll, bondWitness).
    error SynclineDirectPayment();
    /// @notice The court module only runs by delegatecall from the market.
    error SynclineCourtDirectCall();
    /// @notice Sealing waits until every open challenge is resolved.
    error SynclineChallengesOpen(uint256 taskId, uint32 open);

    // ------------------------------------------------------------------ errors: challenges
    /// @notice The round is not finalized (pending, carried forward or already invalidated).
    error SynclineRoundNotFinalized(uint256 taskId, uint32 round);
    /// @notice The round's challenge window ended at `until`.
    error SynclineChallengeWindowClosed(uint256 taskId, uint32 round, uint64 until);
    /// @notice This fault was already claimed by challenge `challengeId`.
    error SynclineDuplicateChallenge(bytes32 faultKey, uint256 challengeId);
    /// @notice The two signed messages are not for the same slot, or are identical.
    error SynclineNotEquivocation();
    /// @notice The accused has nothing left to slash.
    error SynclineNothingToSlash(uint256 taskId, address accused);
    /// @notice The task's rule needs whole-vector distances and cannot be checked per chunk.
    error SynclineRuleNotChunkProvable(AggregationRule rule);
    /// @notice Chunk index, coordinate window or number of inputs does not fit the task.
    error SynclineBadOpening(uint256 taskId, uint32 round, uint32 chunkIndex);
    /// @notice A Merkle proof does not open `root` at `chunkIndex` (`which`: input i, or the
    /// previous / claimed state as `type(uint256).max - 1` / `type(uint256).max`).
    error SynclineBadMerkleProof(uint256 which, bytes32 root);
    /// @notice The recomputed chunk equals the finalized one: there is no aggregation fault there.
    error SynclineAggregationCorrect(uint256 taskId, uint32 round, uint32 chunkIndex);
    /// @notice The fragment was accepted, or never committed: nothing was censored.
    error SynclineNotCensored(uint256 taskId, uint32 round, uint16 fragment);
    /// @notice The fragment's submission was not accepted, so a training fault changes nothing.
    error SynclineNotAccepted(uint256 taskId, uint32 round, uint16 fragment);
    /// @notice The segment index is beyond the derivation segment `ceil(innerSteps / interval)`.
    error SynclineBadSegment(uint32 segment, uint32 segments);
    /// @notice No such challenge.
    error SynclineUnknownChallenge(uint256 challengeId);
    /// @notice The challenge is not open (already resolved, or a synchronous proof).
    error SynclineChallengeNotOpen(uint256 challengeId, ChallengeStatus status);
    /// @notice The challenge is not of the kind this function handles.
    error SynclineWrongChallengeKind(uint256 challengeId, ChallengeKind kind);
    /// @notice The challenge's response or referee deadline `deadline` has (not) passed.
    error SynclineChallengeDeadline(uint256 challengeId, uint64 deadline);
    /// @notice The witness already voted on this training challenge.
    error SynclineAlreadyRefereed(uint256 challengeId, address witness);
    /// @notice The opened chunk is well formed, so it is no reason to exclude the submission.
    error SynclineChunkWellFormed(uint256 challengeId, uint32 chunkIndex);
    /// @notice The caller may not defend this censorship claim: only a witness that voted the
    /// finalized result may, and never the claimant.
    error SynclineNotDefender(uint256 challengeId, address caller);
    /// @notice The witness already demanded availability on this claim.
    error SynclineAlreadyDemanded(uint256 challengeId, address witness);
    /// @notice No availability demand is open on this claim (none made, answered, or its
    /// response window ended at `deadline`).
    error SynclineAvailabilityClosed(uint256 challengeId, uint64 deadline);
    /// @notice Only the accused trainer answers its training claim.
    error SynclineNotAccused(uint256 challengeId, address caller);
    /// @notice The task has no rollback left to carry out.
    error SynclineNothingToInvalidate(uint256 taskId);
    /// @notice A rollback of rounds `[next, end)` is still being carried out: call
    /// `continueInvalidation` until it is done, then prove a fault in a later round.
    error SynclineInvalidationPending(uint256 taskId, uint32 next, uint32 end);

    // ------------------------------------------------------------------ events: bonds and challenges
    /// @notice A witness posted its bond.
    event WitnessBonded(uint256 indexed taskId, address indexed witness, uint256 bond);
    /// @notice A witness's bond was slashed into the reward pool.
    event WitnessSlashed(uint256 indexed taskId, address indexed witness, uint256 amount);
    /// @notice A challenge was opened (asynchronous kinds) or proven (synchronous kinds, followed
    /// by `ChallengeResolved` in the same transaction).
    event ChallengeOpened(
        uint256 indexed challengeId,
        uint256 indexed taskId,
        uint32 indexed round,
        ChallengeKind kind,
        address challenger,
        address accused,
        uint16 fragment,
        uint32 segment,
        uint64 deadline
    );
    /// @notice A challenge ended: `Upheld` (slashed `slashed`, paid `bounty` + bond to the
    /// challenger), `Rejected` (bond forfeited) or `Expired` (bond returned).
    event ChallengeResolved(
        uint256 indexed challengeId, uint256 indexed taskId, ChallengeStatus status, uint256 slashed, uint256 bounty
    );
    /// @notice A committee member voted on a training-fraud challenge after re-executing the segment.
    event RefereeVoted(uint256 indexed challengeId, address indexed witness, bool guilty);
    /// @notice A proven fault voided `round` and every round finalized after it; the state root
    /// rolled back to `restoredRoot`.
    event RoundsInvalidated(uint256 indexed taskId, uint32 fromRound, uint32 throughRound, bytes32 restoredRoot);
    /// @notice A trainer's reward for one round was revoked by a proven trainer fault.
    event RewardRevoked(uint256 indexed taskId, uint32 indexed round, address indexed trainer, uint16 weight);
    /// @notice A rollback replaced the open round's previous state root `staleRoot` with
    /// `prevStateRoot`: the votes cast on the stale root no longer count.
    event VotesDiscarded(uint256 indexed taskId, uint32 indexed round, bytes32 staleRoot, bytes32 prevStateRoot);
    /// @notice A voter of a censored round demanded that chunk `chunkIndex` of the excluded
    /// submission be opened on chain by `deadline`.
    event AvailabilityDemanded(uint256 indexed challengeId, address indexed witness, uint32 chunkIndex, uint64 deadline);
    /// @notice The demanded chunk was opened (well formed): the data is available now.
    event AvailabilityAnswered(uint256 indexed challengeId, address indexed by, uint32 chunkIndex);
    /// @notice The demanded chunk was not opened in time: the submission is unavailable for good.
    event SubmissionUnavailable(uint256 indexed taskId, uint32 indexed round, uint16 fragment, uint256 challengeId);
    /// @notice The demanded chunk of an excluded submission was opened only after the vote: the
    /// round stands, nobody is slashed, no fee is given up, the trainer is not credited the round,
    /// and the censorship claim `challengeId` expires (its bond back to the claimant).
    event AvailabilityShownLate(uint256 indexed challengeId, uint256 indexed taskId, uint32 indexed round, uint16 fragment);
    /// @notice A rollback voided rounds up to `nextRound` (exclusive) of `[.., endRound)`; it is
    /// complete when `nextRound == endRound`.
    event InvalidationProgressed(uint256 indexed taskId, uint32 nextRound, uint32 endRound);
    /// @notice The accused trainer answered training claim `challengeId`: the segment's checkpoints
    /// are published for the referees.
    event TrainingAnswered(uint256 indexed challengeId, address indexed trainer);
    /// @notice The accused did not answer training claim `challengeId` in its response window:
    /// the claim is upheld.
    event SegmentWithheld(uint256 indexed challengeId, uint256 indexed taskId, uint32 round, uint16 fragment);
    /// @notice A referee found the answered training claim's segment data absent from the task's
    /// reachable blob store (`refereeUnavailable`); a later `RefereeVoted` of the same referee
    /// replaces this verdict.
    event RefereeUnavailable(uint256 indexed challengeId, address indexed witness);
    /// @notice The accused answered training claim `challengeId` but, at its deadline, guilty and
    /// `unavailableVotes` `Unavailable` verdicts reached the threshold: the claim is upheld.
    event SegmentUnavailable(
        uint256 indexed challengeId, uint256 indexed taskId, uint32 round, uint16 fragment, uint16 unavailableVotes
    );
    /// @notice The accused has not answered this training claim: nothing it published can be
    /// missing yet (`refereeUnavailable`).
    error SynclineTrainingNotAnswered(uint256 challengeId);

    // ------------------------------------------------------------------ confidential tasks (issue 15)

    /// @notice `enroll` was called on a Confidential task: enroll with `enrollAttested` instead.
    error SynclineUseEnrollAttested(uint256 taskId);
    /// @notice Only the task's sponsor may call this.
    error SynclineNotSponsor(uint256 taskId, address caller);
    /// @notice The task is not of the Confidential tier.
    error SynclineNotConfidential(uint256 taskId);
    /// @notice The task has no attestation policy yet (`configureConfidential`).
    error SynclineConfidentialNotConfigured(uint256 taskId);
    /// @notice The task's attestation policy is set once.
    error SynclineConfidentialAlreadyConfigured(uint256 taskId, address verifier);
    /// @notice The attestation policy must be set before the first enrollment.
    error SynclineEnrollmentStarted(uint256 taskId, uint16 enrolled);
    /// @notice The verifier address has no code.
    error SynclineVerifierInvalid(address verifier);
    /// @notice The allow-list must hold between 1 and `max` measurements.
    error SynclineMeasurementCount(uint256 count, uint256 max);
    /// @notice An allow-listed measurement is zero or listed twice.
    error SynclineMeasurementInvalid(uint256 index, bytes32 measurement);
    /// @notice The report exceeds the size bound.
    error SynclineReportTooLarge(uint256 length, uint256 max);
    /// @notice The report binds another enclave public key than the one claimed.
    error SynclineAttestationPubkeyMismatch(bytes32 claimed, bytes32 attested);
    /// @notice The report binds another measurement than the one claimed.
    error SynclineAttestationMeasurementMismatch(bytes32 claimed, bytes32 attested);
    /// @notice The report was issued for another operator account than the caller.
    error SynclineAttestationOperatorMismatch(address claimed, address attested);
    /// @notice The measurement is not on the task's allow-list.
    error SynclineMeasurementNotAllowed(uint256 taskId, bytes32 measurement);
    /// @notice The enclave public key is zero.
    error SynclineZeroEnclaveKey();
    /// @notice The enclave key is already admitted in this task for `holder`.
    error SynclineEnclaveInUse(uint256 taskId, bytes32 enclavePubkey, address holder);
    /// @notice This witness already registered its enclave for the task.
    error SynclineEnclaveAlreadyRegistered(uint256 taskId, address account);
    /// @notice The manifest hash is zero, or the URI is empty or longer than `max` bytes.
    error SynclineManifestInvalid(bytes32 manifestHash, uint256 uriLength, uint256 max);
    /// @notice `registerWitnessKey` on a Confidential task: its witnesses register an attested
    /// enclave with `registerWitnessEnclave` instead.
    error SynclineWitnessKeyNeedsAttestation(uint256 taskId);

    /// @notice The sponsor set a Confidential task's attestation policy.
    event ConfidentialConfigured(uint256 indexed taskId, address verifier, bytes32[] measurements);
    /// @notice An attested enclave was admitted for a trainer (at enrollment) or a witness.
    event EnclaveAdmitted(uint256 indexed taskId, address indexed account, bytes32 enclavePubkey, bytes32 measurement);
    /// @notice A witness of a task that is not Confidential registered its X25519 dispute key
    /// (`registerWitnessKey`: DP noise openings are sealed to it; recorded with measurement 0).
    event WitnessKeyRegistered(uint256 indexed taskId, address indexed witness, bytes32 pubkey);
    /// @notice The sponsor published version `version` of the task's sealed-data manifest.
    event SealedManifestInstalled(uint256 indexed taskId, uint32 version, bytes32 manifestHash, string manifestURI);
}
