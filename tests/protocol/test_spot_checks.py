"""The committee's spot-check draw: recomputable from the documented formula at the on-chain
``spotCheckPpm``, at its rate, uniform over the segments; the deterrence rule and its default rate."""

from __future__ import annotations

import math

import pytest
from eth_utils import keccak

from syncline.protocol.spot_checks import (
    CHECKPOINT_BYTES_PER_PARAM,
    DEFAULT_SPOT_CHECK_BUDGET,
    MIN_CHALLENGE_BLOCKS,
    checkpoint_bytes_per_payload_byte,
    checkpoints_for_segment,
    claims_over,
    default_spot_check_rate,
    deterrence_ppm,
    filing_open,
    kept_rounds,
    mean_checkpoints_per_check,
    rate_ppm,
    reward_per_submission,
    spot_check_deadline,
    spot_check_draw,
    spot_check_threshold,
)

ROOT = keccak(b"a finalized state root")
BLOCK = keccak(b"the block that finalized it")


def _by_hand(
    task_id: int, round_: int, fragment: int, root: bytes, block: bytes, ppm: int, segments: int
) -> int | None:
    """The draw as ``docs/architecture.md`` states it, written out independently."""
    h = keccak(
        b"syncline-spot-check-v1"
        + task_id.to_bytes(32, "big")
        + round_.to_bytes(32, "big")
        + fragment.to_bytes(32, "big")
        + root
        + block
    )
    if int.from_bytes(h[:8], "big") >= ppm * 2**64 // 10**6:
        return None
    return int.from_bytes(h[8:16], "big") % (segments + 1)


def test_the_draw_is_the_documented_formula() -> None:
    for ppm in (1_000_000, 500_000, 10_000, 1):
        for fragment in range(40):
            got = spot_check_draw(7, 3, fragment, ROOT, BLOCK, ppm=ppm, segments=3)
            assert got == _by_hand(7, 3, fragment, ROOT, BLOCK, ppm, 3)


def test_rate_one_draws_every_submission_and_segments_cover_zero_to_s() -> None:
    drawn = [spot_check_draw(1, r, f, ROOT, BLOCK, ppm=1_000_000, segments=3) for r in range(50) for f in range(20)]
    assert None not in drawn
    counts = [drawn.count(s) for s in range(4)]
    assert all(200 <= c <= 300 for c in counts), counts  # 1000 draws, ~250 each


def test_the_draw_hits_its_rate_and_depends_on_the_root_and_the_block() -> None:
    rate, n = 0.05, 20_000
    hits = sum(spot_check_draw(2, i // 100, i % 100, ROOT, BLOCK, ppm=50_000, segments=3) is not None for i in range(n))
    sigma = math.sqrt(n * rate * (1 - rate))
    assert abs(hits - n * rate) < 5 * sigma, hits
    other = keccak(b"another root")
    a = [spot_check_draw(2, 0, f, ROOT, BLOCK, ppm=500_000, segments=3) for f in range(64)]
    b = [spot_check_draw(2, 0, f, other, BLOCK, ppm=500_000, segments=3) for f in range(64)]
    c = [spot_check_draw(2, 0, f, ROOT, other, ppm=500_000, segments=3) for f in range(64)]
    assert a != b and a != c


def test_the_default_rate_spends_the_budget() -> None:
    for bits in (8, 16):
        for segments in (1, 3, 10):
            rate = default_spot_check_rate(bits, segments)
            expected = rate * mean_checkpoints_per_check(segments) * CHECKPOINT_BYTES_PER_PARAM
            assert expected == pytest.approx(DEFAULT_SPOT_CHECK_BUDGET * bits / 8)
    # the demo's shape: int8 payloads, 3 segments: about 1 submission in 260
    assert 1 / 300 < default_spot_check_rate(8, 3) < 1 / 200


def test_a_check_publishes_what_its_segment_needs() -> None:
    assert checkpoints_for_segment(0, 3) == (0, 1)
    assert checkpoints_for_segment(3, 3) == (3,)
    assert mean_checkpoints_per_check(3) == (2 * 3 + 1) / 4
    for bad in (-1, 4, True):
        with pytest.raises(ValueError):
            checkpoints_for_segment(bad, 3)


def test_rates_outside_zero_to_one_are_refused() -> None:
    assert spot_check_threshold(1_000_000) == 2**64
    assert spot_check_threshold(1) == 2**64 // 10**6
    for bad in (0, -1, 1_000_001, 1.0, True):
        with pytest.raises(ValueError):
            spot_check_threshold(bad)  # type: ignore[arg-type]
    for bad_rate in (0.0, -0.1, 1.01, math.nan, math.inf):
        with pytest.raises(ValueError):
            rate_ppm(bad_rate)
    with pytest.raises(ValueError):
        spot_check_draw(1, 0, 0, b"short", BLOCK, ppm=500_000, segments=3)
    with pytest.raises(ValueError):
        spot_check_draw(1, 0, 0, ROOT, b"short", ppm=500_000, segments=3)


def test_deadlines_leave_half_the_window_to_escalate_and_keep_enough_rounds() -> None:
    assert spot_check_deadline(1000, 40) == 1020
    # a claim may open 40 s after the close and be answered 20 s later: 60 s of 20 s rounds, plus margin
    assert kept_rounds(40, 20) == 5
    assert kept_rounds(5, 20) >= 3


def test_the_filing_window_lasts_its_time_and_its_blocks() -> None:
    """The contract's `_requireFileable`: a claim may be filed until both the window's seconds and
    MIN_CHALLENGE_BLOCKS blocks have passed since the round closed (a producer skewing timestamps
    forward cannot close it on an agent faster than the chain makes blocks)."""
    assert MIN_CHALLENGE_BLOCKS == 50
    closed_at, closed_block = 1000, 100
    assert filing_open(closed_at, closed_block, 1040, 150, 40)  # last second and last block
    assert filing_open(closed_at, closed_block, 10**9, 150, 40)  # time long past, blocks not
    assert filing_open(closed_at, closed_block, 1040, 10**6, 40)  # blocks long past, time not
    assert not filing_open(closed_at, closed_block, 1041, 151, 40)


def test_a_round_is_kept_until_no_claim_can_name_it_on_the_chains_time_and_blocks() -> None:
    """Seen the filing window closed at (T, B): a claim filed before is answered by T + w/2 (and
    B + MIN/2 blocks) and refereed until T + w: kept until both have passed, however many rounds
    closed since (early close makes rounds short) and whatever the timestamps say."""
    seen_at, seen_block = 1041, 151
    assert not claims_over(seen_at, seen_block, seen_at + 40, 10**6, 40)  # the last claim is refereed
    assert not claims_over(seen_at, seen_block, 10**9, seen_block + 25, 40)  # its answer's blocks run
    assert claims_over(seen_at, seen_block, seen_at + 41, seen_block + 26, 40)


def test_rate_ppm_rounds_the_written_decimal_up() -> None:
    assert rate_ppm(0.34) == 340_000  # not 340_001 from 0.34's binary float
    assert rate_ppm(1.0) == 1_000_000
    assert rate_ppm(0.0038095238095238095) == 3810
    assert rate_ppm(1e-9) == 1


def test_deterrence_ppm_is_the_least_rate_that_deters() -> None:
    eth = 10**18
    # the sponsor defaults: 3 ETH over 8 rounds x 3 trainers is 0.125 ETH a submission; 1 ETH stake
    assert reward_per_submission(3 * eth, 8, 3) == eth // 8
    assert deterrence_ppm(eth, 3 * eth, 8, 3) == 250_000
    # 1 wei against 3 ETH: no rate deters (far above 1e6)
    assert deterrence_ppm(1, 3 * eth, 8, 3) > 10**6
    # R rounds up; the least ppm is exact at the boundary
    for stake, pool, rounds, min_t in ((7, 10, 3, 1), (10**18 + 1, 10**19 + 7, 5, 4), (3, 1, 1, 1)):
        least = deterrence_ppm(stake, pool, rounds, min_t)
        need = 2 * reward_per_submission(pool, rounds, min_t) * 10**6
        assert stake * least >= need and (least == 1 or stake * (least - 1) < need)


def test_checkpoint_bytes_per_payload_byte_at_the_defaults() -> None:
    # 25 % of submissions, 7/4 checkpoints a check, 12 bytes against 1 byte per parameter
    assert checkpoint_bytes_per_payload_byte(0.25, 8, 3) == 0.25 * 12 * 7 / 4
    rate = default_spot_check_rate(8, 3)
    assert checkpoint_bytes_per_payload_byte(rate, 8, 3) == pytest.approx(DEFAULT_SPOT_CHECK_BUDGET)
