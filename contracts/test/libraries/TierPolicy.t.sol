// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {TestBase} from "../base/TestBase.sol";
import {TierPolicy} from "../../src/libraries/TierPolicy.sol";
import {Tier, AggregationRule} from "../../src/SynclineTypes.sol";

/// @notice Which tiers admit which rules, and rule-parameter consistency with minTrainers.
contract TierPolicyTest is TestBase {
    function test_admits_openOnlyMean_succeeds() public pure {
        vm.assertTrue(TierPolicy.admits(Tier.Open, AggregationRule.Mean), "Open admits Mean");
        for (uint8 r = 1; r <= uint8(AggregationRule.CenteredClip); ++r) {
            vm.assertFalse(TierPolicy.admits(Tier.Open, AggregationRule(r)), "Open rejects robust rules");
        }
    }

    function test_admits_verifiedAndConfidentialAll_succeeds() public pure {
        for (uint8 r = 0; r <= uint8(AggregationRule.CenteredClip); ++r) {
            vm.assertTrue(TierPolicy.admits(Tier.Verified, AggregationRule(r)), "Verified admits all");
            vm.assertTrue(TierPolicy.admits(Tier.Confidential, AggregationRule(r)), "Confidential admits all");
        }
    }

    function testFuzz_admits(uint8 tier, uint8 rule) public pure {
        tier = uint8(bound(tier, 0, 2));
        rule = uint8(bound(rule, 0, 5));
        bool expected = tier != uint8(Tier.Open) || rule == uint8(AggregationRule.Mean);
        vm.assertEq(TierPolicy.admits(Tier(tier), AggregationRule(rule)), expected, "admission table");
    }

    function test_paramConsistent_trimmedMeanExamples_succeeds() public pure {
        AggregationRule tm = AggregationRule.TrimmedMean;
        vm.assertTrue(TierPolicy.paramConsistent(tm, 2000, 5), "20% of 5 trims 1, keeps 3");
        vm.assertFalse(TierPolicy.paramConsistent(tm, 1999, 5), "19.99% of 5 trims nothing");
        vm.assertTrue(TierPolicy.paramConsistent(tm, 2500, 4), "25% of 4 trims 1, keeps 2");
        vm.assertTrue(TierPolicy.paramConsistent(tm, 4999, 3), "49.99% of 3 trims 1, keeps 1");
        vm.assertFalse(TierPolicy.paramConsistent(tm, 4999, 2), "49.99% of 2 trims nothing");
        vm.assertFalse(TierPolicy.paramConsistent(tm, 3333, 3), "33.33% of 3 trims nothing");
        vm.assertFalse(TierPolicy.paramConsistent(tm, 5000, 10), "50% keeps nothing");
        vm.assertFalse(TierPolicy.paramConsistent(tm, 9000, 64), "above 50%");
        vm.assertFalse(TierPolicy.paramConsistent(tm, 0, 64), "zero beta");
        vm.assertTrue(TierPolicy.paramConsistent(tm, 157, 64), "1.57% of 64 trims 1");
        vm.assertFalse(TierPolicy.paramConsistent(tm, 156, 64), "1.56% of 64 trims nothing");
    }

    function testFuzz_paramConsistent_trimmedMean(uint32 beta, uint16 n) public pure {
        n = uint16(bound(n, 1, 64));
        bool ok = TierPolicy.paramConsistent(AggregationRule.TrimmedMean, beta, n);
        uint256 trimmed = (uint256(beta) * n) / 10_000;
        if (ok) {
            vm.assertGt(beta, 0, "positive beta");
            vm.assertLt(beta, 5000, "below one half");
            vm.assertGe(trimmed, 1, "trims at least one per side");
            vm.assertGe(uint256(n) - 2 * trimmed, 1, "keeps at least one");
        } else {
            vm.assertTrue(beta == 0 || beta >= 5000 || trimmed == 0, "rejected only when it cannot work");
        }
    }

    function test_paramConsistent_krumExamples_succeeds() public pure {
        for (uint8 k = 0; k < 2; ++k) {
            AggregationRule rule = k == 0 ? AggregationRule.Krum : AggregationRule.MultiKrum;
            vm.assertTrue(TierPolicy.paramConsistent(rule, 0, 3), "f=0 needs 3");
            vm.assertFalse(TierPolicy.paramConsistent(rule, 0, 2), "f=0 with 2");
            vm.assertTrue(TierPolicy.paramConsistent(rule, 1, 5), "f=1 needs 5");
            vm.assertFalse(TierPolicy.paramConsistent(rule, 1, 4), "f=1 with 4");
            vm.assertTrue(TierPolicy.paramConsistent(rule, 30, 64), "f=30 with 64 (63 needed)");
            vm.assertFalse(TierPolicy.paramConsistent(rule, 31, 64), "f=31 needs 65");
            vm.assertFalse(TierPolicy.paramConsistent(rule, type(uint32).max, 64), "huge f does not overflow");
        }
    }

    function testFuzz_paramConsistent_krum(uint32 f, uint16 n, bool multi) public pure {
        AggregationRule rule = multi ? AggregationRule.MultiKrum : AggregationRule.Krum;
        vm.assertEq(TierPolicy.paramConsistent(rule, f, n), uint256(n) >= 2 * uint256(f) + 3, "Krum needs n >= 2f + 3");
    }

    function testFuzz_paramConsistent_centeredClip(uint32 radius, uint16 n) public pure {
        vm.assertEq(TierPolicy.paramConsistent(AggregationRule.CenteredClip, radius, n), radius > 0, "radius > 0");
    }

    function testFuzz_paramConsistent_parameterless(uint32 param, uint16 n, bool median) public pure {
        AggregationRule rule = median ? AggregationRule.CoordinateMedian : AggregationRule.Mean;
        vm.assertEq(TierPolicy.paramConsistent(rule, param, n), param == 0, "no parameter allowed");
    }

    function test_bps_constant_succeeds() public pure {
        vm.assertEq(TierPolicy.BPS, 10_000, "basis points");
    }
}
