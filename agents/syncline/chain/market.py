"""Typed client for ``SynclineMarket``: one method per contract function, events decoded.

Reads return plain dataclasses; writes are signed locally by a ``Signer`` and raise
``ChainError`` with the contract's custom error (name and values) when they would revert.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from web3 import Web3
from web3.contract import Contract
from web3.logs import DISCARD
from web3.types import EventData, TxReceipt

from syncline.chain.deployment import Deployment
from syncline.chain.keys import Signer
from syncline.chain.transactions import ErrorDecoder, TransactionSender
from syncline.errors import ChainError
from syncline.protocol.enums import RoundStatus, TaskStatus
from syncline.protocol.receipt import TrainingReceipt
from syncline.protocol.spec import TrainingTaskSpec


def _hex(b: bytes) -> str:
    return "0x" + bytes(b).hex()


def _b32(value: str | bytes) -> bytes:
    if isinstance(value, bytes):
        if len(value) != 32:
            raise ValueError(f"expected 32 bytes, got {len(value)}")
        return value
    raw = bytes.fromhex(value[2:] if value.startswith("0x") else value)
    if len(raw) != 32:
        raise ValueError(f"expected a 32-byte hex value, got {value!r}")
    return raw


@dataclass(frozen=True)
class TaskView:
    task_id: int
    sponsor: str
    status: TaskStatus
    enrolled: int
    active: int
    current_round: int
    rounds_finalized: int
    rounds_carried: int
    round_opened_at: int
    last_closed_at: int
    state_root: str
    reward_pool_wei: int
    fee_budget_wei: int
    fees_earned_wei: int
    stake_held_wei: int
    total_weight: int
    sponsor_refund_wei: int
    sealed_pool_wei: int


@dataclass(frozen=True)
class RoundView:
    status: RoundStatus
    vote_count: int
    opened_at: int
    closed_at: int
    first_vote: str
    result: str
    state_root: str
    aggregate_root: str
    accepted_mask: int
    committed_mask: int


@dataclass(frozen=True)
class SubmissionView:
    trainer: str
    weight: int
    committed_at: int
    payload_hash: str
    chunk_root: str
    uri: str


@dataclass(frozen=True)
class TrainerView:
    enrolled: bool
    evicted: bool
    fragment: int
    submitted: int
    accepted: int
    missed: int
    consecutive_missed: int
    stake_wei: int
    slashed_wei: int
    shard_mask: int
    accepted_weight: int
    reward_wei: int

    @property
    def shards(self) -> list[int]:
        return [i for i in range(256) if self.shard_mask >> i & 1]


@dataclass(frozen=True)
class WitnessView:
    votes: int
    matched: int
    dissents: int
    fees_wei: int


def result_digest(state_root: str | bytes, aggregate_root: str | bytes, accepted_mask: int) -> str:
    """keccak256(abi.encode(stateRoot, aggregateRoot, acceptedMask)): what k witnesses must match."""
    from eth_abi import encode

    return _hex(
        Web3.keccak(encode(["bytes32", "bytes32", "uint256"], [_b32(state_root), _b32(aggregate_root), accepted_mask]))
    )


class MarketClient:
    """One market contract on one chain."""

    def __init__(self, w3: Web3, address: str, abi: list[dict[str, Any]]):
        self.w3 = w3
        self.address = Web3.to_checksum_address(address)
        self.contract: Contract = w3.eth.contract(address=self.address, abi=abi)
        self.decoder = ErrorDecoder(abi)
        self.sender = TransactionSender(w3, self.decoder)

    @classmethod
    def from_deployment(cls, deployment: Deployment, w3: Web3 | None = None) -> MarketClient:
        w3 = w3 or Web3(Web3.HTTPProvider(deployment.rpc_url, request_kwargs={"timeout": 60}))
        return cls(w3, deployment.market, deployment.abi())

    # ------------------------------------------------------------------ helpers

    def _send(self, signer: Signer, name: str, *args: Any, value: int = 0) -> TxReceipt:
        fn = getattr(self.contract.functions, name)(*args)
        return self.sender.send(signer, fn, value=value)

    def _call(self, name: str, *args: Any) -> Any:
        fn = getattr(self.contract.functions, name)(*args)
        try:
            return fn.call()
        except Exception as exc:  # web3 raises several classes for reverts; decode what we can
            data = getattr(exc, "data", None)
            err = self.decoder.message(data if isinstance(data, str | bytes) else None)
            if err is not None:
                raise ChainError(f"{name}: {err}", error_name=err.error_name, args=err.error_args) from None
            raise

    def events(self, receipt: TxReceipt, name: str) -> list[EventData]:
        """Decoded logs of event ``name`` emitted by this contract in ``receipt``."""
        event = getattr(self.contract.events, name)()
        return [e for e in event.process_receipt(receipt, errors=DISCARD) if e["address"] == self.address]

    def all_events(self, receipt: TxReceipt) -> list[EventData]:
        """Every event of this contract in ``receipt``, in log order."""
        out: list[EventData] = []
        for item in self.contract.abi:
            name = item.get("name")
            if item.get("type") == "event" and isinstance(name, str):
                out.extend(self.events(receipt, name))
        return sorted(out, key=lambda e: e["logIndex"])

    def get_logs(self, name: str, from_block: int = 0, **filters: Any) -> list[EventData]:
        event = getattr(self.contract.events, name)
        logs: list[EventData] = event.get_logs(from_block=from_block, argument_filters=filters or None)
        return logs

    # ------------------------------------------------------------------ sponsor

    def post_task(self, sponsor: Signer, spec: TrainingTaskSpec, spec_uri: str) -> tuple[int, TxReceipt]:
        """Validate ``spec`` off chain, post it with its escrow; returns (task id, receipt)."""
        spec.validate(now=int(self.w3.eth.get_block("latest")["timestamp"]))
        receipt = self._send(sponsor, "postTask", spec.onchain(spec_uri), value=spec.escrow_wei)
        (event,) = self.events(receipt, "TaskPosted")
        return int(event["args"]["taskId"]), receipt

    def cancel_underfilled(self, caller: Signer, task_id: int) -> TxReceipt:
        return self._send(caller, "cancelUnderfilled", task_id)

    # ------------------------------------------------------------------ trainers

    def enroll(self, trainer: Signer, task_id: int) -> tuple[int, TxReceipt]:
        stake = self.spec_tuple(task_id)[16]
        receipt = self._send(trainer, "enroll", task_id, value=int(stake))
        (event,) = self.events(receipt, "TrainerEnrolled")
        return int(event["args"]["fragment"]), receipt

    def start_run(self, caller: Signer, task_id: int) -> TxReceipt:
        return self._send(caller, "startRun", task_id)

    def commit_submission(
        self,
        trainer: Signer,
        task_id: int,
        round_: int,
        fragment: int,
        payload_hash: str | bytes,
        chunk_root: str | bytes,
        uri: str,
    ) -> TxReceipt:
        return self._send(
            trainer, "commitSubmission", task_id, round_, fragment, _b32(payload_hash), _b32(chunk_root), uri
        )

    # ------------------------------------------------------------------ witnesses

    def finalize_round(
        self,
        witness: Signer,
        task_id: int,
        round_: int,
        state_root: str | bytes,
        aggregate_root: str | bytes,
        accepted_mask: int,
        metric: int = 0,
    ) -> TxReceipt:
        return self._send(
            witness,
            "finalizeRound",
            task_id,
            round_,
            _b32(state_root),
            _b32(aggregate_root),
            accepted_mask,
            metric,
        )

    def carry_forward(self, caller: Signer, task_id: int, round_: int) -> TxReceipt:
        return self._send(caller, "carryForward", task_id, round_)

    # ------------------------------------------------------------------ settlement

    def seal(self, caller: Signer, task_id: int) -> TxReceipt:
        return self._send(caller, "seal", task_id)

    def withdraw(self, account: Signer) -> tuple[int, TxReceipt]:
        receipt = self._send(account, "withdraw")
        (event,) = self.events(receipt, "Withdrawn")
        return int(event["args"]["amount"]), receipt

    def claim(self, account: Signer) -> int:
        """Withdraw the account's credit if it has any; returns the amount (0 if nothing was owed)."""
        if self.credit_of(account.address) == 0:
            return 0
        amount, _ = self.withdraw(account)
        return amount

    # ------------------------------------------------------------------ views

    def task_count(self) -> int:
        return int(self._call("taskCount"))

    def spec_tuple(self, task_id: int) -> tuple[Any, ...]:
        return tuple(self._call("getSpec", task_id))

    def task(self, task_id: int) -> TaskView:
        t = self._call("getTaskState", task_id)
        return TaskView(
            task_id=task_id,
            sponsor=str(t[0]),
            status=TaskStatus(t[1]),
            enrolled=int(t[2]),
            active=int(t[3]),
            current_round=int(t[4]),
            rounds_finalized=int(t[5]),
            rounds_carried=int(t[6]),
            round_opened_at=int(t[7]),
            last_closed_at=int(t[8]),
            state_root=_hex(t[9]),
            reward_pool_wei=int(t[10]),
            fee_budget_wei=int(t[11]),
            fees_earned_wei=int(t[12]),
            stake_held_wei=int(t[13]),
            total_weight=int(t[14]),
            sponsor_refund_wei=int(t[15]),
            sealed_pool_wei=int(t[16]),
        )

    def round(self, task_id: int, round_: int) -> RoundView:
        r = self._call("getRound", task_id, round_)
        return RoundView(
            status=RoundStatus(r[0]),
            vote_count=int(r[1]),
            opened_at=int(r[2]),
            closed_at=int(r[3]),
            first_vote=_hex(r[4]),
            result=_hex(r[5]),
            state_root=_hex(r[6]),
            aggregate_root=_hex(r[7]),
            accepted_mask=int(r[8]),
            committed_mask=int(r[9]),
        )

    def round_deadline(self, task_id: int) -> int:
        """Commit deadline of the task's open round."""
        t = self.task(task_id)
        return t.round_opened_at + int(self.spec_tuple(task_id)[12])

    def submission(self, task_id: int, round_: int, fragment: int) -> SubmissionView:
        s = self._call("getSubmission", task_id, round_, fragment)
        return SubmissionView(str(s[0]), int(s[1]), int(s[2]), _hex(s[3]), _hex(s[4]), str(s[5]))

    def trainers(self, task_id: int) -> list[str]:
        return [str(a) for a in self._call("getTrainers", task_id)]

    def trainer(self, task_id: int, trainer: str) -> TrainerView:
        r = self._call("getTrainer", task_id, Web3.to_checksum_address(trainer))
        return TrainerView(bool(r[0]), bool(r[1]), *(int(x) for x in r[2:]))

    def witness(self, task_id: int, witness: str) -> WitnessView:
        w = self._call("getWitness", task_id, Web3.to_checksum_address(witness))
        return WitnessView(*(int(x) for x in w))

    def vote_of(self, task_id: int, round_: int, witness: str) -> str:
        return _hex(self._call("voteOf", task_id, round_, Web3.to_checksum_address(witness)))

    def escrow_of(self, task_id: int) -> int:
        return int(self._call("escrowOf", task_id))

    def credit_of(self, account: str) -> int:
        return int(self._call("creditOf", Web3.to_checksum_address(account)))

    def receipt(self, task_id: int) -> TrainingReceipt:
        return TrainingReceipt.from_chain(self._call("getReceipt", task_id))
