"""Hostile values in a spec are one SpecError line, fast (issue 26 items 4, 7 and 9).

* ``privacy.epsilon = 1e300`` made Opacus's noise-multiplier search loop forever: /privacy and
  /receipt spun server threads until the API stopped answering.
* A 400-digit ``privacy.delta`` raised ``OverflowError`` out of the spec parser.
* A lone surrogate in a spec string made ``spec_hash`` raise ``UnicodeEncodeError``; a NUL byte
  went through.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from conftest import OFFLINE_DEADLINE, OFFLINE_WITNESSES, build_spec
from syncline.errors import SpecError
from syncline.privacy.accounting import MAX_SIGMA_BISECTIONS, PrivacyPlan, noise_multiplier_for
from syncline.protocol.spec import MAX_PRIVACY_EPSILON, PrivacySpec, TrainingTaskSpec, check_spec_strings

PRIVACY = {"epsilon": 5.0, "delta": 1e-5, "clip_norm": 1.0, "sample_rate": 0.1}


def spec_doc(**privacy: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        build_spec(witnesses=OFFLINE_WITNESSES, enrollment_deadline=OFFLINE_DEADLINE).canonical_bytes()
    )
    doc["privacy"] = {**PRIVACY, **privacy}
    return doc


def one_line_spec_error(doc: dict[str, Any], match: str) -> str:
    with pytest.raises(SpecError, match=match) as info:
        TrainingTaskSpec.from_mapping(doc)
    text = str(info.value)
    assert "\n" not in text and len(text) < 300, text
    return text


def within(seconds: float, fn: Any) -> Any:
    """``fn()`` run in a thread that must finish within ``seconds`` (the old search never did)."""
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(("ok", fn()))
        except BaseException as exc:
            result.append(("raised", exc))

    thread = threading.Thread(target=run, daemon=True)
    started = time.perf_counter()
    thread.start()
    thread.join(seconds)
    assert result, f"still running after {seconds} s"
    return result[0], time.perf_counter() - started


def test_a_huge_epsilon_is_refused_by_the_spec_and_the_search_returns_fast() -> None:
    one_line_spec_error(spec_doc(epsilon=1e300), r"privacy\.epsilon must be within \(0, 100\]")
    one_line_spec_error(spec_doc(epsilon=MAX_PRIVACY_EPSILON * 1.01), r"privacy\.epsilon")
    TrainingTaskSpec.from_mapping(spec_doc(epsilon=MAX_PRIVACY_EPSILON))  # the bound itself is valid
    # a target that bypasses validation (a PrivacySpec built in code) still cannot spin the search
    hostile = PrivacySpec(epsilon=1e300, delta=1e-5, clip_norm=1.0, sample_rate=0.1)
    (kind, value), elapsed = within(10, lambda: PrivacyPlan.for_target(hostile, rounds=4, inner_steps=50))
    assert kind == "raised" and isinstance(value, SpecError), value
    assert elapsed < 5


def test_the_search_is_bounded_and_agrees_with_opacus_on_ordinary_targets() -> None:
    from opacus.accountants.utils import get_noise_multiplier

    assert MAX_SIGMA_BISECTIONS <= 200
    for eps, rate, steps in ((5.0, 0.1, 200), (1.0, 0.05, 100), (MAX_PRIVACY_EPSILON, 1.0, 1)):
        ours = noise_multiplier_for(eps, 1e-5, rate, steps, "rdp")
        theirs = get_noise_multiplier(
            target_epsilon=eps, target_delta=1e-5, sample_rate=rate, steps=steps, epsilon_tolerance=0.01
        )
        assert ours == theirs


def test_a_400_digit_delta_is_one_spec_error_line() -> None:
    huge = 10**400
    text = one_line_spec_error(spec_doc(delta=huge), r"privacy\.delta: expected a number")
    assert str(huge) not in text
    for field in ("epsilon", "clip_norm", "sample_rate"):
        one_line_spec_error(spec_doc(**{field: -huge}), rf"privacy\.{field}")
    artifact = json.dumps(spec_doc(delta=huge)).encode()
    with pytest.raises(SpecError, match=r"privacy\.delta"):
        TrainingTaskSpec.from_artifact(artifact)


@pytest.mark.parametrize(
    ("where", "value"),
    [("name", "bad\ud800name"), ("name", "nul\x00name"), ("model.family", "gpt\udfff"), ("metadata.note", "a\x00")],
)
def test_nul_and_lone_surrogates_are_refused_everywhere(where: str, value: str) -> None:
    doc = spec_doc()
    doc.pop("privacy")
    node = doc
    *parents, leaf = where.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    one_line_spec_error(doc, "NUL|surrogate")
    with pytest.raises(SpecError):  # keys too
        check_spec_strings({"metadata": {"k\ud800": 1}})


def test_spec_hash_of_a_spec_built_in_code_never_raises_unicode_errors() -> None:
    spec = build_spec(witnesses=OFFLINE_WITNESSES, enrollment_deadline=OFFLINE_DEADLINE, name="x\ud800")
    with pytest.raises(SpecError, match="not valid Unicode"):
        _ = spec.spec_hash


def test_the_bisection_stops_at_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop Opacus leaves unbounded: with a bound of 2 steps the search gives up in one line."""
    from syncline.privacy import accounting

    monkeypatch.setattr(accounting, "MAX_SIGMA_BISECTIONS", 2)
    noise_multiplier_for.cache_clear()
    with pytest.raises(SpecError, match="did not reach the tolerance in 2 steps"):
        noise_multiplier_for(3.0, 1e-5, 0.05, 77, "rdp")
    noise_multiplier_for.cache_clear()
