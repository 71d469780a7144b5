// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Tier, AggregationRule} from "../SynclineTypes.sol";

/// @title TierPolicy
/// @notice Which aggregation rules a trust tier admits, and whether a rule's parameter can work
/// with the task's minimum number of trainers. Pure: used by the market at `postTask`.
library TierPolicy {
    /// @notice Basis-point denominator.
    uint256 internal constant BPS = 10_000;

    /// @notice Open admits Mean only; Verified and Confidential admit every robust rule.
    function admits(Tier tier, AggregationRule rule) internal pure returns (bool) {
        if (tier == Tier.Open) return rule == AggregationRule.Mean;
        return true;
    }

    /// @notice Whether `ruleParam` is meaningful with `minTrainers` inputs.
    /// TrimmedMean(beta bps): at `minTrainers` inputs it trims t = floor(beta*n/1e4) >= 1 from each
    /// side and keeps at least one (beta < 50%). Krum / Multi-Krum(f): n >= 2f + 3.
    /// CenteredClip(radius): radius > 0. Mean and CoordinateMedian take no parameter.
    function paramConsistent(AggregationRule rule, uint32 ruleParam, uint16 minTrainers) internal pure returns (bool) {
        uint256 n = minTrainers;
        if (rule == AggregationRule.TrimmedMean) {
            if (ruleParam == 0 || ruleParam >= BPS / 2) return false;
            uint256 trimmed = (uint256(ruleParam) * n) / BPS;
            return trimmed >= 1 && 2 * trimmed < n;
        }
        if (rule == AggregationRule.Krum || rule == AggregationRule.MultiKrum) {
            return n >= 2 * uint256(ruleParam) + 3;
        }
        if (rule == AggregationRule.CenteredClip) return ruleParam > 0;
        return ruleParam == 0;
    }
}
