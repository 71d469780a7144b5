"""The five faults the court punishes, as findings that build their own contract call.

A finding knows its kind (the contract's :class:`~syncline.protocol.enums.ChallengeKind`, the one
name of each fault everywhere: logs, metrics, the API), the key the court deduplicates it by, a
one-line description, and the court call that proves it (:meth:`Finding.call`): a
:class:`~syncline.chain.calls.ContractCall` with target, calldata and value. The challenger agent and the API only send
or hand over that call; neither dispatches on the finding's type.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from syncline.chain.calls import ZERO_ADDRESS, ContractCall
from syncline.chain.market import AggregationProof
from syncline.protocol.enums import ChallengeKind
from syncline.run.gossip import SignedCommitment, SignedVote


class CourtTarget(Protocol):
    """What building a call needs from the market client: its address, ABI and the task's bond."""

    @property
    def address(self) -> str: ...

    def encode_call(self, function: str, args: list[Any]) -> bytes: ...

    def challenge_bond(self, task_id: int) -> int: ...


@dataclass(frozen=True)
class Finding(ABC):
    """A provable fault of one closed round."""

    kind: ClassVar[ChallengeKind]
    round: int

    @property
    def kind_name(self) -> str:
        """The kind as it appears in logs, metrics, records and the API (``training_fraud`` ...)."""
        return self.kind.name.lower()

    @abstractmethod
    def accused_slot(self) -> object:
        """Who or what is accused within the round, as the court keys a duplicate."""

    def key(self) -> tuple[ChallengeKind, int, object]:
        """The fault as the court keys it: one claim per key (``SynclineDuplicateChallenge``)."""
        return self.kind, self.round, self.accused_slot()

    def accused(self) -> str:
        """The accused address as the court records it (the zero address for a quorum's fault)."""
        return ZERO_ADDRESS

    @abstractmethod
    def details(self) -> dict[str, object]:
        """Structured details for logs and records."""

    @abstractmethod
    def describe(self) -> str:
        """One line for people (the web UI shows it before the challenger signs)."""

    @abstractmethod
    def arguments(self, task_id: int) -> tuple[str, list[Any]]:
        """The court function and its ABI arguments."""

    @property
    def decided_in_its_transaction(self) -> bool:
        """Equivocation and aggregation proofs are decided when sent; the others need a follow-up."""
        return self.kind not in (ChallengeKind.CENSORSHIP, ChallengeKind.TRAINING_FRAUD)

    def call(self, target: CourtTarget, task_id: int) -> ContractCall:
        """The transaction that proves this fault, with the task's challenge bond."""
        function, args = self.arguments(task_id)
        return ContractCall(
            target=target.address,
            function=function,
            calldata=target.encode_call(function, args),
            value=target.challenge_bond(task_id),
        )


@dataclass(frozen=True)
class TrainerEquivocation(Finding):
    """A valid announced commitment that differs from the one the trainer committed on chain."""

    kind: ClassVar[ChallengeKind] = ChallengeKind.TRAINER_EQUIVOCATION
    fragment: int
    onchain: SignedCommitment
    announced: SignedCommitment

    def accused_slot(self) -> object:
        return self.fragment

    def accused(self) -> str:
        return self.onchain.signer.lower()

    def details(self) -> dict[str, object]:
        return {
            "fragment": self.fragment,
            "trainer": self.onchain.signer,
            "onchain_payload": "0x" + self.onchain.message.payload_hash.hex(),
            "announced_payload": "0x" + self.announced.message.payload_hash.hex(),
        }

    def describe(self) -> str:
        a, b = self.onchain, self.announced
        return (
            f"round {self.round}: trainer {a.signer.lower()} (fragment {self.fragment}) signed two different "
            f"commitments (payload 0x{a.message.payload_hash.hex()[:12]}... on chain, "
            f"0x{b.message.payload_hash.hex()[:12]}... announced)"
        )

    def arguments(self, task_id: int) -> tuple[str, list[Any]]:
        a, b = self.onchain, self.announced
        return "proveTrainerEquivocation", [
            a.message.as_tuple(),
            bytes(a.signature),
            b.message.as_tuple(),
            bytes(b.signature),
        ]


@dataclass(frozen=True)
class WitnessEquivocation(Finding):
    """A valid announced vote that differs from the vote the witness cast on the same base."""

    kind: ClassVar[ChallengeKind] = ChallengeKind.WITNESS_EQUIVOCATION
    witness: str
    onchain: SignedVote
    announced: SignedVote

    def accused_slot(self) -> object:
        return self.witness.lower()

    def accused(self) -> str:
        return self.witness.lower()

    def details(self) -> dict[str, object]:
        return {
            "witness": self.witness,
            "onchain_state_root": "0x" + self.onchain.message.state_root.hex(),
            "announced_state_root": "0x" + self.announced.message.state_root.hex(),
        }

    def describe(self) -> str:
        va, vb = self.onchain, self.announced
        return (
            f"round {self.round}: witness {self.witness.lower()} signed two different votes (state root "
            f"0x{va.message.state_root.hex()[:12]}... on chain, 0x{vb.message.state_root.hex()[:12]}... announced)"
        )

    def arguments(self, task_id: int) -> tuple[str, list[Any]]:
        va, vb = self.onchain, self.announced
        return "proveWitnessEquivocation", [
            va.message.as_tuple(),
            bytes(va.signature),
            vb.message.as_tuple(),
            bytes(vb.signature),
        ]


@dataclass(frozen=True)
class AggregationFraud(Finding):
    """The finalized state is not the rule and outer step applied to the accepted inputs."""

    kind: ClassVar[ChallengeKind] = ChallengeKind.AGGREGATION_FRAUD
    opening: AggregationProof

    def accused_slot(self) -> object:
        return None

    def details(self) -> dict[str, object]:
        o = self.opening
        return {"chunk": o.chunk_index, "lo": o.lo, "hi": o.hi, "inputs": len(o.input_chunks)}

    def describe(self) -> str:
        o = self.opening
        return (
            f"round {self.round}: the finalized state differs from the recomputed aggregate in chunk "
            f"{o.chunk_index} (coordinates {o.lo}..{o.hi} of {len(o.input_chunks)} accepted inputs)"
        )

    def arguments(self, task_id: int) -> tuple[str, list[Any]]:
        return "proveAggregationFraud", [self.opening.as_tuple()]


@dataclass(frozen=True)
class Censorship(Finding):
    """A committed, valid submission left out by a rule that keeps every valid input."""

    kind: ClassVar[ChallengeKind] = ChallengeKind.CENSORSHIP
    fragment: int

    def accused_slot(self) -> object:
        return self.fragment

    def details(self) -> dict[str, object]:
        return {"fragment": self.fragment}

    def describe(self) -> str:
        return f"round {self.round}: the valid on-time submission of fragment {self.fragment} was left out"

    def arguments(self, task_id: int) -> tuple[str, list[Any]]:
        return "challengeCensorship", [task_id, self.round, self.fragment]


@dataclass(frozen=True)
class TrainingFraud(Finding):
    """An accepted submission whose inner-loop segment does not re-execute to its checkpoint, or
    (on-demand tasks) whose drawn segment was not published in time: either way a claim on the
    segment, which the accused answers on chain and the committee referees."""

    kind: ClassVar[ChallengeKind] = ChallengeKind.TRAINING_FRAUD
    fragment: int
    segment: int
    reason: str
    trainer: str

    def accused_slot(self) -> object:
        return self.fragment, self.segment

    def accused(self) -> str:
        return self.trainer.lower()

    def details(self) -> dict[str, object]:
        return {"fragment": self.fragment, "segment": self.segment, "trainer": self.trainer, "reason": self.reason}

    def describe(self) -> str:
        return f"round {self.round}: fragment {self.fragment} segment {self.segment}: {self.reason}"

    def arguments(self, task_id: int) -> tuple[str, list[Any]]:
        return "challengeTraining", [task_id, self.round, self.fragment, self.segment]
