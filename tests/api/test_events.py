"""The indexer's pure logic: what a batch of events says changed, validation loss, timeline lines."""

from __future__ import annotations

from typing import Any

import pytest

from syncline.api.events import MarketEvent, changes_of, timeline_entry, validation_loss
from syncline.api.specs import wei_strings

A = "0x" + "aa" * 20


def event(name: str, **args: Any) -> MarketEvent:
    return MarketEvent(name, 10, "0x" + "00" * 32, 0, "0x" + "11" * 32, 1_700_000_000, args)


def test_changes_name_the_rows_to_refresh() -> None:
    events = [
        event("SubmissionCommitted", taskId=2, round=1, fragment=3, trainer=A.upper().replace("0X", "0x")),
        event("RoundsInvalidated", taskId=2, fromRound=1, throughRound=3, restoredRoot="0x" + "22" * 32),
        event("ChallengeOpened", challengeId=9, taskId=4, round=0, kind=2),
        event("RefereeVoted", challengeId=9, witness=A, guilty=True),
        event("RefereeVoted", challengeId=5, witness=A, guilty=False),
        event("RoundFinalized", taskId=2, round=1, result="0x" + "33" * 32),
        event("Withdrawn", account=A, amount=1),
    ]
    changes = changes_of(events, {5: 7})
    assert changes.tasks == {2, 4, 7}
    assert changes.rounds == {(2, 1), (2, 2), (2, 3), (4, 0)}
    assert changes.challenges == {9, 5}
    assert changes.commitments == {(2, 1, 3, A)}
    assert changes.closed_rounds == {(2, 1)}
    assert not changes_of([event("Withdrawn", account=A, amount=1)], {})


def test_validation_loss_is_the_median_of_the_matching_votes() -> None:
    result = "0x" + "ab" * 32
    votes = [(result, 4_000_000), (result.upper().replace("0X", "0x"), 4_400_000), ("0x" + "cd" * 32, 9_000_000)]
    assert validation_loss(votes, result) == pytest.approx(4.2)
    assert validation_loss([*votes, (result, 4_100_000)], result) == pytest.approx(4.1)
    assert validation_loss([(result, 0)], result) is None  # a vote without a metric
    assert validation_loss([], result) is None


def test_timeline_lines_and_wei_strings() -> None:
    kind, round_, text = timeline_entry(event("TrainerEvicted", taskId=1, trainer=A, round=4)) or ("", None, "")
    assert (kind, round_) == ("evicted", 4) and "\n" not in text and A[:10] in text
    entry = timeline_entry(event("ChallengeResolved", challengeId=3, taskId=1, status=2, slashed=10**18, bounty=1))
    assert entry is not None and entry[0] == "challenge_resolved" and "upheld: 1 ETH slashed" in entry[2]
    assert timeline_entry(event("VoteCast", taskId=1, round=0)) is None
    data = {"stake_wei": 2**200, "n": 3, "lines": [{"fee_wei": 5, "ok": True}]}
    assert wei_strings(data) == {"stake_wei": str(2**200), "n": 3, "lines": [{"fee_wei": "5", "ok": True}]}
