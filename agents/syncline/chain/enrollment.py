"""What happens when a task's enrollment deadline passes: someone must act, and anyone may.

The contract starts a run by itself only when ``maxTrainers`` have enrolled. Past the enrollment
deadline (the chain's clock), a task still enrolling needs a transaction, and any account may send
it (TaskEscrow.sol, TrainerStaking.sol):

- at least ``minTrainers`` enrolled: ``startRun`` opens round 0 with them (:func:`is_startable`);
- fewer (under-filled): the run can never start (``startRun`` reverts ``SynclineUnderfilled``), and
  ``cancelUnderfilled`` credits the sponsor's escrow, every stake and every witness bond back (pull
  payments: each account then calls ``withdraw``) (:func:`is_cancellable`).

Until then the money stays locked. The CLI shows such a task as ``enrollment closed: startable``
or ``underfilled: cancellable`` and offers ``train start-run`` and ``train cancel-underfilled``; the
trainer agent of such a task sends the transaction itself (and, cancelled, withdraws its stake).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from syncline.chain.keys import Signer
from syncline.chain.market import SPEC_MIN_TRAINERS, MarketClient, TaskView
from syncline.errors import ChainError
from syncline.protocol.enums import TaskStatus

SPEC_ENROLLMENT_DEADLINE = 15
"""Position of ``enrollmentDeadline`` in the on-chain ``TaskSpec`` (SynclineTypes.sol order)."""


def _closed(t: TaskView, onchain_spec: Sequence[Any], now: int) -> bool:
    return t.status == TaskStatus.ENROLLING and now > int(onchain_spec[SPEC_ENROLLMENT_DEADLINE])


def is_cancellable(t: TaskView, onchain_spec: Sequence[Any], now: int) -> bool:
    """True when ``cancelUnderfilled`` would succeed at chain time ``now`` (the next block's)."""
    return _closed(t, onchain_spec, now) and t.enrolled < int(onchain_spec[SPEC_MIN_TRAINERS])


def is_startable(t: TaskView, onchain_spec: Sequence[Any], now: int) -> bool:
    """True when ``startRun`` would succeed at chain time ``now``: the deadline passed with at least
    ``minTrainers`` (and fewer than ``maxTrainers``, else the run has started) enrolled."""
    return _closed(t, onchain_spec, now) and t.enrolled >= int(onchain_spec[SPEC_MIN_TRAINERS])


def cancel(market: MarketClient, caller: Signer, task_id: int) -> bool:
    """Cancel the under-filled task; False (nothing sent twice) when someone else cancelled it first."""
    return _first(lambda: market.cancel_underfilled(caller, task_id), market, task_id, TaskStatus.CANCELLED)


def start(market: MarketClient, caller: Signer, task_id: int) -> bool:
    """Start the run with the trainers enrolled; False when someone else started it first."""
    return _first(lambda: market.start_run(caller, task_id), market, task_id, TaskStatus.RUNNING)


def _first(send: Callable[[], object], market: MarketClient, task_id: int, after: TaskStatus) -> bool:
    try:
        send()
    except ChainError as exc:
        if exc.error_name == "SynclineWrongTaskStatus" and market.task(task_id).status == after:
            return False
        raise
    return True


def act_if_closed(
    market: MarketClient, caller: Signer, t: TaskView, now: int, role: str, log: Any
) -> Literal["started", "cancelled", None]:
    """What an agent (trainer or witness) does when the task's enrollment deadline has passed at
    chain time ``now``: start the run (``"started"``: go on, the run is open), or cancel the
    under-filled task and withdraw its own credit (``"cancelled"``: done); each in one log line
    ``{role}.run_started`` or ``{role}.underfilled_cancelled``. None before the deadline."""
    spec = market.spec_tuple(t.task_id)
    if is_startable(t, spec, now):
        started = start(market, caller, t.task_id)
        log.info(f"{role}.run_started", task_id=t.task_id, trainers=t.enrolled, started_by_me=started)
        return "started"
    if not is_cancellable(t, spec, now):
        return None
    cancelled = cancel(market, caller, t.task_id)
    log.info(
        f"{role}.underfilled_cancelled",
        task_id=t.task_id,
        enrolled=t.enrolled,
        cancelled_by_me=cancelled,
        withdrawn_wei=market.claim(caller),
    )
    return "cancelled"
