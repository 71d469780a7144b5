// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ISynclineTaskPosting} from "./ISynclineTaskPosting.sol";
import {SynclineCourtCore} from "./SynclineCourtCore.sol";
import {TaskSpec, TaskState, TaskStatus} from "./SynclineTypes.sol";
import {TierPolicy} from "./libraries/TierPolicy.sol";
import {ShardAssignment} from "./libraries/ShardAssignment.sol";

/// @title TaskPosting
/// @notice `postTask`: the spec rules the contract enforces, the deterrence rule tying the stake,
/// the reward per submission and the committee's spot-check rate together, and the escrow of the
/// reward pool and the witness fee budget. Deployed as `SynclinePosting`, a module the market
/// creates and forwards `postTask` and the two constants' getters to by delegatecall (the market
/// has no room left under EIP-170, the court none under EIP-3860's initcode limit), so
/// `msg.value`, `msg.sender`, the storage and the `TaskPosted` event are the market's and the
/// money invariant holds as before.
abstract contract TaskPosting is ISynclineTaskPosting, SynclineCourtCore {
    /// @inheritdoc ISynclineTaskPosting
    uint256 public constant DETERRENCE_MARGIN = 2;
    /// @inheritdoc ISynclineTaskPosting
    uint256 public constant SPOT_CHECK_PPM_SCALE = 1_000_000;

    /// @inheritdoc ISynclineTaskPosting
    function postTask(TaskSpec calldata spec) external payable onlyDelegated returns (uint256 taskId) {
        uint256 feeBudget = _validateSpec(spec);
        if (msg.value <= feeBudget) revert SynclineInsufficientEscrow(msg.value, feeBudget);
        _requireDeterrence(spec, msg.value - feeBudget);

        taskId = ++_taskCount;
        _specs[taskId] = spec;
        for (uint256 i = 0; i < spec.witnesses.length; ++i) {
            _isWitness[taskId][spec.witnesses[i]] = true;
        }
        TaskState storage t = _tasks[taskId];
        t.sponsor = msg.sender;
        t.status = TaskStatus.Enrolling;
        t.stateRoot = spec.initialStateRoot;
        t.rewardPool = msg.value - feeBudget;
        t.feeBudget = feeBudget;
        emit TaskPosted(taskId, msg.sender, spec.specHash, spec.specURI, msg.value - feeBudget, feeBudget);
    }

    /// @dev Deterrence (docs/protocol.md): a submission earns at most
    /// `R = ceil(rewardPool / (rounds * minTrainers))` and is drawn with probability
    /// `spotCheckPpm / 1e6`; the expected slash of a drawn cheat must be at least
    /// `DETERRENCE_MARGIN` times `R`.
    function _requireDeterrence(TaskSpec calldata spec, uint256 rewardPool) internal pure {
        uint256 ppm = spec.spotCheckPpm;
        if (ppm == 0 || ppm > SPOT_CHECK_PPM_SCALE) revert SynclineSpecFieldInvalid("spotCheckPpm");
        uint256 submissions = uint256(spec.rounds) * spec.minTrainers;
        uint256 reward = (rewardPool + submissions - 1) / submissions;
        if (uint256(spec.trainerStake) * ppm < DETERRENCE_MARGIN * reward * SPOT_CHECK_PPM_SCALE) {
            revert SynclineStakeDoesNotDeter(spec.trainerStake, ppm, reward);
        }
    }

    /// @dev Checks every spec rule the contract enforces (the caller is the sponsor); returns the
    /// witness fee budget.
    function _validateSpec(TaskSpec calldata spec) internal view returns (uint256 feeBudget) {
        uint256 n = spec.witnesses.length;
        if (spec.threshold == 0 || spec.threshold > n || n > MAX_WITNESSES) {
            revert SynclineInvalidThreshold(spec.threshold, n);
        }
        for (uint256 i = 0; i < n; ++i) {
            address w = spec.witnesses[i];
            if (w == address(0)) revert SynclineZeroWitness(i);
            if (w == msg.sender) revert SynclineSponsorIsWitness(w, i);
            for (uint256 j = 0; j < i; ++j) {
                if (spec.witnesses[j] == w) revert SynclineDuplicateWitness(w);
            }
        }
        if (spec.rounds == 0) revert SynclineZeroSpecField("rounds");
        if (spec.innerSteps == 0) revert SynclineZeroSpecField("innerSteps");
        if (spec.roundDuration == 0) revert SynclineZeroSpecField("roundDuration");
        if (spec.trainerStake == 0) revert SynclineZeroSpecField("trainerStake");
        // Every vote puts a bond at stake: a free vote could finalize a wrong round at no cost.
        if (spec.witnessBond == 0) revert SynclineZeroSpecField("witnessBond");
        if (spec.specHash == bytes32(0)) revert SynclineZeroSpecField("specHash");
        if (spec.initialStateRoot == bytes32(0)) revert SynclineZeroSpecField("initialStateRoot");
        if (spec.outerLrPpm == 0) revert SynclineZeroSpecField("outerLrPpm");
        if (
            spec.minTrainers == 0 || spec.maxTrainers < spec.minTrainers || spec.maxTrainers > MAX_TRAINERS
                || spec.shardCount < spec.maxTrainers || spec.shardCount > ShardAssignment.MAX_SHARDS
        ) revert SynclineTrainerBoundsInvalid(spec.minTrainers, spec.maxTrainers, spec.shardCount);
        if (spec.enrollmentDeadline <= block.timestamp) {
            revert SynclineDeadlineInPast(spec.enrollmentDeadline, block.timestamp);
        }
        if (spec.enrollmentDeadline - block.timestamp > MAX_WINDOW) {
            revert SynclineWindowTooLong("enrollmentDeadline", spec.enrollmentDeadline - block.timestamp, MAX_WINDOW);
        }
        if (spec.roundDuration > MAX_WINDOW) revert SynclineWindowTooLong("roundDuration", spec.roundDuration, MAX_WINDOW);
        if (spec.graceWindow > MAX_WINDOW) revert SynclineWindowTooLong("graceWindow", spec.graceWindow, MAX_WINDOW);
        if (spec.challengeWindow > MAX_WINDOW) {
            revert SynclineWindowTooLong("challengeWindow", spec.challengeWindow, MAX_WINDOW);
        }
        if (spec.challengeWindow < MIN_CHALLENGE_WINDOW) {
            revert SynclineWindowTooShort("challengeWindow", spec.challengeWindow, MIN_CHALLENGE_WINDOW);
        }
        if (spec.evictionSlashBps > TierPolicy.BPS) revert SynclineSlashBpsTooHigh(spec.evictionSlashBps);
        if (spec.gradientBits != 8 && spec.gradientBits != 16) revert SynclineUnsupportedGradientBits(spec.gradientBits);
        if (!TierPolicy.admits(spec.tier, spec.rule)) revert SynclineRuleNotAdmitted(spec.tier, spec.rule);
        if (!TierPolicy.paramConsistent(spec.rule, spec.ruleParam, spec.minTrainers)) {
            revert SynclineRuleParamInconsistent(spec.rule, spec.ruleParam, spec.minTrainers);
        }
        if (spec.paramCount == 0) revert SynclineSpecFieldInvalid("paramCount");
        if (spec.checkpointInterval == 0 || spec.checkpointInterval > spec.innerSteps) {
            revert SynclineSpecFieldInvalid("checkpointInterval");
        }
        feeBudget = uint256(spec.witnessFee) * spec.threshold * spec.rounds;
    }
}

/// @title SynclinePosting
/// @notice The deployable `TaskPosting` module (`SynclineMarket.POSTING`); it refuses direct calls.
contract SynclinePosting is TaskPosting {}
