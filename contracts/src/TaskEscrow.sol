// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ISynclineMarket} from "./ISynclineMarket.sol";
import {SynclineStorage} from "./SynclineStorage.sol";
import {TaskSpec, TaskState, TaskStatus, TrainerRecord, WitnessRecord} from "./SynclineTypes.sol";
import {TierPolicy} from "./libraries/TierPolicy.sol";
import {ShardAssignment} from "./libraries/ShardAssignment.sol";

/// @title TaskEscrow
/// @notice Task registry, spec validation, the escrow and the pull-payment credit ledger.
/// @dev Money invariant: address(this).balance == sum over tasks of escrowOf(task) + sum of credits.
abstract contract TaskEscrow is ISynclineMarket, SynclineStorage {
    /// @inheritdoc ISynclineMarket
    function postTask(TaskSpec calldata spec) external payable returns (uint256 taskId) {
        uint256 feeBudget = _validateSpec(spec);
        if (msg.value <= feeBudget) revert SynclineInsufficientEscrow(msg.value, feeBudget);

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

    /// @inheritdoc ISynclineMarket
    function cancelUnderfilled(uint256 taskId) external {
        TaskState storage t = _requireStatus(taskId, TaskStatus.Enrolling);
        TaskSpec storage spec = _specs[taskId];
        if (block.timestamp <= spec.enrollmentDeadline) {
            revert SynclineEnrollmentStillOpen(taskId, spec.enrollmentDeadline);
        }
        if (t.enrolled >= spec.minTrainers) revert SynclineNotUnderfilled(taskId, t.enrolled, spec.minTrainers);

        uint256 sponsorRefund = t.rewardPool + t.feeBudget;
        t.status = TaskStatus.Cancelled;
        t.rewardPool = 0;
        t.feeBudget = 0;
        t.stakeHeld = 0;
        t.sponsorRefund = sponsorRefund;
        address[] storage trainers = _trainersByFragment[taskId];
        for (uint256 i = 0; i < trainers.length; ++i) {
            TrainerRecord storage r = _trainerRecords[taskId][trainers[i]];
            uint256 stake = r.stake;
            r.stake = 0;
            _credit(taskId, trainers[i], stake, REASON_STAKE);
        }
        _refundWitnessBonds(taskId, t);
        _credit(taskId, t.sponsor, sponsorRefund, REASON_SPONSOR);
        emit TaskCancelled(taskId, t.enrolled, sponsorRefund);
    }

    /// @inheritdoc ISynclineMarket
    function bondWitness(uint256 taskId) external payable {
        TaskState storage t = _requireTask(taskId);
        if (t.status != TaskStatus.Enrolling && t.status != TaskStatus.Running) {
            revert SynclineWrongTaskStatus(taskId, t.status, TaskStatus.Running);
        }
        if (!_isWitness[taskId][msg.sender]) revert SynclineNotWitness(taskId, msg.sender);
        WitnessRecord storage w = _witnessRecords[taskId][msg.sender];
        // A witness slashed to zero may bond again (a run never stays below its quorum for good);
        // a zero bond (a task without one) is posted once.
        if (w.bond != 0 || (w.bonded && msg.value == 0)) revert SynclineWitnessAlreadyBonded(taskId, msg.sender);
        uint256 required = _specs[taskId].witnessBond;
        if (msg.value != required) revert SynclineWrongBond(msg.value, required);
        w.bonded = true;
        // casting to 'uint128' is safe because msg.value == witnessBond, a uint128
        // forge-lint: disable-next-line(unsafe-typecast)
        w.bond = uint128(msg.value);
        t.bondsHeld += msg.value;
        emit WitnessBonded(taskId, msg.sender, msg.value);
    }

    /// @inheritdoc ISynclineMarket
    function withdraw() external nonReentrant {
        uint256 amount = _credits[msg.sender];
        if (amount == 0) revert SynclineNothingToWithdraw(msg.sender);
        _credits[msg.sender] = 0;
        emit Withdrawn(msg.sender, amount);
        (bool ok,) = payable(msg.sender).call{value: amount}("");
        if (!ok) revert SynclineWithdrawFailed(msg.sender, amount);
    }

    // ------------------------------------------------------------------ views

    /// @inheritdoc ISynclineMarket
    function taskCount() external view returns (uint256) {
        return _taskCount;
    }

    /// @inheritdoc ISynclineMarket
    function getSpec(uint256 taskId) external view returns (TaskSpec memory) {
        _requireTask(taskId);
        return _specs[taskId];
    }

    /// @inheritdoc ISynclineMarket
    function getTaskState(uint256 taskId) external view returns (TaskState memory) {
        return _requireTask(taskId);
    }

    /// @inheritdoc ISynclineMarket
    function getWitness(uint256 taskId, address witness) external view returns (WitnessRecord memory) {
        _requireTask(taskId);
        return _witnessRecords[taskId][witness];
    }

    /// @inheritdoc ISynclineMarket
    function escrowOf(uint256 taskId) public view returns (uint256) {
        TaskState storage t = _requireTask(taskId);
        // unchecked: each term is ether the market holds; their sum is at most its balance.
        unchecked {
            return t.rewardPool + t.feeBudget + t.feesEarned + t.stakeHeld + t.bondsHeld;
        }
    }

    /// @inheritdoc ISynclineMarket
    function creditOf(address account) external view returns (uint256) {
        return _credits[account];
    }

    // ------------------------------------------------------------------ internal

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

    /// @dev Credits every witness its remaining bond (seal and cancel).
    function _refundWitnessBonds(uint256 taskId, TaskState storage t) internal {
        address[] storage witnesses = _specs[taskId].witnesses;
        for (uint256 i = 0; i < witnesses.length; ++i) {
            WitnessRecord storage w = _witnessRecords[taskId][witnesses[i]];
            uint256 bond = w.bond;
            if (bond == 0) continue;
            w.bond = 0;
            t.bondsHeld -= bond;
            _credit(taskId, witnesses[i], bond, REASON_BOND);
        }
    }
}
