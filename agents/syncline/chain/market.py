"""Typed client for ``SynclineMarket``: one method per contract function, events decoded.

Reads return plain dataclasses; writes are signed locally by a ``Signer`` and raise
``ChainError`` with the contract's custom error (name and values) when they would revert.
Commitments and votes are EIP-712 messages signed with the trainer's or witness's key (and may
be relayed by anyone); the ``ISynclineCourt`` challenge functions are called on the market's
address, which delegates them to the court module (the client's ABI holds both).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from web3 import Web3
from web3.contract import Contract
from web3.exceptions import ContractLogicError, Web3RPCError
from web3.logs import DISCARD
from web3.types import EventData, TxReceipt

from syncline.chain.calls import ContractCall
from syncline.chain.deployment import Deployment
from syncline.chain.keys import Signer
from syncline.chain.rpc import http_web3
from syncline.chain.transactions import ErrorDecoder, TransactionSender, one_line
from syncline.errors import ChainError
from syncline.protocol.enums import ChallengeKind, ChallengeStatus, RoundStatus, TaskStatus
from syncline.protocol.receipt import TrainingReceipt
from syncline.protocol.signed_messages import Commitment, Domain, Vote, sign
from syncline.protocol.spec import TrainingTaskSpec

# Positions of the on-chain ``TaskSpec`` fields the client reads (SynclineTypes.sol order).
SPEC_ROUNDS = 11
SPEC_ROUND_DURATION = 12
SPEC_TRAINER_STAKE = 16
SPEC_MIN_TRAINERS = 17
SPEC_MAX_TRAINERS = 18
SPEC_WITNESS_BOND = 28
SPEC_CHALLENGE_BOND = 29


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
    bonds_held_wei: int
    open_challenges: int
    rounds_invalidated: int
    last_closed_block: int = 0


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
    prev_state_root: str
    revoked_mask: int
    late_mask: int = 0
    closed_block: int = 0


@dataclass(frozen=True)
class SubmissionView:
    trainer: str
    weight: int
    committed_at: int
    payload_hash: str
    chunk_root: str
    checkpoint_root: str
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
    bonded: bool
    bond_wei: int
    slashed_wei: int
    fees_wei: int


@dataclass(frozen=True)
class ChallengeView:
    """One challenge (``getChallenge``)."""

    challenge_id: int
    kind: ChallengeKind
    status: ChallengeStatus
    fragment: int
    guilty_votes: int
    innocent_votes: int
    round: int
    segment: int
    opened_at: int
    deadline: int
    challenger: str
    accused: str
    task_id: int
    bond_wei: int
    slashed_wei: int


@dataclass(frozen=True)
class AggregationProof:
    """Opening of one chunk for ``proveAggregationFraud`` (mirrors the Solidity struct).

    ``input_chunks[i]`` is chunk ``chunk_index`` of the i-th accepted submission (ascending
    fragment order) with ``input_proofs[i]`` against its chunk root; ``prev_chunk`` opens the
    round's previous state root and ``claimed_chunk`` its finalized state root. Coordinates
    ``[lo, hi)`` of the chunk are recomputed on chain.
    """

    task_id: int
    round: int
    chunk_index: int
    lo: int
    hi: int
    input_chunks: Sequence[bytes]
    input_proofs: Sequence[Sequence[bytes]]
    prev_chunk: bytes
    prev_proof: Sequence[bytes]
    claimed_chunk: bytes
    claimed_proof: Sequence[bytes]

    def as_tuple(self) -> tuple[Any, ...]:
        """The ABI tuple, in the struct's field order."""
        return (
            self.task_id,
            self.round,
            self.chunk_index,
            self.lo,
            self.hi,
            [bytes(c) for c in self.input_chunks],
            [[_b32(h) for h in proof] for proof in self.input_proofs],
            bytes(self.prev_chunk),
            [_b32(h) for h in self.prev_proof],
            bytes(self.claimed_chunk),
            [_b32(h) for h in self.claimed_proof],
        )


def result_digest(state_root: str | bytes, aggregate_root: str | bytes, accepted_mask: int) -> str:
    """keccak256(abi.encode(stateRoot, aggregateRoot, acceptedMask)): what k witnesses must match."""
    from eth_abi import encode

    return _hex(
        Web3.keccak(encode(["bytes32", "bytes32", "uint256"], [_b32(state_root), _b32(aggregate_root), accepted_mask]))
    )


# Gas floors for votes that may turn out to decide (see ``TransactionSender.send``): a quorum-completing
# finalize credits every accepted trainer and witness and opens the next round (2.6 M gas with 64
# trainers, docs/gas.md); a deciding referee verdict slashes, evicts and rebalances the shards.
QUORUM_VOTE_GAS = 3_500_000
DECIDING_VOTE_GAS = 1_500_000

# The enrollment that fills ``max_trainers`` starts the run: it assigns every trainer its shards and
# opens round 0, about 150 k gas plus 30 k per trainer (measured: 237 k with 3 trainers, 2.07 M with
# 64), where any other enrollment costs about 120 k. Which enrollment lands last is decided by the
# order of the block, not by the state it was estimated against, so every one carries this floor.
ENROLL_START_GAS = 200_000
ENROLL_START_GAS_PER_TRAINER = 32_000


# Bounds of ``SynclineConfidential`` (checked here too, so a bad value fails before any RPC).
MAX_MEASUREMENTS = 16
MAX_REPORT_BYTES = 16_384
MAX_MANIFEST_URI_BYTES = 512
# What an attested enrollment adds to ``enroll``: the verifier's static call (EIP-712 digest and
# ecrecover for the devnet verifier, ~15 k), the enclave record and its event (~70 k), with margin.
ATTESTATION_GAS = 120_000


def enroll_gas_floor(max_trainers: int) -> int:
    """Gas that covers the run-starting enrollment of a task with ``max_trainers`` trainers."""
    return ENROLL_START_GAS + ENROLL_START_GAS_PER_TRAINER * max_trainers


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
        w3 = w3 or http_web3(deployment.rpc_url)
        return cls(w3, deployment.market, deployment.abi())

    # ------------------------------------------------------------------ helpers

    def _send(self, signer: Signer, name: str, *args: Any, value: int = 0, min_gas: int = 0) -> TxReceipt:
        fn = getattr(self.contract.functions, name)(*args)
        return self.sender.send(signer, fn, value=value, min_gas=min_gas)

    def _call(self, name: str, *args: Any) -> Any:
        fn = getattr(self.contract.functions, name)(*args)
        try:
            return fn.call()
        except Exception as exc:  # web3 raises several classes for reverts; decode what we can
            data = getattr(exc, "data", None)
            err = self.decoder.message(data if isinstance(data, str | bytes) else None)
            if err is not None:
                raise ChainError(f"{name}: {err}", error_name=err.error_name, args=err.error_args) from None
            if isinstance(exc, ContractLogicError | Web3RPCError):  # a raw revert, an invalid opcode
                raise ChainError(f"{name} failed on chain: {one_line(str(exc))}") from None
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
        spec.validate(now=int(self.w3.eth.get_block("latest")["timestamp"]), sponsor=sponsor.address)
        receipt = self._send(sponsor, "postTask", spec.onchain(spec_uri), value=spec.escrow_wei)
        (event,) = self.events(receipt, "TaskPosted")
        return int(event["args"]["taskId"]), receipt

    def cancel_underfilled(self, caller: Signer, task_id: int) -> TxReceipt:
        return self._send(caller, "cancelUnderfilled", task_id)

    # ------------------------------------------------------------------ trainers

    def enroll(self, trainer: Signer, task_id: int) -> tuple[int, TxReceipt]:
        spec = self.spec_tuple(task_id)
        floor = enroll_gas_floor(int(spec[SPEC_MAX_TRAINERS]))  # it may land as the run-starting one
        receipt = self._send(trainer, "enroll", task_id, value=int(spec[SPEC_TRAINER_STAKE]), min_gas=floor)
        (event,) = self.events(receipt, "TrainerEnrolled")
        return int(event["args"]["fragment"]), receipt

    def start_run(self, caller: Signer, task_id: int) -> TxReceipt:
        return self._send(caller, "startRun", task_id)

    def domain(self) -> Domain:
        """The EIP-712 domain of this market: signatures are valid on this chain and contract only."""
        return Domain(chain_id=self.sender.chain_id, verifying_contract=self.address)

    def sign_commitment(
        self,
        trainer: Signer,
        task_id: int,
        round_: int,
        fragment: int,
        payload_hash: str | bytes,
        chunk_root: str | bytes,
        checkpoint_root: str | bytes,
        uri: str,
    ) -> tuple[Commitment, bytes]:
        """The trainer's EIP-712 commitment (the ``uri`` included) and its signature, without sending anything."""
        message = Commitment(
            task_id, round_, fragment, _b32(payload_hash), _b32(chunk_root), _b32(checkpoint_root), uri
        )
        return message, sign(trainer.account, self.domain(), message)

    def commit_submission(
        self,
        trainer: Signer,
        task_id: int,
        round_: int,
        fragment: int,
        payload_hash: str | bytes,
        chunk_root: str | bytes,
        uri: str,
        *,
        checkpoint_root: str | bytes,
        relayer: Signer | None = None,
    ) -> TxReceipt:
        """Sign the commitment with ``trainer``'s key and send it (from ``relayer``, default the trainer)."""
        message, signature = self.sign_commitment(
            trainer, task_id, round_, fragment, payload_hash, chunk_root, checkpoint_root, uri
        )
        return self.send_commitment(relayer or trainer, message, signature)

    def send_commitment(self, relayer: Signer, commitment: Commitment, signature: bytes) -> TxReceipt:
        """Relay an already signed commitment (anyone may; the signer is the trainer). The identical
        commitment already on record succeeds as a no-op (a relayed copy is harmless)."""
        return self._send(relayer, "commitSubmission", commitment.as_tuple(), bytes(signature))

    def commitment_recorded(self, commitment: Commitment) -> bool:
        """Whether exactly ``commitment`` (every signed field, the uri included) is the one on record."""
        s = self.submission(commitment.task_id, commitment.round, commitment.fragment)
        recorded = (s.payload_hash, s.chunk_root, s.checkpoint_root, s.uri)
        mine = (_hex(commitment.payload_hash), _hex(commitment.chunk_root), _hex(commitment.checkpoint_root))
        return recorded == (*mine, commitment.uri)

    # ------------------------------------------------------------------ witnesses

    def bond_witness(self, witness: Signer, task_id: int) -> TxReceipt:
        """Post exactly the task's ``witnessBond`` (required before voting when the bond is positive)."""
        return self._send(witness, "bondWitness", task_id, value=self.witness_bond(task_id))

    def ensure_witness_bonded(self, witness: Signer, task_id: int) -> TxReceipt | None:
        """Bond ``witness`` once if the task asks for a bond and it has not posted it; else do nothing."""
        if self.witness_bond(task_id) == 0 or self.witness(task_id, witness.address).bonded:
            return None
        return self.bond_witness(witness, task_id)

    def sign_vote(
        self,
        witness: Signer,
        task_id: int,
        round_: int,
        state_root: str | bytes,
        aggregate_root: str | bytes,
        accepted_mask: int,
        *,
        prev_state_root: str | bytes | None = None,
        metric: int = 0,
    ) -> tuple[Vote, bytes]:
        """The witness's EIP-712 vote and its signature, without sending anything. The vote builds
        on ``prev_state_root`` (default: the round's previous root as the chain has it now)."""
        prev = _b32(prev_state_root) if prev_state_root is not None else _b32(self.prev_state_root(task_id, round_))
        message = Vote(task_id, round_, prev, _b32(state_root), _b32(aggregate_root), accepted_mask, metric)
        return message, sign(witness.account, self.domain(), message)

    def prev_state_root(self, task_id: int, round_: int) -> str:
        """The state root a vote on ``round_`` must build on: the finalized round's previous root,
        else the task's current root."""
        r = self.round(task_id, round_)
        return r.prev_state_root if r.status == RoundStatus.FINALIZED else self.task(task_id).state_root

    def finalize_round(
        self,
        witness: Signer,
        task_id: int,
        round_: int,
        state_root: str | bytes,
        aggregate_root: str | bytes,
        accepted_mask: int,
        metric: int = 0,
        *,
        prev_state_root: str | bytes | None = None,
        relayer: Signer | None = None,
    ) -> TxReceipt:
        """Sign the vote with ``witness``'s key and send it (from ``relayer``, default the witness)."""
        message, signature = self.sign_vote(
            witness,
            task_id,
            round_,
            state_root,
            aggregate_root,
            accepted_mask,
            prev_state_root=prev_state_root,
            metric=metric,
        )
        return self.send_vote(relayer or witness, message, signature)

    def send_vote(self, relayer: Signer, vote: Vote, signature: bytes) -> TxReceipt:
        """Relay an already signed vote (anyone may; the signer is the witness)."""
        return self._send(relayer, "finalizeRound", vote.as_tuple(), bytes(signature), min_gas=QUORUM_VOTE_GAS)

    def carry_forward(self, caller: Signer, task_id: int, round_: int) -> TxReceipt:
        return self._send(caller, "carryForward", task_id, round_)

    # ------------------------------------------------------------------ court (challenges)
    #
    # The ISynclineCourt functions run on the market's address (the market delegates them to the
    # court module). Every challenge sends the task's ``challengeBond`` and returns the new
    # challenge's id (from its ``ChallengeOpened`` event); ``challenge_receipt`` gives the
    # transaction (equivocation and aggregation proofs are resolved in it).

    def _open_challenge(self, challenger: Signer, task_id: int, name: str, *args: Any) -> int:
        receipt = self._send(challenger, name, *args, value=self.challenge_bond(task_id))
        return self._opened(receipt, name)

    def _opened(self, receipt: TxReceipt, name: str) -> int:
        opened = self.events(receipt, "ChallengeOpened")
        if len(opened) != 1:
            raise ChainError(f"{name}: expected one ChallengeOpened event, got {len(opened)}")
        return int(opened[0]["args"]["challengeId"])

    def encode_call(self, function: str, args: list[Any]) -> bytes:
        """ABI calldata (selector and arguments) of ``function`` on the market (court functions included)."""
        return bytes.fromhex(str(self.contract.encode_abi(function, args=args)).removeprefix("0x"))

    def send_call(self, challenger: Signer, call: ContractCall) -> int:
        """Send a court call a finding built (:meth:`syncline.court.findings.Finding.call`);
        returns the id of the challenge it opened."""
        if Web3.to_checksum_address(call.target) != self.address:
            raise ChainError(f"{call.function}: the call targets {call.target}, not this market {self.address}")
        try:
            fn, args = self.contract.decode_function_input(call.calldata)
        except ValueError as exc:
            raise ChainError(f"{call.function}: calldata this market cannot decode: {exc}") from None
        if fn.fn_name != call.function:
            raise ChainError(f"{call.function}: the calldata calls {fn.fn_name}")
        receipt = self._send(challenger, fn.fn_name, *args.values(), value=call.value)
        return self._opened(receipt, call.function)

    def prove_trainer_equivocation(
        self, challenger: Signer, a: Commitment, sig_a: bytes, b: Commitment, sig_b: bytes
    ) -> int:
        """Two different signed commitments for one (task, round, fragment): slash and evict the trainer."""
        return self._open_challenge(
            challenger, a.task_id, "proveTrainerEquivocation", a.as_tuple(), bytes(sig_a), b.as_tuple(), bytes(sig_b)
        )

    def prove_witness_equivocation(self, challenger: Signer, a: Vote, sig_a: bytes, b: Vote, sig_b: bytes) -> int:
        """Two different signed votes for one (task, round, prevStateRoot): slash the witness's bond."""
        return self._open_challenge(
            challenger, a.task_id, "proveWitnessEquivocation", a.as_tuple(), bytes(sig_a), b.as_tuple(), bytes(sig_b)
        )

    def prove_aggregation_fraud(self, challenger: Signer, proof: AggregationProof) -> int:
        """Recompute one chunk of a finalized round on chain; a mismatch slashes the voters and invalidates."""
        return self._open_challenge(challenger, proof.task_id, "proveAggregationFraud", proof.as_tuple())

    def challenge_censorship(self, challenger: Signer, task_id: int, round_: int, fragment: int) -> int:
        """Claim ``fragment``'s on-time submission was left out of a finalized round (opens a defence period)."""
        return self._open_challenge(challenger, task_id, "challengeCensorship", task_id, round_, fragment)

    def answer_censorship(
        self, caller: Signer, challenge_id: int, chunk_index: int, chunk: bytes, proof: Sequence[str | bytes]
    ) -> TxReceipt:
        """Justify an exclusion by opening a malformed chunk of the excluded submission."""
        return self._send(caller, "answerCensorship", challenge_id, chunk_index, bytes(chunk), [_b32(h) for h in proof])

    def resolve_censorship(self, caller: Signer, challenge_id: int) -> TxReceipt:
        """Uphold an unanswered censorship challenge after its defence period. Anyone may call."""
        return self._send(caller, "resolveCensorship", challenge_id)

    def challenge_training(self, challenger: Signer, task_id: int, round_: int, fragment: int, segment: int) -> int:
        """Claim inner-loop ``segment`` of an accepted submission does not reproduce its checkpoint."""
        return self._open_challenge(challenger, task_id, "challengeTraining", task_id, round_, fragment, segment)

    def referee_vote(self, witness: Signer, challenge_id: int, guilty: bool) -> TxReceipt:
        """A committee member's verdict on a training challenge."""
        return self._send(witness, "refereeVote", challenge_id, guilty, min_gas=DECIDING_VOTE_GAS)

    def referee_unavailable(self, witness: Signer, challenge_id: int) -> TxReceipt:
        """A committee member's ``Unavailable`` verdict on an answered training challenge: the task's
        blob store is reachable and the segment's committed data is absent from it (replaced by a
        later :meth:`referee_vote`; at the deadline guilty + Unavailable >= k convicts)."""
        return self._send(witness, "refereeUnavailable", challenge_id)

    def expire_challenge(self, caller: Signer, challenge_id: int) -> TxReceipt:
        """Close a training challenge: unanswered after its response window, upheld (the trainer
        withheld the segment); answered, after its deadline, upheld when guilty + Unavailable
        verdicts reach k, expired otherwise."""
        return self._send(caller, "expireChallenge", challenge_id)

    def answer_training(self, trainer: Signer, challenge_id: int) -> TxReceipt:
        """The accused trainer answers its training claim (the segment's checkpoints are published)."""
        return self._send(trainer, "answerTraining", challenge_id)

    def challenge(self, challenge_id: int) -> ChallengeView:
        c = self._call("getChallenge", challenge_id)
        return ChallengeView(
            challenge_id=challenge_id,
            kind=ChallengeKind(c[0]),
            status=ChallengeStatus(c[1]),
            fragment=int(c[2]),
            guilty_votes=int(c[3]),
            innocent_votes=int(c[4]),
            round=int(c[5]),
            segment=int(c[6]),
            opened_at=int(c[7]),
            deadline=int(c[8]),
            challenger=str(c[9]),
            accused=str(c[10]),
            task_id=int(c[11]),
            bond_wei=int(c[12]),
            slashed_wei=int(c[13]),
        )

    def challenge_count(self) -> int:
        return int(self._call("challengeCount"))

    def challenge_receipt(self, challenge_id: int, from_block: int = 0) -> TxReceipt:
        """The receipt of the transaction that opened ``challenge_id`` (for its events and gas)."""
        logs = self.get_logs("ChallengeOpened", from_block=from_block, challengeId=challenge_id)
        if not logs:
            raise ChainError(f"no ChallengeOpened event for challenge {challenge_id} since block {from_block}")
        return self.w3.eth.get_transaction_receipt(logs[0]["transactionHash"])

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

    def witness_bond(self, task_id: int) -> int:
        """The task's ``witnessBond`` (wei)."""
        return int(self.spec_tuple(task_id)[SPEC_WITNESS_BOND])

    def challenge_bond(self, task_id: int) -> int:
        """The task's ``challengeBond`` (wei): what every challenge sends."""
        return int(self.spec_tuple(task_id)[SPEC_CHALLENGE_BOND])

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
            bonds_held_wei=int(t[17]),
            open_challenges=int(t[18]),
            rounds_invalidated=int(t[19]),
            last_closed_block=int(t[20]),
        )

    def finalization_block_hash(self, task_id: int, round_: int) -> bytes | None:
        """Hash of the block whose ``RoundFinalized`` closed the round (the last one, if a rollback
        let it be finalized again); None when the round has not been finalized."""
        logs = self.get_logs("RoundFinalized", taskId=task_id, round=round_)
        return bytes(logs[-1]["blockHash"]) if logs else None

    def round(self, task_id: int, round_: int) -> RoundView:
        r = self._call("getRound", task_id, round_)
        return RoundView(
            status=RoundStatus(r[0]),
            vote_count=int(r[1]),
            opened_at=int(r[2]),
            closed_at=int(r[3]),
            closed_block=int(r[4]),
            first_vote=_hex(r[5]),
            result=_hex(r[6]),
            state_root=_hex(r[7]),
            aggregate_root=_hex(r[8]),
            accepted_mask=int(r[9]),
            committed_mask=int(r[10]),
            prev_state_root=_hex(r[11]),
            revoked_mask=int(r[12]),
            late_mask=int(r[13]),
        )

    def round_work_complete(self, task_id: int, round_: int) -> bool:
        """Whether the open round ``round_`` has its work in: every active (enrolled, non-evicted)
        trainer committed, so witnesses may finalize it before its deadline (early close)."""
        return bool(self._call("roundWorkComplete", task_id, round_))

    def active_mask(self, task_id: int) -> int:
        """Fragments of the task's active (enrolled, non-evicted) trainers (bit i = fragment i)."""
        return int(self._call("activeMask", task_id))

    def commit_deadline(self, task_id: int) -> int:
        """The open round's commit deadline as the chain rules it for the next block: the round
        duration after it opened, or, once that passed with nobody committed, the one extension
        (``commitDeadline``, read at the pending block: on an idle devnet the latest block's time
        is stale). Agents follow this, not their own sum."""
        fn = self.contract.functions.commitDeadline(task_id)
        try:
            return int(fn.call(block_identifier="pending"))
        except Exception as exc:  # decoded like every other call
            data = getattr(exc, "data", None)
            err = self.decoder.message(data if isinstance(data, str | bytes) else None)
            if err is not None:
                raise ChainError(f"commitDeadline: {err}", error_name=err.error_name, args=err.error_args) from None
            raise

    def round_deadline(self, task_id: int) -> int:
        """First commit deadline of the task's open round (before any extension)."""
        t = self.task(task_id)
        return t.round_opened_at + int(self.spec_tuple(task_id)[SPEC_ROUND_DURATION])

    def submission(self, task_id: int, round_: int, fragment: int) -> SubmissionView:
        s = self._call("getSubmission", task_id, round_, fragment)
        return SubmissionView(str(s[0]), int(s[1]), int(s[2]), _hex(s[3]), _hex(s[4]), _hex(s[5]), str(s[6]))

    def trainers(self, task_id: int) -> list[str]:
        return [str(a) for a in self._call("getTrainers", task_id)]

    def trainer(self, task_id: int, trainer: str) -> TrainerView:
        r = self._call("getTrainer", task_id, Web3.to_checksum_address(trainer))
        return TrainerView(bool(r[0]), bool(r[1]), *(int(x) for x in r[2:]))

    def witness(self, task_id: int, witness: str) -> WitnessView:
        w = self._call("getWitness", task_id, Web3.to_checksum_address(witness))
        return WitnessView(
            votes=int(w[0]),
            matched=int(w[1]),
            dissents=int(w[2]),
            bonded=bool(w[3]),
            bond_wei=int(w[4]),
            slashed_wei=int(w[5]),
            fees_wei=int(w[6]),
        )

    def vote_of(self, task_id: int, round_: int, witness: str) -> str:
        return _hex(self._call("voteOf", task_id, round_, Web3.to_checksum_address(witness)))

    def escrow_of(self, task_id: int) -> int:
        return int(self._call("escrowOf", task_id))

    def credit_of(self, account: str) -> int:
        return int(self._call("creditOf", Web3.to_checksum_address(account)))

    def receipt(self, task_id: int) -> TrainingReceipt:
        return TrainingReceipt.from_chain(self._call("getReceipt", task_id))

    # ------------------------------------------------------------------ data availability and rollbacks

    def demand_availability(self, witness: Signer, challenge_id: int, chunk_index: int) -> TxReceipt:
        """A voter of the claimed round demands chunk ``chunk_index`` of the excluded submission."""
        return self._send(witness, "demandAvailability", challenge_id, chunk_index)

    def answer_availability(
        self, caller: Signer, challenge_id: int, chunk: bytes, proof: Sequence[str | bytes]
    ) -> TxReceipt:
        """Open the demanded chunk against the submission's chunk root (anyone; normally its trainer)."""
        return self._send(caller, "answerAvailability", challenge_id, bytes(chunk), [_b32(h) for h in proof])

    def availability_demand(self, challenge_id: int) -> AvailabilityDemandView:
        d = self._call("availabilityDemand", challenge_id)
        return AvailabilityDemandView(int(d[0]), int(d[1]), int(d[2]), bool(d[3]), int(d[4]))

    def demanded_by(self, challenge_id: int, witness: str) -> bool:
        return bool(self._call("demandedBy", challenge_id, Web3.to_checksum_address(witness)))

    def continue_invalidation(self, caller: Signer, task_id: int) -> TxReceipt:
        """Void the next batch of a pending rollback (anyone; the seal waits until it is done)."""
        return self._send(caller, "continueInvalidation", task_id)

    def invalidation(self, task_id: int) -> tuple[int, int, int]:
        """``(from, next, end)`` of the task's rollback; pending while ``next < end``."""
        f, n, e = self._call("invalidation", task_id)
        return int(f), int(n), int(e)

    # ------------------------------------------------------------------ confidential tasks (ISynclineConfidential)

    def configure_confidential(
        self, sponsor: Signer, task_id: int, verifier: str, measurements: Sequence[str | bytes]
    ) -> TxReceipt:
        """Set a Confidential task's attestation verifier and measurement allow-list (sponsor, once,
        before the first enrollment)."""
        if not 1 <= len(measurements) <= MAX_MEASUREMENTS:
            raise ChainError(f"measurements: expected 1 to {MAX_MEASUREMENTS} values, got {len(measurements)}")
        return self._send(
            sponsor,
            "configureConfidential",
            task_id,
            Web3.to_checksum_address(verifier),
            [_b32(m) for m in measurements],
        )

    def enroll_attested(
        self, trainer: Signer, task_id: int, enclave_pubkey: bytes, measurement: bytes, report: bytes
    ) -> tuple[int, TxReceipt]:
        """Enroll in a Confidential task with an attested enclave; returns (fragment, receipt).

        The market has the task's verifier authenticate ``report`` and requires it to bind
        ``enclave_pubkey``, ``measurement`` and this trainer; a difference reverts with one line
        naming it (``SynclineAttestationPubkeyMismatch(claimed=.., attested=..)`` ...).
        """
        spec = self.spec_tuple(task_id)
        floor = enroll_gas_floor(int(spec[SPEC_MAX_TRAINERS])) + ATTESTATION_GAS
        receipt = self._send(
            trainer,
            "enrollAttested",
            task_id,
            _b32(enclave_pubkey),
            _b32(measurement),
            _report(report),
            value=int(spec[SPEC_TRAINER_STAKE]),
            min_gas=floor,
        )
        (event,) = self.events(receipt, "TrainerEnrolled")
        return int(event["args"]["fragment"]), receipt

    def register_witness_enclave(
        self, witness: Signer, task_id: int, enclave_pubkey: bytes, measurement: bytes, report: bytes
    ) -> TxReceipt:
        """A listed witness of a Confidential task registers its attested enclave (same parity checks)."""
        return self._send(
            witness, "registerWitnessEnclave", task_id, _b32(enclave_pubkey), _b32(measurement), _report(report)
        )

    def register_witness_key(self, witness: Signer, task_id: int, pubkey: bytes) -> TxReceipt:
        """A listed witness of a task that is not Confidential registers its X25519 dispute key
        (DP noise openings are sealed to it, docs/protocol.md §12.10): once, until the task is sealed
        or cancelled; ``getEnclave`` then returns it with measurement 0."""
        key = _b32(pubkey)
        if key == bytes(32):
            raise ChainError("dispute key: the zero key cannot be registered")
        return self._send(witness, "registerWitnessKey", task_id, key)

    def get_enclave(self, task_id: int, account: str) -> tuple[bytes, bytes]:
        """``(enclave_pubkey, measurement)`` admitted for ``account`` in the task (zeros: none)."""
        key, measurement = self._call("getEnclave", task_id, Web3.to_checksum_address(account))
        return bytes(key), bytes(measurement)

    def install_sealed_manifest(self, sponsor: Signer, task_id: int, manifest_hash: bytes, uri: str) -> TxReceipt:
        """Publish a new version of the task's sealed-data manifest (sponsor; until sealed or cancelled)."""
        if not 0 < len(uri.encode()) <= MAX_MANIFEST_URI_BYTES:
            raise ChainError(f"manifest uri: expected 1 to {MAX_MANIFEST_URI_BYTES} bytes, got {len(uri.encode())}")
        return self._send(sponsor, "installSealedManifest", task_id, _b32(manifest_hash), uri)

    def get_sealed_manifest(self, task_id: int) -> tuple[bytes, str, int]:
        """``(manifest_hash, uri, version)`` of the task's current sealed manifest (version 0: none)."""
        manifest_hash, uri, version = self._call("getSealedManifest", task_id)
        return bytes(manifest_hash), str(uri), int(version)

    def get_confidential_config(self, task_id: int) -> tuple[str, list[bytes]]:
        """``(verifier, measurements)`` of the task's attestation policy (zero address: not configured)."""
        verifier, measurements = self._call("getConfidentialConfig", task_id)
        return Web3.to_checksum_address(verifier), [bytes(m) for m in measurements]


def _report(report: bytes) -> bytes:
    if not isinstance(report, bytes | bytearray) or not 0 < len(report) <= MAX_REPORT_BYTES:
        size = len(report) if isinstance(report, bytes | bytearray) else type(report).__name__
        raise ChainError(f"attestation report: expected 1 to {MAX_REPORT_BYTES} bytes, got {size}")
    return bytes(report)


@dataclass(frozen=True)
class AvailabilityDemandView:
    """A censorship claim's data-availability demand (``availabilityDemand``); ``deadline`` 0: none."""

    deadline: int
    chunk_index: int
    demanders: int
    answered: bool
    deadline_block: int = 0
