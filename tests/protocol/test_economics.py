"""The economics model behind ``scripts/bench/cheat_economics.py`` (issue 27): against honest play
every cheat of the list loses money at every spec the deterrence rule admits, and the model says
so only because of the rule (a stake below it makes cheating pay)."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from syncline.protocol import economics
from syncline.protocol.spot_checks import DETERRENCE_MARGIN, PPM_SCALE, deterrence_ppm, reward_per_submission

ETH = 10**18


def _terms(pool: int, rounds: int, trainers: int, stake: int, ppm: int, segments: int) -> economics.Terms:
    return economics.Terms(
        reward_pool_wei=pool,
        rounds=rounds,
        min_trainers=trainers,
        trainer_stake_wei=stake,
        spot_check_ppm=ppm,
        segments=segments,
        challenge_bond_wei=ETH // 10,
        challenge_window_s=600,
    )


@settings(max_examples=300, deadline=None)
@given(
    pool=st.integers(1, 10**24),
    rounds=st.integers(1, 1000),
    trainers=st.integers(1, 64),
    stake=st.integers(1, 10**26),
    segments=st.integers(1, 1000),
)
def test_no_cheat_pays_under_the_deterrence_rule(
    pool: int, rounds: int, trainers: int, stake: int, segments: int
) -> None:
    ppm = deterrence_ppm(stake, pool, rounds, trainers)
    if ppm > PPM_SCALE:  # no rate deters this stake: postTask refuses every rate
        return
    r = reward_per_submission(pool, rounds, trainers)
    assert stake * ppm >= DETERRENCE_MARGIN * r * PPM_SCALE  # what postTask checks
    for outcome in economics.strategies(_terms(pool, rounds, trainers, stake, ppm, segments), answer_s=60):
        assert outcome.expected_profit_wei <= 0, outcome


def test_below_the_rule_laziness_pays() -> None:
    """The attack's spec (1 wei against a 3 ETH pool, the old 0.38 % rate): every compute-saving
    cheat was worth doing."""
    terms = _terms(3 * ETH, 8, 3, 1, 3_810, 3)
    profits = {o.strategy: o.expected_profit_wei for o in economics.strategies(terms, answer_s=60)}
    assert profits["lazy 50%"] > 0 and profits["answer-and-withhold"] > Fraction(ETH, 9)


def test_a_window_too_short_to_answer_lets_a_racing_claimant_win() -> None:
    """The 5 s window of the attack: a trainer paused 4 s cannot answer; at 600 s it always can."""
    defaults = _terms(3 * ETH, 8, 3, ETH, 250_000, 3)
    short = economics.racing_claim(dataclasses.replace(defaults, challenge_window_s=5), pause_s=4, answer_s=1)
    assert short.expected_profit_wei == Fraction(ETH, 2)
    safe = economics.racing_claim(defaults, pause_s=30, answer_s=60)
    assert safe.expected_profit_wei == -Fraction(ETH, 20)
