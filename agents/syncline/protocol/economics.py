"""What cheating earns: the expected profit of each strategy a trainer or a claimant can play,
relative to honest behaviour, from a task's on-chain parameters (``docs/fraud-proofs.md``,
"The economics"). Pure arithmetic in exact fractions; ``scripts/bench/cheat_economics.py``
evaluates it at the sponsor defaults and at the extreme specs ``postTask`` accepts.

The model, per submission (one trainer, one round):

* ``R`` the most a submission earns: the reward pool over ``rounds * minTrainers`` (the chain's
  reward per submission; a trainer's pro-rata share of a round is at most this while the task has
  its minimum trainer count). ``c`` the cost of the honest work it stands for: honest work pays
  ``R - c >= 0``, so a cheat saves at most ``R``; every figure takes that worst case, ``c = R``.
* The committee draws a submission with probability ``p = spotCheckPpm / 1e6`` and then one of its
  ``S + 1`` segments uniformly (``S`` training segments, then the derivation segment).
* A conviction slashes the whole stake ``St``, revokes the round's reward ``R`` and evicts the
  trainer (its later honest profit is lost too: left out, which only flatters the cheater).

Against honest play, a cheat that saves ``g`` of the work and is convicted with probability ``q``
earns ``g - q * (St + R)``: honest play nets ``R - c``; the cheat, undetected, ``R - c + g``, and
detected ``-St - (c - g)`` (stake slashed, reward revoked, the work it did do spent).

A claimant whose claim is answered and acquitted loses at most the referees' cost (half its bond);
an honest accused answers within the response window (``floor(challengeWindow / 2)``, at least
300 s on chain), so a claim against an honest trainer is never upheld.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from syncline.protocol.spot_checks import PPM_SCALE, reward_per_submission


@dataclass(frozen=True)
class Terms:
    """One task's parameters as the contract holds them (wei, seconds, counts)."""

    reward_pool_wei: int
    rounds: int
    min_trainers: int
    trainer_stake_wei: int
    spot_check_ppm: int
    segments: int
    """S: training segments per submission, ``ceil(innerSteps / checkpointInterval)``."""
    challenge_bond_wei: int
    challenge_window_s: int
    referee_cost_fraction: Fraction = Fraction(1, 2)
    """The most of its bond an acquitted claimant pays the referees (``docs/protocol.md``)."""

    @property
    def reward_per_submission(self) -> Fraction:
        """``R`` exactly as ``postTask``'s deterrence rule computes it (rounded up)."""
        return Fraction(reward_per_submission(self.reward_pool_wei, self.rounds, self.min_trainers))

    @property
    def draw(self) -> Fraction:
        return Fraction(self.spot_check_ppm, PPM_SCALE)


@dataclass(frozen=True)
class Outcome:
    """One strategy: what it saves or takes against honest play, how likely it is to be
    convicted (for a claimant: to fail), and what that costs."""

    strategy: str
    gain_wei: Fraction
    detection: Fraction
    loss_wei: Fraction
    note: str

    @property
    def expected_profit_wei(self) -> Fraction:
        """Expected profit relative to honest behaviour: ``gain - detection * (gain + loss)``."""
        return self.gain_wei - self.detection * (self.gain_wei + self.loss_wei)

    def to_json(self) -> dict[str, object]:
        return {
            "strategy": self.strategy,
            "gain_wei": str(math.floor(self.gain_wei)),
            "detection": float(self.detection),
            "loss_wei": str(math.floor(self.loss_wei)),
            "expected_profit_wei": str(math.floor(self.expected_profit_wei)),
            "expected_profit_eth": float(self.expected_profit_wei) / 1e18,
            "profitable": self.expected_profit_wei > 0,
            "note": self.note,
        }


def _conviction_loss(terms: Terms, gain: Fraction) -> Fraction:
    """What a convicted cheat gives up besides its gain: the stake and the round's reward, less
    the work it did not do (``c - gain`` spent, with ``c = R``)."""
    return terms.trainer_stake_wei + terms.reward_per_submission - gain


def lazy(terms: Terms, fraction: Fraction) -> Outcome:
    """Skips ``fraction`` of the inner steps, packed into as few segments as it can (the cheater's
    best case): ``ceil(fraction * S)`` segments fail a replay (at least one)."""
    bad = max(1, math.ceil(fraction * terms.segments))
    gain = fraction * terms.reward_per_submission
    return Outcome(
        f"lazy {float(fraction):.0%}",
        gain,
        terms.draw * Fraction(bad, terms.segments + 1),
        _conviction_loss(terms, gain),
        f"{bad} of the {terms.segments + 1} segments a draw picks from fail a replay",
    )


def answer_and_withhold(terms: Terms) -> Outcome:
    """Skips the work, answers every claim on chain and never publishes the checkpoints: once
    drawn, whatever the segment, the referees find the committed checkpoint absent from a store
    that answers and vote it unavailable, which convicts at the claim's deadline (k of N)."""
    gain = terms.reward_per_submission
    return Outcome(
        "answer-and-withhold",
        gain,
        terms.draw,
        _conviction_loss(terms, gain),
        "every drawn segment is convicted as unavailable at the claim's deadline",
    )


def fake_gradient(terms: Terms) -> Outcome:
    """Trains honestly but commits a payload its last checkpoint does not derive (to steer the
    model): it saves nothing, and the derivation segment convicts it when drawn."""
    return Outcome(
        "fake gradient",
        Fraction(0),
        terms.draw * Fraction(1, terms.segments + 1),
        _conviction_loss(terms, Fraction(0)),
        "only the derivation segment fails; the cheat saves no work",
    )


def free_rider(terms: Terms) -> Outcome:
    """Waits for another trainer's payload to copy it (plus noise) before committing. No payload
    of the open round is published before its commit phase closes (``docs/protocol.md``), so it has
    nothing to copy when it must commit: it fabricates its work instead (every training segment
    fails a replay), or commits nothing and earns nothing (never more than honest play)."""
    gain = terms.reward_per_submission
    return Outcome(
        "free-rider (copy + noise)",
        gain,
        terms.draw * Fraction(terms.segments, terms.segments + 1),
        _conviction_loss(terms, gain),
        "no payload to copy before the commit closes; a fabricated one fails every training segment",
    )


def false_claim(terms: Terms) -> Outcome:
    """A claim against an honest trainer: it answers within the response window and k honest
    referees acquit it; the claimant gets its bond back less the referees' cost."""
    return Outcome(
        "false claim against an honest trainer",
        Fraction(0),
        Fraction(1),
        terms.challenge_bond_wei * terms.referee_cost_fraction,
        "answered and acquitted: the claimant pays the referees' cost",
    )


def racing_claim(terms: Terms, pause_s: float, answer_s: float) -> Outcome:
    """A claim filed while an honest trainer is paused for ``pause_s`` seconds: it still answers
    ``answer_s`` seconds after it resumes; it is convicted only if that overruns the response
    window (``floor(challengeWindow / 2)``), and then the claimant earns half the slashed stake."""
    window = terms.challenge_window_s // 2
    missed = pause_s + answer_s > window
    bounty = Fraction(terms.trainer_stake_wei, 2)
    if missed:
        return Outcome(
            f"claim racing a trainer paused {pause_s:g} s",
            bounty,
            Fraction(0),
            Fraction(0),
            f"the {window} s response window is overrun: the honest trainer is convicted",
        )
    return Outcome(
        f"claim racing a trainer paused {pause_s:g} s",
        Fraction(0),
        Fraction(1),
        terms.challenge_bond_wei * terms.referee_cost_fraction,
        f"answered {pause_s + answer_s:g} s into the {window} s response window, then acquitted",
    )


def strategies(terms: Terms, *, answer_s: float) -> list[Outcome]:
    """Every strategy of issue 27's list, for ``terms``; ``answer_s`` is how long an honest agent
    takes to answer a claim once it runs (measured by the benchmark)."""
    window = terms.challenge_window_s // 2
    return [
        lazy(terms, Fraction(1, 10)),
        lazy(terms, Fraction(1, 2)),
        free_rider(terms),
        answer_and_withhold(terms),
        fake_gradient(terms),
        false_claim(terms),
        racing_claim(terms, pause_s=window / 10, answer_s=answer_s),
    ]
