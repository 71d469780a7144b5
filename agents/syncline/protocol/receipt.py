"""``TrainingReceipt``: what a run produced and paid, as read from the chain."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from syncline.protocol.enums import TaskStatus


@dataclass(frozen=True)
class TrainerLine:
    trainer: str
    fragment: int
    evicted: bool
    submitted: int
    accepted: int
    missed: int
    accepted_weight: int
    reward_wei: int
    stake_refund_wei: int
    slashed_wei: int
    late: int = 0
    """Commitments made late: after a round's first deadline, within its one extension."""


@dataclass(frozen=True)
class WitnessLine:
    witness: str
    votes: int
    matched: int
    dissents: int
    fees_wei: int
    bond_wei: int = 0
    slashed_wei: int = 0


@dataclass(frozen=True)
class TrainingReceipt:
    task_id: int
    spec_hash: str
    status: TaskStatus
    final_state_root: str
    rounds_total: int
    rounds_finalized: int
    rounds_carried_forward: int
    rounds_invalidated: int
    reward_pool_wei: int
    sponsor_refund_wei: int
    trainers: tuple[TrainerLine, ...]
    witnesses: tuple[WitnessLine, ...]
    extras: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_chain(cls, raw: Any) -> TrainingReceipt:
        """From the ``getReceipt`` return value (a tuple in ABI order)."""
        (
            task_id,
            spec_hash,
            status,
            root,
            total,
            finalized,
            carried,
            invalidated,
            pool,
            refund,
            trainers,
            witnesses,
        ) = raw
        return cls(
            task_id=int(task_id),
            spec_hash="0x" + bytes(spec_hash).hex(),
            status=TaskStatus(int(status)),
            final_state_root="0x" + bytes(root).hex(),
            rounds_total=int(total),
            rounds_finalized=int(finalized),
            rounds_carried_forward=int(carried),
            rounds_invalidated=int(invalidated),
            reward_pool_wei=int(pool),
            sponsor_refund_wei=int(refund),
            trainers=tuple(
                TrainerLine(
                    trainer=str(t[0]),
                    fragment=int(t[1]),
                    evicted=bool(t[2]),
                    submitted=int(t[3]),
                    accepted=int(t[4]),
                    missed=int(t[5]),
                    accepted_weight=int(t[6]),
                    reward_wei=int(t[7]),
                    stake_refund_wei=int(t[8]),
                    slashed_wei=int(t[9]),
                    late=int(t[10]) if len(t) > 10 else 0,
                )
                for t in trainers
            ),
            witnesses=tuple(WitnessLine(str(w[0]), *(int(x) for x in w[1:])) for w in witnesses),
        )

    @property
    def trained_nothing(self) -> bool:
        """No round accepted any work: the final state is the initial one, whatever was sealed."""
        return not any(t.accepted for t in self.trainers)

    @property
    def late_commits(self) -> int:
        return sum(t.late for t in self.trainers)

    def verdict(self) -> str:
        """One line that says plainly what the run trained (CLI, API, demo)."""
        accepted = sum(t.accepted for t in self.trainers)
        late = f", {self.late_commits} late commit(s)" if self.late_commits else ""
        if self.trained_nothing:
            return (
                f"trained nothing: no round accepted work ({self.rounds_finalized} finalized, "
                f"{self.rounds_carried_forward} carried forward of {self.rounds_total}{late}); "
                "the final state is the initial one"
            )
        return (
            f"trained {self.rounds_finalized} of {self.rounds_total} rounds ({accepted} accepted submission(s){late})"
        )

    def to_mapping(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.name.lower()
        data["trained_nothing"] = self.trained_nothing
        data["late_commits"] = self.late_commits
        data["verdict"] = self.verdict()
        extras = data.pop("extras")
        data.update(extras)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_mapping(), indent=2)
