"""Signed messages agents announce off chain, where anyone can read and check them.

Before committing on chain, a trainer announces its EIP-712 signed commitment; a witness announces
its signed vote. They travel through the blob store under well-known (untrusted) aliases; a reader
checks the signature against the market's EIP-712 domain before believing anything. Two valid
signatures by one key for one slot with different contents are an equivocation that
``SynclineCourt`` slashes on its own.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from syncline.blobstore import BlobStore, find_verified
from syncline.chain.keys import Signer
from syncline.errors import SynclineError
from syncline.protocol.signed_messages import Commitment, Domain, Vote, recover
from syncline.protocol.wire import WireFormatError, load_bounded_json

MAX_GOSSIP_BYTES = 4096

T = TypeVar("T")


class GossipError(SynclineError):
    """A gossip message is malformed or its signature does not check out."""


@dataclass(frozen=True)
class SignedCommitment:
    message: Commitment
    signature: bytes
    signer: str


@dataclass(frozen=True)
class SignedVote:
    message: Vote
    signature: bytes
    signer: str


def commitment_alias(task_id: int, round_: int, fragment: int) -> str:
    return f"gossip:commitment:{task_id}:{round_}:{fragment}"


def vote_alias(task_id: int, round_: int, witness: str) -> str:
    return f"gossip:vote:{task_id}:{round_}:{witness.lower()}"


def _hex(b: bytes) -> str:
    return "0x" + b.hex()


def _b(value: Any, what: str, size: int | None = None) -> bytes:
    if not isinstance(value, str) or not value.startswith("0x"):
        raise GossipError(f"gossip field {what} must be a 0x-hex string")
    try:
        raw = bytes.fromhex(value[2:])
    except ValueError:
        raise GossipError(f"gossip field {what} is not hex") from None
    if size is not None and len(raw) != size:
        raise GossipError(f"gossip field {what} must be {size} bytes, got {len(raw)}")
    return raw


def _i(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise GossipError(f"gossip field {what} must be a non-negative integer")
    return value


def _s(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise GossipError(f"gossip field {what} must be a string")
    return value


def encode_commitment(message: Commitment, signature: bytes) -> bytes:
    return json.dumps(
        {
            "type": "Commitment",
            "taskId": message.task_id,
            "round": message.round,
            "fragment": message.fragment,
            "payloadHash": _hex(message.payload_hash),
            "chunkRoot": _hex(message.chunk_root),
            "checkpointRoot": _hex(message.checkpoint_root),
            "uri": message.uri,
            "signature": _hex(signature),
        },
        sort_keys=True,
    ).encode()


def encode_vote(message: Vote, signature: bytes) -> bytes:
    return json.dumps(
        {
            "type": "Vote",
            "taskId": message.task_id,
            "round": message.round,
            "prevStateRoot": _hex(message.prev_state_root),
            "stateRoot": _hex(message.state_root),
            "aggregateRoot": _hex(message.aggregate_root),
            "acceptedMask": message.accepted_mask,
            "metric": message.metric,
            "signature": _hex(signature),
        },
        sort_keys=True,
    ).encode()


def _load(data: bytes, kind: str) -> dict[str, Any]:
    if len(data) > MAX_GOSSIP_BYTES:
        raise GossipError(f"gossip message of {len(data)} bytes exceeds {MAX_GOSSIP_BYTES}")
    try:
        obj = load_bounded_json(data, max_bytes=MAX_GOSSIP_BYTES, max_depth=2, what="gossip message")
    except WireFormatError as exc:
        raise GossipError(str(exc)) from None
    if not isinstance(obj, dict) or obj.get("type") != kind:
        raise GossipError(f"gossip message is not a {kind}")
    return obj


def _signature(obj: dict[str, Any], domain: Domain, message: Commitment | Vote) -> tuple[bytes, str]:
    """The message's signature and the address it recovers to under ``domain``."""
    signature = _b(obj.get("signature"), "signature", 65)
    try:
        signer = recover(domain, message, signature)
    except Exception as exc:  # eth-account raises several types for bad signatures
        raise GossipError(f"gossip {obj['type'].lower()} signature does not recover: {str(exc)[:80]}") from None
    return signature, signer


def decode_commitment(data: bytes, domain: Domain) -> SignedCommitment:
    obj = _load(data, "Commitment")
    message = Commitment(
        task_id=_i(obj.get("taskId"), "taskId"),
        round=_i(obj.get("round"), "round"),
        fragment=_i(obj.get("fragment"), "fragment"),
        payload_hash=_b(obj.get("payloadHash"), "payloadHash", 32),
        chunk_root=_b(obj.get("chunkRoot"), "chunkRoot", 32),
        checkpoint_root=_b(obj.get("checkpointRoot"), "checkpointRoot", 32),
        uri=_s(obj.get("uri"), "uri"),
    )
    return SignedCommitment(message, *_signature(obj, domain, message))


def decode_vote(data: bytes, domain: Domain) -> SignedVote:
    obj = _load(data, "Vote")
    message = Vote(
        task_id=_i(obj.get("taskId"), "taskId"),
        round=_i(obj.get("round"), "round"),
        prev_state_root=_b(obj.get("prevStateRoot"), "prevStateRoot", 32),
        state_root=_b(obj.get("stateRoot"), "stateRoot", 32),
        aggregate_root=_b(obj.get("aggregateRoot"), "aggregateRoot", 32),
        accepted_mask=_i(obj.get("acceptedMask"), "acceptedMask"),
        metric=_i(obj.get("metric"), "metric"),
    )
    return SignedVote(message, *_signature(obj, domain, message))


def announce_commitment(blobs: BlobStore, message: Commitment, signature: bytes) -> None:
    alias = commitment_alias(message.task_id, message.round, message.fragment)
    blobs.put(encode_commitment(message, signature), alias=alias)


def announce_vote(blobs: BlobStore, message: Vote, signature: bytes, witness: str) -> None:
    blobs.put(encode_vote(message, signature), alias=vote_alias(message.task_id, message.round, witness))


def _read(blobs: BlobStore, alias: str, decode: Callable[[bytes], T]) -> T | None:
    """The first candidate of ``alias`` that decodes to a validly signed message, or ``None``
    (a poisoned candidate is skipped, not believed)."""
    try:
        return find_verified(blobs, (alias,), decode, what=alias, max_bytes=MAX_GOSSIP_BYTES)
    except SynclineError:  # no candidate, a blob store error, or every candidate a GossipError
        return None


def read_commitment(
    blobs: BlobStore, domain: Domain, task_id: int, round_: int, fragment: int
) -> SignedCommitment | None:
    """The announced commitment for a slot, or ``None`` if absent or invalid."""
    return _read(blobs, commitment_alias(task_id, round_, fragment), lambda data: decode_commitment(data, domain))


def read_vote(blobs: BlobStore, domain: Domain, task_id: int, round_: int, witness: str) -> SignedVote | None:
    """The vote ``witness`` announced for a round, or ``None`` if absent or invalid."""
    return _read(blobs, vote_alias(task_id, round_, witness), lambda data: decode_vote(data, domain))


# ---------------------------------------------------------------------- trainer reports


@dataclass(frozen=True)
class TrainerReport:
    """What a trainer says about its own inner loop in one round (self-reported, not proven).

    It is signed (EIP-191) so a reader can attribute it to the trainer that committed the
    fragment on chain; nothing on chain depends on it. The API plots ``loss`` per round.
    """

    task_id: int
    round: int
    fragment: int
    loss: float
    steps: int
    tokens: int
    train_seconds: float
    signer: str = ""

    def body(self) -> dict[str, Any]:
        return {
            "type": "TrainerReport",
            "taskId": self.task_id,
            "round": self.round,
            "fragment": self.fragment,
            "loss": self.loss,
            "steps": self.steps,
            "tokens": self.tokens,
            "trainSeconds": self.train_seconds,
        }


def report_alias(task_id: int, round_: int, fragment: int) -> str:
    return f"gossip:report:{task_id}:{round_}:{fragment}"


def _report_message(body: dict[str, Any]) -> Any:
    """The EIP-191 message a report's signature covers: its canonical JSON without the signature."""
    from eth_account.messages import encode_defunct

    return encode_defunct(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise GossipError(f"gossip report field {what} must be a number")
    try:
        number = float(value)
    except OverflowError:  # an integer too large for a float
        raise GossipError(f"gossip report field {what} is out of range") from None
    if not math.isfinite(number):
        raise GossipError(f"gossip report field {what} must be finite")
    return number


def encode_report(report: TrainerReport, signer: Signer) -> bytes:
    body = report.body()
    signed = signer.account.sign_message(_report_message(body))
    return json.dumps({**body, "signature": _hex(bytes(signed.signature))}, sort_keys=True).encode()


def decode_report(data: bytes) -> TrainerReport:
    from eth_account import Account

    obj = _load(data, "TrainerReport")
    signature = _b(obj.pop("signature", None), "signature", 65)
    loss, seconds = _number(obj.get("loss"), "loss"), _number(obj.get("trainSeconds"), "trainSeconds")
    try:
        signer = str(Account.recover_message(_report_message(obj), signature=signature))
    except Exception as exc:  # eth-account raises several types for bad signatures
        raise GossipError(f"gossip report signature does not recover: {str(exc)[:80]}") from None
    return TrainerReport(
        task_id=_i(obj.get("taskId"), "taskId"),
        round=_i(obj.get("round"), "round"),
        fragment=_i(obj.get("fragment"), "fragment"),
        loss=loss,
        steps=_i(obj.get("steps"), "steps"),
        tokens=_i(obj.get("tokens"), "tokens"),
        train_seconds=seconds,
        signer=signer,
    )


def announce_report(blobs: BlobStore, report: TrainerReport, signer: Signer) -> None:
    blobs.put(encode_report(report, signer), alias=report_alias(report.task_id, report.round, report.fragment))


def read_report(blobs: BlobStore, task_id: int, round_: int, fragment: int) -> TrainerReport | None:
    """The report announced for a slot, or ``None`` if absent or invalid. The caller checks
    ``signer`` against the trainer that committed the fragment on chain."""
    report = _read(blobs, report_alias(task_id, round_, fragment), decode_report)
    if report is None or (report.task_id, report.round, report.fragment) != (task_id, round_, fragment):
        return None
    return report
