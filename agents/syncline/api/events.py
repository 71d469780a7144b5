"""Market events as the indexer stores them, and what each one says changed (pure: no I/O).

A log is decoded once into :class:`MarketEvent` (arguments JSON-safe: bytes as 0x-hex, addresses
lowercase). :func:`changes_of` turns a batch of events into the set of read-model rows to
refresh from the contract's views; :func:`timeline_entry` turns one into a line of a run's
timeline.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from syncline.protocol.enums import ChallengeKind, ChallengeStatus

ETH = 10**18
METRIC_SCALE = 1e6  # VoteCast.metric is the validation loss x 1e6


@dataclass(frozen=True)
class MarketEvent:
    """One decoded market log."""

    name: str
    block_number: int
    block_hash: str
    log_index: int
    tx_hash: str
    timestamp: int
    args: dict[str, Any]

    @property
    def task_id(self) -> int | None:
        value = self.args.get("taskId")
        return None if value is None else int(value)

    @property
    def round(self) -> int | None:
        value = self.args.get("round")
        return None if value is None else int(value)


def json_safe(value: Any) -> Any:
    """Decoded ABI values as JSON: bytes as 0x-hex, addresses lowercase, tuples as lists."""
    if isinstance(value, bytes | bytearray):
        return "0x" + bytes(value).hex()
    if isinstance(value, str):
        return value.lower() if value.startswith("0x") and len(value) == 42 else value
    if isinstance(value, bool | int):
        return value
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return str(value)


@dataclass
class Changes:
    """What a batch of events says changed, as the keys of the rows to refresh."""

    tasks: set[int] = field(default_factory=set)
    new_tasks: set[int] = field(default_factory=set)
    rounds: set[tuple[int, int]] = field(default_factory=set)
    challenges: set[int] = field(default_factory=set)
    # (task, round, fragment, trainer) of each new commitment: its loss report is fetched.
    commitments: set[tuple[int, int, int, str]] = field(default_factory=set)
    # Rounds that closed (finalized or carried forward): their missing loss reports get another try.
    closed_rounds: set[tuple[int, int]] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.tasks or self.rounds or self.challenges)


ROUND_EVENTS = frozenset(
    {
        "RoundOpened",
        "SubmissionCommitted",
        "RoundWorkComplete",
        "VoteCast",
        "DissentRecorded",
        "RoundFinalized",
        "RoundCarriedForward",
        "RoundMissed",
        "RewardRevoked",
        "ChallengeOpened",
    }
)


def changes_of(events: Iterable[MarketEvent], challenge_tasks: Mapping[int, int]) -> Changes:
    """Rows to refresh after ``events``. ``challenge_tasks`` maps known challenge ids to their task
    (for ``RefereeVoted``, which names the challenge only)."""
    out = Changes()
    known = dict(challenge_tasks)
    for ev in events:
        a = ev.args
        task = ev.task_id
        if ev.name in ("ChallengeOpened", "ChallengeResolved", "RefereeVoted"):
            cid = int(a["challengeId"])
            out.challenges.add(cid)
            if task is not None:
                known[cid] = task
            task = known.get(cid, task)
        if task is None:
            continue  # Withdrawn: an account-level event
        out.tasks.add(task)
        if ev.name == "TaskPosted":
            out.new_tasks.add(task)
        if ev.name in ROUND_EVENTS and ev.round is not None:
            out.rounds.add((task, ev.round))
        if ev.name == "TrainerEvicted":
            out.rounds.add((task, int(a["round"])))
        if ev.name == "RoundsInvalidated":
            out.rounds.update((task, r) for r in range(int(a["fromRound"]), int(a["throughRound"]) + 1))
        if ev.name == "SubmissionCommitted":
            out.commitments.add((task, int(a["round"]), int(a["fragment"]), str(a["trainer"]).lower()))
        if ev.name in ("RoundFinalized", "RoundCarriedForward"):
            out.closed_rounds.add((task, int(a["round"])))
    return out


def validation_loss(votes: Iterable[tuple[str, int]], result: str) -> float | None:
    """Median of ``metric / 1e6`` over the votes ``(result, metric)`` that match the finalized
    ``result``; votes without a metric (0) do not count. ``None`` when there is none."""
    metrics = [m / METRIC_SCALE for r, m in votes if r.lower() == result.lower() and m > 0]
    return float(statistics.median(metrics)) if metrics else None


def _eth(wei: int) -> str:
    return f"{wei / ETH:.4g} ETH"


def _short(value: str) -> str:
    return value[:10] if value.startswith("0x") else value


TIMELINE_KINDS: dict[str, str] = {
    "TaskPosted": "posted",
    "TrainerEnrolled": "enrolled",
    "RunStarted": "started",
    "RoundFinalized": "round_finalized",
    "RoundCarriedForward": "round_carried",
    "RoundsInvalidated": "round_invalidated",
    "ChallengeOpened": "challenge_opened",
    "ChallengeResolved": "challenge_resolved",
    "StakeSlashed": "slashed",
    "WitnessSlashed": "slashed",
    "TrainerEvicted": "evicted",
    "RunCompleted": "completed",
    "TaskSealed": "sealed",
    "TaskCancelled": "cancelled",
}


def timeline_entry(ev: MarketEvent) -> tuple[str, int | None, str] | None:
    """``(kind, round, one human line)`` for the events a run's timeline shows, else ``None``."""
    kind = TIMELINE_KINDS.get(ev.name)
    if kind is None:
        return None
    a = ev.args
    round_: int | None = ev.round
    if ev.name == "TaskPosted":
        text = f"posted by {_short(a['sponsor'])} with a reward pool of {_eth(int(a['rewardPool']))}"
    elif ev.name == "TrainerEnrolled":
        text = f"trainer {_short(a['trainer'])} enrolled as fragment {a['fragment']} (stake {_eth(int(a['stake']))})"
    elif ev.name == "RunStarted":
        text = f"run started with {a['trainers']} trainers"
    elif ev.name == "RoundFinalized":
        accepted = bin(int(a["acceptedMask"])).count("1")
        text = f"round {round_} finalized: state root {_short(a['stateRoot'])}, {accepted} submissions accepted"
    elif ev.name == "RoundCarriedForward":
        text = f"round {round_} carried forward (no quorum): state root unchanged"
    elif ev.name == "RoundsInvalidated":
        round_ = int(a["fromRound"])
        text = (
            f"rounds {a['fromRound']}..{a['throughRound']} invalidated by a fraud proof; "
            f"state rolled back to {_short(a['restoredRoot'])}"
        )
    elif ev.name == "ChallengeOpened":
        kind_name = ChallengeKind(int(a["kind"])).name.lower()
        text = f"challenge {a['challengeId']} ({kind_name}) opened on round {round_} by {_short(a['challenger'])}"
    elif ev.name == "ChallengeResolved":
        status = ChallengeStatus(int(a["status"])).name.lower()
        text = f"challenge {a['challengeId']} {status}: {_eth(int(a['slashed']))} slashed"
    elif ev.name == "StakeSlashed":
        text = f"trainer {_short(a['offender'])} slashed {_eth(int(a['amount']))}"
    elif ev.name == "WitnessSlashed":
        text = f"witness {_short(a['witness'])} slashed {_eth(int(a['amount']))}"
    elif ev.name == "TrainerEvicted":
        round_ = int(a["round"])
        text = f"trainer {_short(a['trainer'])} evicted in round {round_}"
    elif ev.name == "RunCompleted":
        text = f"last round closed: final state root {_short(a['finalStateRoot'])}"
    elif ev.name == "TaskSealed":
        text = f"sealed: {_eth(int(a['rewardsPaid']))} rewards and {_eth(int(a['feesPaid']))} fees paid"
    else:  # TaskCancelled
        text = f"cancelled with {a['enrolled']} trainers enrolled; {_eth(int(a['sponsorRefund']))} refunded"
    return kind, round_, text
