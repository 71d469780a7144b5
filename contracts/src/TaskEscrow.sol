// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ISynclineMarket} from "./ISynclineMarket.sol";
import {SynclineStorage} from "./SynclineStorage.sol";
import {TaskSpec, TaskState, TaskStatus, TrainerRecord, WitnessRecord} from "./SynclineTypes.sol";

/// @title TaskEscrow
/// @notice Task registry, the escrow and the pull-payment credit ledger (`postTask` and its spec
/// validation run in `TaskPosting`, part of the court's confidential module).
/// @dev Money invariant: address(this).balance == sum over tasks of escrowOf(task) + sum of credits.
abstract contract TaskEscrow is ISynclineMarket, SynclineStorage {
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
