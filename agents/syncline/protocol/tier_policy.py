"""Which aggregation rules a tier admits and whether a rule parameter fits ``min_trainers``.

Mirrors ``contracts/src/libraries/TierPolicy.sol`` exactly; the tests check both agree.
"""

from __future__ import annotations

from syncline.protocol.enums import AggregationRule, Tier

BPS = 10_000


def admits(tier: Tier, rule: AggregationRule) -> bool:
    """Open admits Mean only; Verified and Confidential admit every rule."""
    if tier == Tier.OPEN:
        return rule == AggregationRule.MEAN
    return True


def param_consistent(rule: AggregationRule, rule_param: int, min_trainers: int) -> bool:
    """TrimmedMean(beta bps): trims 1 <= t = floor(beta*n/1e4) per side with 2t < n;
    Krum/Multi-Krum(f): n >= 2f + 3; CenteredClip(radius): radius > 0; others take no parameter."""
    n = min_trainers
    if rule == AggregationRule.TRIMMED_MEAN:
        if rule_param == 0 or rule_param >= BPS // 2:
            return False
        trimmed = rule_param * n // BPS
        return trimmed >= 1 and 2 * trimmed < n
    if rule in (AggregationRule.KRUM, AggregationRule.MULTI_KRUM):
        return n >= 2 * rule_param + 3
    if rule == AggregationRule.CENTERED_CLIP:
        return rule_param > 0
    return rule_param == 0
