// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {TestBase} from "../base/TestBase.sol";
import {ISynclineMarket} from "../../src/ISynclineMarket.sol";
import {TaskState, TaskStatus, TrainerRecord} from "../../src/SynclineTypes.sol";

/// @title InvariantChecks
/// @notice What the stateful fuzzing suites (`MarketInvariants`, `CourtInvariants`) check alike
/// after every call, whatever their handler did: the money the market holds and the stakes it
/// slashed.
abstract contract InvariantChecks is TestBase {
    /// @dev Forge reads `targetSelectors()` as an array of this shape.
    struct FuzzSelector {
        address addr;
        bytes4[] selectors;
    }

    /// @dev The market holds exactly what it owes: each task's escrow is the sum of its buckets
    /// (reward pool, fee budget, earned fees, stakes and bonds) and nothing once settled, and the
    /// balance is the escrows plus the withdrawable credits of `actors`.
    function _checkBalanceEqualsEscrowsPlusCredits(
        ISynclineMarket market,
        uint256[] memory ids,
        address[] memory actors
    ) internal view {
        uint256 sum;
        for (uint256 i = 0; i < ids.length; ++i) {
            TaskState memory t = market.getTaskState(ids[i]);
            uint256 escrow = market.escrowOf(ids[i]);
            vm.assertEq(
                escrow,
                t.rewardPool + t.feeBudget + t.feesEarned + t.stakeHeld + t.bondsHeld,
                "escrowOf == pool + fee budget + fees earned + stakes + bonds"
            );
            sum += escrow;
            if (t.status == TaskStatus.Sealed || t.status == TaskStatus.Cancelled) {
                vm.assertEq(escrow, 0, "a settled task holds nothing");
            }
        }
        for (uint256 i = 0; i < actors.length; ++i) {
            sum += market.creditOf(actors[i]);
        }
        vm.assertEq(address(market).balance, sum, "balance == sum(escrowOf) + sum(creditOf)");
    }

    /// @dev A slash never exceeds a stake: slashed + stake == trainerStake until the task settles
    /// (then the stake is paid out), only evicted trainers are slashed, and the task's stakeHeld
    /// is the sum of its trainers' stakes.
    function _checkSlashNeverExceedsStake(ISynclineMarket market, uint256[] memory ids) internal view {
        for (uint256 i = 0; i < ids.length; ++i) {
            uint256 bond = market.getSpec(ids[i]).trainerStake;
            TaskState memory t = market.getTaskState(ids[i]);
            bool settled = t.status == TaskStatus.Sealed || t.status == TaskStatus.Cancelled;
            address[] memory ts = market.getTrainers(ids[i]);
            uint256 held;
            for (uint256 j = 0; j < ts.length; ++j) {
                TrainerRecord memory r = market.getTrainer(ids[i], ts[j]);
                vm.assertLe(uint256(r.slashed), bond, "slashed <= trainerStake");
                if (settled) vm.assertEq(uint256(r.stake), 0, "stake released at settlement");
                else vm.assertEq(uint256(r.stake) + r.slashed, bond, "slashed + stake == trainerStake");
                if (!r.evicted) vm.assertEq(uint256(r.slashed), 0, "only evicted trainers are slashed");
                held += r.stake;
            }
            vm.assertEq(t.stakeHeld, held, "stakeHeld == sum of stakes");
        }
    }
}
