"""EIP-712 typed messages agents sign: a trainer's commitment and a witness's vote.

The domain binds the chain id and the verifying contract, and every message names its task and
round, so a signature made for one chain, market, task or round cannot be replayed on another.
Two different messages signed by one key for the same (task, round, fragment) — or, for votes,
the same (task, round) — are an equivocation that a contract can check on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eth_account import Account
from eth_account.messages import encode_typed_data
from eth_account.signers.local import LocalAccount
from eth_utils import keccak

DOMAIN_NAME = "Syncline"
DOMAIN_VERSION = "1"

COMMITMENT_FIELDS = [
    {"name": "taskId", "type": "uint256"},
    {"name": "round", "type": "uint32"},
    {"name": "fragment", "type": "uint16"},
    {"name": "payloadHash", "type": "bytes32"},
    {"name": "chunkRoot", "type": "bytes32"},
    {"name": "checkpointRoot", "type": "bytes32"},
]
VOTE_FIELDS = [
    {"name": "taskId", "type": "uint256"},
    {"name": "round", "type": "uint32"},
    {"name": "stateRoot", "type": "bytes32"},
    {"name": "aggregateRoot", "type": "bytes32"},
    {"name": "acceptedMask", "type": "uint256"},
]


@dataclass(frozen=True)
class Domain:
    """Where a signature is valid: one chain, one market contract."""

    chain_id: int
    verifying_contract: str

    def to_mapping(self) -> dict[str, Any]:
        return {
            "name": DOMAIN_NAME,
            "version": DOMAIN_VERSION,
            "chainId": self.chain_id,
            "verifyingContract": self.verifying_contract,
        }


@dataclass(frozen=True)
class Commitment:
    """A trainer's outer-gradient commitment for one round and fragment."""

    task_id: int
    round: int
    fragment: int
    payload_hash: bytes
    chunk_root: bytes
    checkpoint_root: bytes

    def message(self) -> dict[str, Any]:
        return {
            "taskId": self.task_id,
            "round": self.round,
            "fragment": self.fragment,
            "payloadHash": _b32(self.payload_hash),
            "chunkRoot": _b32(self.chunk_root),
            "checkpointRoot": _b32(self.checkpoint_root),
        }

    def as_tuple(self) -> tuple[int, int, int, bytes, bytes, bytes]:
        """The Solidity ``Commitment`` struct, in field order."""
        return (
            self.task_id,
            self.round,
            self.fragment,
            _b32(self.payload_hash),
            _b32(self.chunk_root),
            _b32(self.checkpoint_root),
        )

    def conflicts_with(self, other: Commitment) -> bool:
        """Same slot, different content: equivocation."""
        same_slot = (self.task_id, self.round, self.fragment) == (other.task_id, other.round, other.fragment)
        mine = (self.payload_hash, self.chunk_root, self.checkpoint_root)
        theirs = (other.payload_hash, other.chunk_root, other.checkpoint_root)
        return same_slot and mine != theirs


@dataclass(frozen=True)
class Vote:
    """A witness's result for one round (what ``finalizeRound`` takes, minus the metric)."""

    task_id: int
    round: int
    state_root: bytes
    aggregate_root: bytes
    accepted_mask: int

    def message(self) -> dict[str, Any]:
        return {
            "taskId": self.task_id,
            "round": self.round,
            "stateRoot": _b32(self.state_root),
            "aggregateRoot": _b32(self.aggregate_root),
            "acceptedMask": self.accepted_mask,
        }

    def as_tuple(self) -> tuple[int, int, bytes, bytes, int]:
        """The Solidity ``Vote`` struct, in field order."""
        return (self.task_id, self.round, _b32(self.state_root), _b32(self.aggregate_root), self.accepted_mask)

    def conflicts_with(self, other: Vote) -> bool:
        same_slot = (self.task_id, self.round) == (other.task_id, other.round)
        mine = (self.state_root, self.aggregate_root, self.accepted_mask)
        theirs = (other.state_root, other.aggregate_root, other.accepted_mask)
        return same_slot and mine != theirs


def _b32(value: bytes) -> bytes:
    if len(value) != 32:
        raise ValueError(f"expected 32 bytes, got {len(value)}")
    return value


def _typed(domain: Domain, message: Commitment | Vote) -> Any:
    primary, fields = ("Commitment", COMMITMENT_FIELDS) if isinstance(message, Commitment) else ("Vote", VOTE_FIELDS)
    return encode_typed_data(
        full_message={
            "types": {
                "EIP712Domain": [
                    {"name": "name", "type": "string"},
                    {"name": "version", "type": "string"},
                    {"name": "chainId", "type": "uint256"},
                    {"name": "verifyingContract", "type": "address"},
                ],
                primary: fields,
            },
            "primaryType": primary,
            "domain": domain.to_mapping(),
            "message": message.message(),
        }
    )


def digest(domain: Domain, message: Commitment | Vote) -> bytes:
    """The EIP-712 digest ``keccak256(0x1901 || domainSeparator || structHash)``."""
    signable = _typed(domain, message)
    return bytes(keccak(b"\x19" + signable.version + signable.header + signable.body))


def sign(account: LocalAccount, domain: Domain, message: Commitment | Vote) -> bytes:
    """65-byte (r, s, v) signature over the typed message (pass ``Signer.account``)."""
    signed = account.sign_message(_typed(domain, message))
    return bytes(signed.signature)


def recover(domain: Domain, message: Commitment | Vote, signature: bytes) -> str:
    """The address that signed ``message`` in ``domain`` (checksummed)."""
    return str(Account.recover_message(_typed(domain, message), signature=signature))
