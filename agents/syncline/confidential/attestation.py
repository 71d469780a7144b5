"""Attestation reports for the devnet verifier, and its deployment.

``DevnetAttestationService`` plays the attestation service a real TEE deployment gets from the
hardware vendor: it signs, as an EIP-712 ``AttestationReport``, the enclave public key and
measurement it vouches for and the operator account they serve. ``DevnetAttestationVerifier``
(on chain) trusts exactly its key. The report is the 193 bytes the verifier takes:
``abi.encode(enclavePubkey, measurement, operator, issuedAt)`` followed by the 65-byte
signature; the EIP-712 domain ("Syncline Devnet Attestation", "1", chain id, verifier address)
binds it to one chain and one verifier. See ``docs/attestation.md`` for what a real SEV-SNP or
TDX verifier checks instead.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eth_abi import decode as abi_decode
from eth_abi import encode as abi_encode
from eth_account import Account
from eth_account.messages import encode_typed_data
from eth_account.signers.local import LocalAccount
from web3 import Web3

from syncline.chain.deployment import deploy_contract
from syncline.chain.keys import Signer
from syncline.chain.toolchain import compile_contracts
from syncline.errors import ChainError, KeyConfigError, SpecError
from syncline.protocol.hashing import keccak

DOMAIN_NAME = "Syncline Devnet Attestation"
DOMAIN_VERSION = "1"
REPORT_FIELDS = [
    {"name": "enclavePubkey", "type": "bytes32"},
    {"name": "measurement", "type": "bytes32"},
    {"name": "operator", "type": "address"},
    {"name": "issuedAt", "type": "uint64"},
]
REPORT_TYPE = "AttestationReport(bytes32 enclavePubkey,bytes32 measurement,address operator,uint64 issuedAt)"
SIGNATURE_BYTES = 65
REPORT_BYTES = 4 * 32 + SIGNATURE_BYTES  # DevnetAttestationVerifier.REPORT_LENGTH
_ABI_TYPES = ["bytes32", "bytes32", "address", "uint64"]


def measurement_digest(launch_measurement: bytes) -> bytes:
    """The 32-byte allow-list entry for a raw launch measurement (SEV-SNP ``MEASUREMENT`` and TDX
    ``MRTD`` are 48 bytes): its keccak256."""
    return keccak(bytes(launch_measurement))


def _b32(name: str, value: bytes) -> bytes:
    if not isinstance(value, bytes | bytearray) or len(value) != 32:
        size = len(value) if isinstance(value, bytes | bytearray) else type(value).__name__
        raise ValueError(f"{name}: expected 32 bytes, got {size}")
    return bytes(value)


@dataclass(frozen=True)
class AttestationReport:
    """What a devnet report binds (the fields of the EIP-712 struct)."""

    enclave_pubkey: bytes
    measurement: bytes
    operator: str
    issued_at: int

    def message(self) -> dict[str, Any]:
        return {
            "enclavePubkey": _b32("enclave_pubkey", self.enclave_pubkey),
            "measurement": _b32("measurement", self.measurement),
            "operator": Web3.to_checksum_address(self.operator),
            "issuedAt": self.issued_at,
        }

    def encode(self, signature: bytes) -> bytes:
        """The report bytes: the four ABI words, then the 65-byte signature."""
        if len(signature) != SIGNATURE_BYTES:
            raise ValueError(f"signature: expected {SIGNATURE_BYTES} bytes, got {len(signature)}")
        m = self.message()
        return abi_encode(_ABI_TYPES, [m["enclavePubkey"], m["measurement"], m["operator"], m["issuedAt"]]) + bytes(
            signature
        )


def decode_report(report: bytes) -> tuple[AttestationReport, bytes]:
    """Split report bytes into the fields they bind and the signature (no signature check)."""
    if len(report) != REPORT_BYTES:
        raise ValueError(f"attestation report: expected {REPORT_BYTES} bytes, got {len(report)}")
    key, measurement, operator, issued_at = abi_decode(_ABI_TYPES, bytes(report[:128]), strict=True)
    fields = AttestationReport(bytes(key), bytes(measurement), Web3.to_checksum_address(operator), int(issued_at))
    return fields, bytes(report[128:])


def domain(chain_id: int, verifier: str) -> dict[str, Any]:
    """The EIP-712 domain of the devnet verifier at ``verifier`` on chain ``chain_id``."""
    return {
        "name": DOMAIN_NAME,
        "version": DOMAIN_VERSION,
        "chainId": chain_id,
        "verifyingContract": Web3.to_checksum_address(verifier),
    }


class DevnetAttestationService:
    """The simulated attestation service: signs reports the devnet verifier at ``verifier`` on
    chain ``chain_id`` accepts. ``repr`` shows the address, never the key."""

    def __init__(self, private_key: str | bytes, *, chain_id: int, verifier: str) -> None:
        try:
            self._account: LocalAccount = Account.from_key(private_key)
        except (ValueError, TypeError) as exc:
            raise KeyConfigError("attestation service key: not a 32-byte private key") from exc
        self.chain_id = int(chain_id)
        self.verifier = Web3.to_checksum_address(verifier)

    @property
    def address(self) -> str:
        """The service's signing address (the verifier's ``SERVICE``)."""
        return str(self._account.address)

    def __repr__(self) -> str:
        return f"DevnetAttestationService({self.address}, verifier={self.verifier})"

    def issue(self, enclave_pubkey: bytes, measurement: bytes, operator: str, issued_at: int | None = None) -> bytes:
        """A report binding ``enclave_pubkey`` and ``measurement`` (32 bytes each) to ``operator``."""
        fields = AttestationReport(
            _b32("enclave_pubkey", enclave_pubkey),
            _b32("measurement", measurement),
            Web3.to_checksum_address(operator),
            int(time.time()) if issued_at is None else int(issued_at),
        )
        if not 0 <= fields.issued_at < 2**64:
            raise ValueError(f"issued_at: out of uint64 range: {fields.issued_at}")
        signable = encode_typed_data(
            domain_data=domain(self.chain_id, self.verifier),
            message_types={"AttestationReport": REPORT_FIELDS},
            message_data=fields.message(),
        )
        signature = bytes(self._account.sign_message(signable).signature)
        return fields.encode(signature)


def deploy_devnet_verifier(w3: Web3, deployer: Signer, service_address: str) -> str:
    """Deploy ``DevnetAttestationVerifier(service_address)``; returns its address."""
    if int(service_address, 16) == 0:
        raise ChainError("attestation service address: must not be zero")
    artifact = compile_contracts()["DevnetAttestationVerifier"]
    address, _ = deploy_contract(w3, deployer, artifact, Web3.to_checksum_address(service_address))
    return Web3.to_checksum_address(address)


def check_confidential_terms(
    task_id: int, onchain: tuple[str, Sequence[bytes]], verifier: str, measurements: Sequence[str | bytes]
) -> None:
    """Refuse a Confidential task whose on-chain attestation policy (``get_confidential_config``)
    is not the one its spec artifact names (``confidential.verifier`` / ``.measurements``): the
    same verifier, the same allow-list in the same order. One line naming what differs."""
    chain_verifier, chain_measurements = onchain
    if int(chain_verifier, 16) == 0:
        raise SpecError(f"task {task_id}: no attestation policy on chain yet (configureConfidential)")
    if Web3.to_checksum_address(chain_verifier) != Web3.to_checksum_address(verifier):
        raise SpecError(f"task {task_id}: on-chain verifier {chain_verifier} != spec confidential.verifier {verifier}")
    spec_list = ["0x" + _measurement_bytes(m).hex() for m in measurements]
    chain_list = ["0x" + bytes(m).hex() for m in chain_measurements]
    if spec_list != chain_list:
        raise SpecError(
            f"task {task_id}: on-chain measurements [{', '.join(chain_list)}] != spec confidential.measurements "
            f"[{', '.join(spec_list)}]"
        )


def _measurement_bytes(value: str | bytes) -> bytes:
    try:
        raw = bytes.fromhex(value.removeprefix("0x")) if isinstance(value, str) else bytes(value)
        return _b32("measurement", raw)
    except ValueError as exc:
        raise SpecError(f"confidential.measurements: {value!r} is not 32 bytes of hex ({exc})") from None
