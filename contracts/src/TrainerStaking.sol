// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ISynclineMarket} from "./ISynclineMarket.sol";
import {TaskEscrow} from "./TaskEscrow.sol";
import {TaskSpec, TaskState, TaskStatus, Tier, TrainerRecord} from "./SynclineTypes.sol";

/// @title TrainerStaking
/// @notice Enrollment with an exact stake bond, run start, deterministic shard assignment,
/// eviction and slashing of stake into the reward pool.
abstract contract TrainerStaking is TaskEscrow {
    /// @inheritdoc ISynclineMarket
    function enroll(uint256 taskId) external payable returns (uint16 fragment) {
        if (_specs[taskId].tier == Tier.Confidential) revert SynclineUseEnrollAttested(taskId);
        return _enroll(taskId);
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
}
