// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ISynclineMarket} from "./ISynclineMarket.sol";
import {RoundLedger} from "./RoundLedger.sol";
import {TaskSpec, TaskState, TaskStatus, TrainerRecord} from "./SynclineTypes.sol";
import {ISynclineTaskPosting} from "./ISynclineTaskPosting.sol";
import {SynclinePosting} from "./TaskPosting.sol";

/// @title SynclineMarket
/// @notice The deployable Syncline training market: task escrow, trainer staking, sync rounds with a
/// k-of-N witness quorum, and settlement into pull-payment credits.
contract SynclineMarket is RoundLedger {
    /// @notice The `SynclineCourt` module: every call the market does not implement itself (the
    /// `ISynclineCourt` challenge functions) runs there by delegatecall, on the market's storage.
    address public immutable COURT;
    /// @notice The `SynclinePosting` module this market created: `postTask` and the deterrence
    /// constants (`ISynclineTaskPosting`) run there, by delegatecall on the market's storage.
    address public immutable POSTING = address(new SynclinePosting());

    /// @param court Address of a deployed `SynclineCourt`.
    constructor(address court) {
        if (court.code.length == 0) revert SynclineSpecFieldInvalid("court");
        COURT = court;
    }

    /// @notice Plain ether transfers are refused: every payment names what it pays for.
    receive() external payable {
        revert SynclineDirectPayment();
    }

    /// @notice Delegates `ISynclineTaskPosting` to the posting module, every other call (the
    /// challenge functions, and through the court the confidential ones) to the court module.
    fallback() external payable {
        bytes4 sig = msg.sig;
        address court = (sig == ISynclineTaskPosting.postTask.selector
                || sig == ISynclineTaskPosting.DETERRENCE_MARGIN.selector
                || sig == ISynclineTaskPosting.SPOT_CHECK_PPM_SCALE.selector) ? POSTING : COURT;
        // assembly: forward calldata, value and the return/revert data unchanged. Not
        // memory-safe (it writes from offset 0), which is fine: it never returns to Solidity.
        assembly {
            calldatacopy(0, 0, calldatasize())
            let ok := delegatecall(gas(), court, 0, calldatasize(), 0, 0)
            returndatacopy(0, 0, returndatasize())
            if iszero(ok) { revert(0, returndatasize()) }
            return(0, returndatasize())
        }
    }

    /// @inheritdoc ISynclineMarket
    function seal(uint256 taskId) external {
        TaskState storage t = _requireStatus(taskId, TaskStatus.AwaitingSeal);
        TaskSpec storage spec = _specs[taskId];
        uint64 until = t.lastClosedAt + spec.challengeWindow;
        // The filing window has passed in time and in blocks (`_requireFileable`).
        if (block.timestamp < until || block.number < t.lastClosedBlock + MIN_CHALLENGE_BLOCKS) {
            revert SynclineChallengeWindowOpen(taskId, until);
        }
        if (t.openChallenges != 0) revert SynclineChallengesOpen(taskId, t.openChallenges);

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
        _refundWitnessBonds(taskId, t);
        _credit(taskId, t.sponsor, sponsorRefund, REASON_SPONSOR);
        emit TaskSealed(taskId, t.stateRoot, rewardsPaid, feesPaid, sponsorRefund);
    }
}
