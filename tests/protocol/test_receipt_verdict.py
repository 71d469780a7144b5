"""The receipt says plainly when a run trained nothing (issue 26 item 10): ``trained_nothing``
when no round accepted any work, each trainer's late commits, and a one-line verdict that the
CLI, the API and the demo print."""

from __future__ import annotations

from typing import Any

from syncline.protocol.enums import TaskStatus
from syncline.protocol.receipt import TrainingReceipt

ZERO = b"\x00" * 32


def _raw(trainers: list[tuple[int, int, int, int]], finalized: int, carried: int) -> tuple[Any, ...]:
    """A ``getReceipt`` tuple: trainers as (submitted, accepted, missed, late)."""
    lines = [
        (f"0x{i + 1:040x}", i, False, s, a, m, a * 2, 10**18 if a else 0, 10**18, 0, late)
        for i, (s, a, m, late) in enumerate(trainers)
    ]
    witnesses = [(f"0x{i + 9:040x}", 0, 0, 0, 0, 5 * 10**17, 0) for i in range(3)]
    return (1, ZERO, int(TaskStatus.SEALED), ZERO, 8, finalized, carried, 0, 3 * 10**18, 0, lines, witnesses)


def test_a_sealed_run_with_nothing_accepted_trained_nothing() -> None:
    r = TrainingReceipt.from_chain(_raw([(0, 0, 0, 0)] * 3, finalized=0, carried=8))
    assert r.status == TaskStatus.SEALED
    assert r.trained_nothing
    assert r.verdict().startswith("trained nothing: no round accepted work (0 finalized, 8 carried forward of 8")
    m = r.to_mapping()
    assert m["trained_nothing"] is True and m["late_commits"] == 0 and m["verdict"] == r.verdict()


def test_finalized_rounds_that_accepted_nothing_are_still_nothing() -> None:
    # The chain finalized rounds whose votes accepted no submission: nothing was trained.
    r = TrainingReceipt.from_chain(_raw([(8, 0, 0, 0)] * 3, finalized=8, carried=0))
    assert r.trained_nothing


def test_late_commits_are_counted_per_trainer_and_in_the_verdict() -> None:
    r = TrainingReceipt.from_chain(_raw([(8, 8, 0, 2), (8, 8, 0, 1), (7, 7, 1, 0)], finalized=8, carried=0))
    assert not r.trained_nothing
    assert [t.late for t in r.trainers] == [2, 1, 0]
    assert r.late_commits == 3
    assert r.verdict() == "trained 8 of 8 rounds (23 accepted submission(s), 3 late commit(s))"
    assert [t["late"] for t in r.to_mapping()["trainers"]] == [2, 1, 0]


def test_a_receipt_without_the_late_field_reads_as_none_late() -> None:
    raw = list(_raw([(1, 1, 0, 0)], finalized=1, carried=0))
    raw[10] = [line[:10] for line in raw[10]]  # an older market's TrainerReceipt
    r = TrainingReceipt.from_chain(tuple(raw))
    assert r.trainers[0].late == 0 and not r.trained_nothing
