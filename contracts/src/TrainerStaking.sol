// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ISynclineMarket} from "./ISynclineMarket.sol";
import {TaskEscrow} from "./TaskEscrow.sol";
import {TaskSpec, TaskState, TaskStatus, TrainerRecord} from "./SynclineTypes.sol";

/// @title TrainerStaking
/// @notice Enrollment with an exact stake bond, run start, deterministic shard assignment,
/// eviction and slashing of stake into the reward pool.
abstract contract TrainerStaking is TaskEscrow {
    /// @inheritdoc ISynclineMarket
    function enroll(uint256 taskId) external payable returns (uint16 fragment) {
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

    /// @inheritdoc ISynclineMarket
    function startRun(uint256 taskId) external {
        TaskState storage t = _requireStatus(taskId, TaskStatus.Enrolling);
        TaskSpec storage spec = _specs[taskId];
        if (block.timestamp <= spec.enrollmentDeadline) {
            revert SynclineEnrollmentStillOpen(taskId, spec.enrollmentDeadline);
        }
        if (t.enrolled < spec.minTrainers) revert SynclineUnderfilled(taskId, t.enrolled, spec.minTrainers);
        _startRun(taskId, t, spec);
    }

    /// @inheritdoc ISynclineMarket
    function getTrainers(uint256 taskId) external view returns (address[] memory) {
        _requireTask(taskId);
        return _trainersByFragment[taskId];
    }

    /// @inheritdoc ISynclineMarket
    function getTrainer(uint256 taskId, address trainer) external view returns (TrainerRecord memory) {
        _requireTask(taskId);
        return _trainerRecords[taskId][trainer];
    }

    // ------------------------------------------------------------------ internal

    function _startRun(uint256 taskId, TaskState storage t, TaskSpec storage spec) internal {
        t.status = TaskStatus.Running;
        t.roundOpenedAt = uint64(block.timestamp);
        emit RunStarted(taskId, t.enrolled, spec.initialStateRoot);
        _assignShards(taskId, spec.shardCount);
        emit RoundOpened(taskId, 0, uint64(block.timestamp), uint64(block.timestamp) + spec.roundDuration);
    }
}
