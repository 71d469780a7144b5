// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ISynclineMarket} from "./ISynclineMarket.sol";
import {RoundLedger} from "./RoundLedger.sol";
import {
    TaskSpec,
    TaskState,
    TaskStatus,
    TrainerRecord,
    WitnessRecord,
    TrainingReceipt,
    TrainerReceipt,
    WitnessReceipt
} from "./SynclineTypes.sol";

/// @title SynclineMarket
/// @notice The deployable Syncline training market: task escrow, trainer staking, sync rounds with a
/// k-of-N witness quorum, and settlement into pull-payment credits.
contract SynclineMarket is RoundLedger {
    /// @inheritdoc ISynclineMarket
    function seal(uint256 taskId) external {
        TaskState storage t = _requireStatus(taskId, TaskStatus.AwaitingSeal);
        TaskSpec storage spec = _specs[taskId];
        uint64 until = t.lastClosedAt + spec.challengeWindow;
        if (block.timestamp < until) revert SynclineChallengeWindowOpen(taskId, until);

        uint256 pool = t.rewardPool;
        uint256 totalWeight = t.totalWeight;
        uint256 rewardsPaid = 0;
        t.status = TaskStatus.Sealed;
        t.rewardPool = 0;
        t.sealedPool = pool;
        t.stakeHeld = 0;

        address[] storage trainers = _trainersByFragment[taskId];
        for (uint256 i = 0; i < trainers.length; ++i) {
            TrainerRecord storage r = _trainerRecords[taskId][trainers[i]];
            uint256 reward = totalWeight == 0 ? 0 : (pool * r.acceptedWeight) / totalWeight;
            uint256 stake = r.stake;
            r.reward = reward;
            r.stake = 0;
            rewardsPaid += reward;
            _credit(taskId, trainers[i], reward, REASON_REWARD);
            _credit(taskId, trainers[i], stake, REASON_STAKE);
        }

        uint256 feesPaid = t.feesEarned;
        t.feesEarned = 0;
        address[] storage witnesses = spec.witnesses;
        for (uint256 i = 0; i < witnesses.length; ++i) {
            _credit(taskId, witnesses[i], _witnessRecords[taskId][witnesses[i]].fees, REASON_FEE);
        }

        // Rounding dust, a pool nobody earned, and the fees of carried-forward rounds go back.
        uint256 sponsorRefund = (pool - rewardsPaid) + t.feeBudget;
        t.feeBudget = 0;
        t.sponsorRefund = sponsorRefund;
        _credit(taskId, t.sponsor, sponsorRefund, REASON_SPONSOR);
        emit TaskSealed(taskId, t.stateRoot, rewardsPaid, feesPaid, sponsorRefund);
    }

    /// @inheritdoc ISynclineMarket
    function getReceipt(uint256 taskId) external view returns (TrainingReceipt memory receipt) {
        TaskState storage t = _requireTask(taskId);
        TaskSpec storage spec = _specs[taskId];
        receipt.taskId = taskId;
        receipt.specHash = spec.specHash;
        receipt.status = t.status;
        receipt.finalStateRoot = t.stateRoot;
        receipt.roundsTotal = spec.rounds;
        receipt.roundsFinalized = t.roundsFinalized;
        receipt.roundsCarried = t.roundsCarried;
        receipt.rewardPool = t.status == TaskStatus.Sealed ? t.sealedPool : t.rewardPool;
        receipt.sponsorRefund = t.sponsorRefund;

        address[] storage trainers = _trainersByFragment[taskId];
        receipt.trainers = new TrainerReceipt[](trainers.length);
        for (uint256 i = 0; i < trainers.length; ++i) {
            TrainerRecord storage r = _trainerRecords[taskId][trainers[i]];
            bool settled = t.status == TaskStatus.Sealed || t.status == TaskStatus.Cancelled;
            receipt.trainers[i] = TrainerReceipt({
                trainer: trainers[i],
                fragment: r.fragment,
                evicted: r.evicted,
                submitted: r.submitted,
                accepted: r.accepted,
                missed: r.missed,
                acceptedWeight: r.acceptedWeight,
                reward: r.reward,
                stakeRefund: settled ? uint256(spec.trainerStake) - r.slashed : 0,
                slashed: r.slashed
            });
        }
        address[] storage witnesses = spec.witnesses;
        receipt.witnesses = new WitnessReceipt[](witnesses.length);
        for (uint256 i = 0; i < witnesses.length; ++i) {
            WitnessRecord storage w = _witnessRecords[taskId][witnesses[i]];
            receipt.witnesses[i] = WitnessReceipt({
                witness: witnesses[i], votes: w.votes, matched: w.matched, dissents: w.dissents, fees: w.fees
            });
        }
    }
}
