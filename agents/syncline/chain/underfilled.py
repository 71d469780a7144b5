"""Under-filled tasks: fewer than ``minTrainers`` enrolled when the enrollment deadline passed.

Such a task can never start (``startRun`` reverts ``SynclineUnderfilled``) and holds the sponsor's
escrow, the trainers' stakes and the witnesses' bonds until someone calls ``cancelUnderfilled``:
anyone may (TaskEscrow.sol), once the chain's clock is past the deadline. It credits every stake,
bond and the sponsor's escrow back (pull payments: each account then calls ``withdraw``). The CLI
shows such a task as ``underfilled: cancellable`` and offers ``train cancel-underfilled``; the
trainer agent of such a task cancels it and withdraws its stake on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from syncline.chain.keys import Signer
from syncline.chain.market import SPEC_MIN_TRAINERS, MarketClient, TaskView
from syncline.errors import ChainError
from syncline.protocol.enums import TaskStatus

SPEC_ENROLLMENT_DEADLINE = 15
"""Position of ``enrollmentDeadline`` in the on-chain ``TaskSpec`` (SynclineTypes.sol order)."""


def is_cancellable(t: TaskView, onchain_spec: Sequence[Any], now: int) -> bool:
    """True when ``cancelUnderfilled`` would succeed at chain time ``now`` (the next block's)."""
    return (
        t.status == TaskStatus.ENROLLING
        and now > int(onchain_spec[SPEC_ENROLLMENT_DEADLINE])
        and t.enrolled < int(onchain_spec[SPEC_MIN_TRAINERS])
    )


def cancel(market: MarketClient, caller: Signer, task_id: int) -> bool:
    """Cancel the under-filled task; False (nothing sent twice) when someone else cancelled it first."""
    try:
        market.cancel_underfilled(caller, task_id)
    except ChainError as exc:
        if exc.error_name == "SynclineWrongTaskStatus" and market.task(task_id).status == TaskStatus.CANCELLED:
            return False
        raise
    return True
