"""Commit, then reveal: a round's payloads are published only once its commit phase has closed.

A commitment binds a payload's digest and chunk root, so publishing the payload is not needed to
commit. While the round is still open a payload on the blob store is a gift to any trainer that
has not committed yet: it copies it, perturbs it, and commits that (free-riding). So an honest
trainer keeps its payload sealed (in its outbox, never uploaded) until the round's commit phase
closes on chain, and only then reveals it (docs/protocol.md §10.6):

* the commit phase of round ``r`` is closed once every active trainer has committed (early close:
  ``roundWorkComplete``, ``RoundWorkComplete``), once chain time is past ``commitDeadline``, or
  once the task has moved past ``r``;
* the reveal window is :func:`reveal_window_s` seconds from the close: a witness waits that long
  at most for a committed payload it cannot fetch yet, then votes without it. A payload not
  revealed in time is simply left out (its trainer earns nothing for the round; never a slash).
"""

from __future__ import annotations

from syncline.chain.market import MarketClient
from syncline.protocol.enums import TaskStatus
from syncline.run.loop import pending_time

REVEAL_MIN_S = 4
"""The shortest reveal window, in seconds: one upload and a few blocks on a small payload."""


def reveal_window_s(grace_window_s: int) -> int:
    """Seconds after a round's commit phase closes in which its committed payloads are revealed:
    half the grace window (the other half is left to compute and vote), at least
    :data:`REVEAL_MIN_S`."""
    return max(REVEAL_MIN_S, grace_window_s // 2)


def commit_phase_closed(market: MarketClient, task_id: int, round_: int) -> bool:
    """Whether round ``round_``'s commit phase has closed on chain (nothing more can be committed
    to it): every active trainer committed, chain time is past the commit deadline, or the task
    has moved past the round."""
    t = market.task(task_id)
    if t.status != TaskStatus.RUNNING or t.current_round > round_:
        return True
    if t.current_round < round_:
        return False
    if market.round_work_complete(task_id, round_):
        return True
    return pending_time(market.w3) > market.commit_deadline(task_id)
