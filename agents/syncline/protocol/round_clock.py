"""A round's commit deadline as the contract rules it (``SynclineStorage._commitDeadline``,
docs/protocol.md §10.5), for readers that have the round's commits but not the chain's view.

The deadline is ``openedAt + roundDuration``; once that has passed with nobody committed on time,
it is extended once, by :data:`ROUND_EXTENSION` round durations (a machine too slow for the round,
not one lazy trainer), and stays extended: every commit after the first deadline is late."""

from __future__ import annotations

from collections.abc import Iterable

ROUND_EXTENSION = 3
"""Round durations a round nobody committed to by its deadline is extended by (once)."""


def commit_deadline(deadline: int, round_duration_s: int, commit_times: Iterable[int], now: int) -> int:
    """The round's commit deadline at chain time ``now``: ``deadline`` (its opening plus the round
    duration), or ``deadline + ROUND_EXTENSION * round_duration_s`` when ``now`` is past it and no
    commit came at or before it (``commit_times``: the block times of the round's commits)."""
    if now > deadline and not any(t <= deadline for t in commit_times):
        return deadline + ROUND_EXTENSION * round_duration_s
    return deadline
