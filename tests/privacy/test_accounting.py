"""The ε a DP task reports is what Opacus's own accountant computes, and stays within the target."""

from __future__ import annotations

import pytest
from opacus.accountants import PRVAccountant, RDPAccountant
from opacus.accountants.utils import get_noise_multiplier

from syncline.errors import SpecError
from syncline.privacy.accounting import PrivacyPlan, epsilon_spent, noise_multiplier_for
from syncline.protocol.spec import PrivacySpec, TrainingTaskSpec

from .specs import dp_spec


def test_the_noise_multiplier_is_opacuss_for_the_target_over_all_steps() -> None:
    spec = dp_spec(epsilon=5.0, rounds=4, inner_steps=10, sample_rate=0.05)
    plan = PrivacyPlan.of(spec)
    expected = get_noise_multiplier(
        target_epsilon=5.0, target_delta=1e-5, sample_rate=0.05, steps=40, accountant="rdp", epsilon_tolerance=0.01
    )
    assert plan.noise_multiplier == pytest.approx(expected, rel=0, abs=0)
    assert plan.noise_std == pytest.approx(expected * spec.privacy.clip_norm)  # type: ignore[union-attr]


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
def test_epsilon_per_round_equals_opacuss_accountant_stepped_by_hand(accountant: str) -> None:
    """Opacus's accountant fed one ``step`` per inner step of the rounds trained gives the same ε
    after every round; the last is within the target and close to it."""
    spec = dp_spec(epsilon=2.0, rounds=3, inner_steps=6, sample_rate=0.1, accountant=accountant)
    plan = PrivacyPlan.of(spec)
    trained = [True, False, True]
    reported = plan.epsilon_per_round(trained)
    acc = RDPAccountant() if accountant == "rdp" else PRVAccountant()
    by_hand = []
    for flag in trained:
        if flag:
            for _ in range(spec.inner_steps):
                acc.step(noise_multiplier=plan.noise_multiplier, sample_rate=0.1)
        by_hand.append(acc.get_epsilon(delta=1e-5) if acc.history else 0.0)
    assert reported == pytest.approx(by_hand, rel=1e-9 if accountant == "rdp" else 1e-3)
    assert reported[1] == reported[0]  # no training in round 1: nothing spent
    full = plan.epsilon_per_round([True] * 3)
    assert full[0] < full[1] < full[2] <= 2.0 + 1e-9
    assert full[2] > 2.0 * 0.9  # the noise is not wastefully large


def test_no_training_spends_nothing_and_more_noise_spends_less() -> None:
    assert epsilon_spent(1.0, 0.1, 0, 1e-5, "rdp") == 0.0
    assert epsilon_spent(2.0, 0.1, 50, 1e-5, "rdp") < epsilon_spent(1.0, 0.1, 50, 1e-5, "rdp")


def test_a_smaller_epsilon_needs_more_noise() -> None:
    sigmas = [noise_multiplier_for(e, 1e-5, 0.05, 100, "rdp") for e in (1.0, 5.0, 10.0)]
    assert sigmas[0] > sigmas[1] > sigmas[2] > 0


def test_a_task_without_privacy_has_no_plan() -> None:
    spec = dp_spec()
    plain: TrainingTaskSpec = spec.with_updates(privacy=None)
    with pytest.raises(SpecError, match="not differentially private"):
        PrivacyPlan.of(plain)


def test_the_ledger_names_every_trainer() -> None:
    plan = PrivacyPlan.of(dp_spec(rounds=2, inner_steps=4))
    ledger = plan.ledger({"0xa": [True, True], "0xb": [False, True]})
    assert ledger["0xa"][1] > ledger["0xb"][1] == ledger["0xa"][0] > 0 == ledger["0xb"][0]
    assert isinstance(PrivacySpec(1.0, 1e-5, 1.0, 0.1), PrivacySpec)
