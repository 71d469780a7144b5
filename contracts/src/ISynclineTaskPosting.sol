// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {TaskSpec} from "./SynclineTypes.sol";
import {ISynclineEvents} from "./ISynclineEvents.sol";

/// @title Syncline task posting
/// @notice `postTask` and the deterrence rule it enforces, served at the market's address (the
/// market forwards it to its court, the court to its confidential module, by delegatecall).
interface ISynclineTaskPosting is ISynclineEvents {
    /// @notice Post a task and escrow its reward pool plus the witness fee budget
    /// (`witnessFee * threshold * rounds`); everything above the budget is the reward pool.
    /// @dev Deterrence: with `R = ceil(rewardPool / (rounds * minTrainers))` (the reward per
    /// submission), the spec must satisfy
    /// `trainerStake * spotCheckPpm >= DETERRENCE_MARGIN * R * SPOT_CHECK_PPM_SCALE`
    /// (`SynclineStakeDoesNotDeter`), with `spotCheckPpm` within 1..SPOT_CHECK_PPM_SCALE.
    /// @param spec The on-chain fields of the task spec.
    /// @return taskId The new task's id (ids start at 1).
    function postTask(TaskSpec calldata spec) external payable returns (uint256 taskId);

    /// @notice The factor by which a drawn cheat's expected slash must exceed the reward per
    /// submission (docs/protocol.md "Deterrence").
    function DETERRENCE_MARGIN() external view returns (uint256);

    /// @notice The scale of `spotCheckPpm` (parts per million: 1_000_000 draws every submission).
    function SPOT_CHECK_PPM_SCALE() external view returns (uint256);
}
