"""EIP-712 typed messages agents sign: a trainer's commitment and a witness's vote.

The domain binds the chain id and the verifying contract, and every message names its task and
round, so a signature made for one chain, market, task or round cannot be replayed on another.
Two different messages signed by one key for the same (task, round, fragment) — or, for votes,
the same (task, round, prevStateRoot) — are an equivocation that a contract can check on its own.

A commitment signs everything a verifier needs to locate and check the submission (the ``uri``
included), so relaying a trainer's signed commitment can only ever record the trainer's own. A vote
signs the state root it builds on and its validation-loss metric, so no relayer sets the metric and
a vote cast before a rollback cannot count after it.

The EIP-712 types are ``type_string("Commitment", COMMITMENT_FIELDS)`` and
``type_string("Vote", VOTE_FIELDS)``: exactly the strings ``SynclineStorage`` hashes (a parity test
checks them against the contract's typehashes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eth_account import Account
from eth_account.messages import encode_typed_data
from eth_account.signers.local import LocalAccount

from syncline.protocol.hashing import keccak

DOMAIN_NAME = "Syncline"
DOMAIN_VERSION = "1"

COMMITMENT_FIELDS = [
    {"name": "taskId", "type": "uint256"},
    {"name": "round", "type": "uint32"},
    {"name": "fragment", "type": "uint16"},
    {"name": "payloadHash", "type": "bytes32"},
    {"name": "chunkRoot", "type": "bytes32"},
    {"name": "checkpointRoot", "type": "bytes32"},
    {"name": "uri", "type": "string"},
]
VOTE_FIELDS = [
    {"name": "taskId", "type": "uint256"},
    {"name": "round", "type": "uint32"},
    {"name": "prevStateRoot", "type": "bytes32"},
    {"name": "stateRoot", "type": "bytes32"},
    {"name": "aggregateRoot", "type": "bytes32"},
    {"name": "acceptedMask", "type": "uint256"},
    {"name": "metric", "type": "uint256"},
]
METRIC_SCALE = 1_000_000  # a vote's metric is the validation loss x 1e6


def type_string(primary: str, fields: list[dict[str, str]]) -> str:
    """The EIP-712 type string ``Name(type name,...)`` (what the contract's typehash hashes)."""
    return f"{primary}(" + ",".join(f"{f['type']} {f['name']}" for f in fields) + ")"


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
    """A trainer's outer-gradient commitment for one round and fragment, with the ``uri`` its
    payload can be fetched from (signed: a relayer cannot substitute another locator)."""

    task_id: int
    round: int
    fragment: int
    payload_hash: bytes
    chunk_root: bytes
    checkpoint_root: bytes
    uri: str

    def message(self) -> dict[str, Any]:
        return {
            "taskId": self.task_id,
            "round": self.round,
            "fragment": self.fragment,
            "payloadHash": _b32(self.payload_hash),
            "chunkRoot": _b32(self.chunk_root),
            "checkpointRoot": _b32(self.checkpoint_root),
            "uri": self.uri,
        }

    def as_tuple(self) -> tuple[int, int, int, bytes, bytes, bytes, str]:
        """The Solidity ``Commitment`` struct, in field order."""
        return (
            self.task_id,
            self.round,
            self.fragment,
            _b32(self.payload_hash),
            _b32(self.chunk_root),
            _b32(self.checkpoint_root),
            self.uri,
        )

    def conflicts_with(self, other: Commitment) -> bool:
        """Same slot, different content (any signed field, the uri included): equivocation."""
        same_slot = (self.task_id, self.round, self.fragment) == (other.task_id, other.round, other.fragment)
        return same_slot and self != other


@dataclass(frozen=True)
class Vote:
    """A witness's result for one round, built on ``prev_state_root``, with its validation-loss
    ``metric`` (loss x ``METRIC_SCALE``): what ``finalizeRound`` takes."""

    task_id: int
    round: int
    prev_state_root: bytes
    state_root: bytes
    aggregate_root: bytes
    accepted_mask: int
    metric: int = 0

    def message(self) -> dict[str, Any]:
        return {
            "taskId": self.task_id,
            "round": self.round,
            "prevStateRoot": _b32(self.prev_state_root),
            "stateRoot": _b32(self.state_root),
            "aggregateRoot": _b32(self.aggregate_root),
            "acceptedMask": self.accepted_mask,
            "metric": self.metric,
        }

    def as_tuple(self) -> tuple[int, int, bytes, bytes, bytes, int, int]:
        """The Solidity ``Vote`` struct, in field order."""
        return (
            self.task_id,
            self.round,
            _b32(self.prev_state_root),
            _b32(self.state_root),
            _b32(self.aggregate_root),
            self.accepted_mask,
            self.metric,
        )

    def conflicts_with(self, other: Vote) -> bool:
        """Same (task, round, prevStateRoot), different content (the metric included): equivocation.
        Votes on different previous roots never conflict (a rollback lets a witness vote again)."""
        same_slot = (self.task_id, self.round, self.prev_state_root) == (
            other.task_id,
            other.round,
            other.prev_state_root,
        )
        return same_slot and self != other


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
