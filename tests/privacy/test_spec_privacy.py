"""The spec's ``privacy`` section: parsed, hashed, validated with one-line errors naming ``privacy.*``."""

from __future__ import annotations

from typing import Any

import pytest

from syncline.errors import SpecError
from syncline.protocol.spec import TrainingTaskSpec

from .specs import dp_mapping, dp_spec


def test_the_privacy_section_round_trips_and_is_in_the_spec_hash() -> None:
    spec = dp_spec(epsilon=5.0)
    again = TrainingTaskSpec.from_artifact(spec.canonical_bytes())
    assert again == spec and again.spec_hash == spec.spec_hash
    assert dp_spec(epsilon=6.0).spec_hash != spec.spec_hash
    plain = {k: v for k, v in dp_mapping().items() if k != "privacy"}
    without = TrainingTaskSpec.from_mapping(plain)
    assert b"privacy" not in without.canonical_bytes()  # specs without it keep their hash
    assert without.spec_hash != spec.spec_hash


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("epsilon", 0, r"privacy.epsilon must be within \(0, 100\]"),
        ("epsilon", -1.0, r"privacy.epsilon must be within \(0, 100\]"),
        ("epsilon", 1e300, r"privacy.epsilon must be within \(0, 100\]"),
        ("epsilon", float("inf"), "privacy.epsilon must be a finite number"),
        ("delta", 0, r"privacy.delta must be within \(0, 1\)"),
        ("delta", 1, r"privacy.delta must be within \(0, 1\)"),
        ("clip_norm", 0, "privacy.clip_norm must be > 0"),
        ("sample_rate", 1.5, r"privacy.sample_rate must be within \(0, 1\]"),
        ("accountant", "gdp", "privacy.accountant 'gdp'"),
        ("epsilon", "many", "privacy.epsilon: expected a number"),
    ],
)
def test_a_bad_privacy_field_is_one_line_naming_it(field: str, value: Any, message: str) -> None:
    data = dp_mapping()
    data["privacy"][field] = value
    with pytest.raises(SpecError, match=message) as err:
        TrainingTaskSpec.from_mapping(data).validate()
    assert "\n" not in str(err.value)


def test_missing_and_unknown_privacy_fields_are_named() -> None:
    data = dp_mapping()
    del data["privacy"]["clip_norm"]
    with pytest.raises(SpecError, match="privacy: missing field"):
        TrainingTaskSpec.from_mapping(data)
    data = dp_mapping(noise=3)
    with pytest.raises(SpecError, match="privacy: unknown field"):
        TrainingTaskSpec.from_mapping(data)


def test_too_many_private_steps_for_the_accountant_are_refused() -> None:
    """Every party computes ε from rounds x inner_steps: the spec bounds it per accountant."""
    dp_spec(rounds=100, inner_steps=100, accountant="prv")  # 10,000 steps: the PRV limit
    with pytest.raises(SpecError, match="exceeds the prv accountant's limit of 10000 steps"):
        dp_spec(rounds=101, inner_steps=100, accountant="prv")
    with pytest.raises(SpecError, match="exceeds the rdp accountant's limit"):
        dp_spec(rounds=1001, inner_steps=1000)
