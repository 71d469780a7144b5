// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ISynclineMarket} from "./ISynclineMarket.sol";
import {TaskEscrow} from "./TaskEscrow.sol";
import {TaskSpec, TaskState, TaskStatus, TrainerRecord} from "./SynclineTypes.sol";
import {ShardAssignment} from "./libraries/ShardAssignment.sol";
import {TierPolicy} from "./libraries/TierPolicy.sol";

/// @title TrainerStaking
/// @notice Enrollment with an exact stake bond, run start, deterministic shard assignment,
/// eviction and slashing of stake into the reward pool.
abstract contract TrainerStaking is TaskEscrow {
    /// @inheritdoc ISynclineMarket
    function enroll(uint256 taskId) external payable returns (uint16 fragment) {
        TaskState storage t = _requireStatus(taskId, TaskStatus.Enrolling);
        TaskSpec storage spec = _specs[taskId];
        if (block.timestamp > spec.enrollmentDeadline) revert SynclineEnrollmentClosed(taskId, spec.enrollmentDeadline);
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

    /// @dev Evicts a trainer: slashes `evictionSlashBps` of its stake into the reward pool.
    /// The rest of its stake stays bonded until the run seals. The caller rebalances shards.
    function _evict(uint256 taskId, address trainer, uint32 round) internal {
        TaskState storage t = _tasks[taskId];
        TrainerRecord storage r = _trainerRecords[taskId][trainer];
        r.evicted = true;
        r.shardMask = 0;
        t.active -= 1;
        emit TrainerEvicted(taskId, trainer, round);
        uint256 amount = (uint256(r.stake) * _specs[taskId].evictionSlashBps) / TierPolicy.BPS;
        _slash(taskId, trainer, amount);
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
}
