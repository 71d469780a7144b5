"""A dispute's noise opening sealed to the task's witness committee (docs/protocol.md §12.10).

The opening ``(b, g_s)`` of a drawn or claimed training segment (:mod:`syncline.privacy.opening`,
the ``SYNCDPO1`` bytes) strips the DP noise from its round for whoever reads it. So the trainer
never publishes it in the clear: it encrypts those bytes once with AES-256-GCM under a fresh
random data key and wraps the data key with HPKE (RFC 9180 base mode, the Confidential tier's
suite X25519 / HKDF-SHA256 / AES-256-GCM, ``pyhpke``: :data:`syncline.confidential.sealing.SUITE`)
to each committee witness's X25519 key the chain records (``getEnclave``: a Confidential task's
attested enclave key, otherwise the key registered with ``registerWitnessKey``).

Both the AES-GCM associated data and the HPKE ``info`` bind the task, round, fragment, segment
and the noise commitment the submission's ``checkpointRoot`` binds, so a sealed opening moved to
another segment, round or submission does not open. Encoding (all integers big-endian)::

    magic       8 bytes   b"SYNCDPS1"
    task_id     32 bytes  uint256
    round       uint32
    fragment    uint32
    segment     uint32
    commitment  32 bytes  the noise commitment the checkpoint root binds
    nonce       12 bytes  AES-GCM nonce (random)
    count       uint16    recipients, 0..32 (MAX_WITNESSES)
    recipients  count x (address 20 | X25519 pubkey 32 | wrapped data key 80), by address ascending,
                addresses distinct and non-zero, keys distinct and usable X25519 keys
                (``check_x25519_public_key``: canonical, not small-order)
    length      uint32    ciphertext bytes, 16 + 80 .. 16 + MAX_OPENING_BYTES
    ciphertext  AES-256-GCM(data key, nonce, SYNCDPO1 opening, aad) with its 16-byte tag

Exactly that many bytes; a reader bounds the size before parsing and refuses anything else with one
line naming the field (:class:`SealedOpeningError`). Pure functions, no I/O: the plaintext exists
only in the caller's memory.

A witness registers whatever 32 bytes it likes as its key, so the sealer treats each recipient on
its own: one whose key is no usable X25519 key, or whose envelope fails for any reason, is left out
(logged) and the opening is still sealed to every other; a key two witnesses registered (one copied
the other's: the chain does not refuse it, so nobody is locked out) gets one envelope, which only
the holder of its private key opens.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from syncline.confidential.sealing import (
    KEY_BYTES,
    TAG_BYTES,
    WRAPPED_KEY_BYTES,
    X25519_KEY_BYTES,
    SealingError,
    X25519KeyError,
    check_x25519_public_key,
    enclave_public_key,
    hpke_unwrap_key,
    hpke_wrap_key,
)
from syncline.observability import get_logger
from syncline.privacy.noise import NoiseSeedError
from syncline.privacy.opening import MAX_OPENING_BYTES, check_frame
from syncline.protocol.spec import MAX_WITNESSES

MAGIC = b"SYNCDPS1"
AAD_LABEL = b"syncline/dp-opening/v1"
INFO_LABEL = b"syncline/dp-opening-key/v1"
NONCE_BYTES = 12
ADDRESS_BYTES = 20
RECIPIENT_BYTES = ADDRESS_BYTES + X25519_KEY_BYTES + WRAPPED_KEY_BYTES
MAX_RECIPIENTS = MAX_WITNESSES
_HEADER = 8 + 32 + 4 + 4 + 4 + 32 + NONCE_BYTES + 2
MIN_CIPHERTEXT = 80 + 2 * 32 + TAG_BYTES  # the smallest SYNCDPO1 opening (one segment: two hashes) and its tag
MAX_CIPHERTEXT = MAX_OPENING_BYTES + TAG_BYTES
MAX_SEALED_OPENING_BYTES = _HEADER + RECIPIENT_BYTES * MAX_RECIPIENTS + 4 + MAX_CIPHERTEXT

log = get_logger("syncline.privacy")


class SealedOpeningError(NoiseSeedError):
    """A sealed opening that is malformed, bound to something else, or not addressed to this key."""


@dataclass(frozen=True)
class Binding:
    """What a sealed opening is for: a segment of one submission, under the commitment its root binds."""

    task_id: int
    round_: int
    fragment: int
    segment: int
    commitment: bytes

    def encode(self) -> bytes:
        if not 0 <= self.task_id < 1 << 256:
            raise SealedOpeningError(f"sealed opening task_id {self.task_id} does not fit uint256")
        for name, value in (("round", self.round_), ("fragment", self.fragment), ("segment", self.segment)):
            if not 0 <= value < 1 << 32:
                raise SealedOpeningError(f"sealed opening {name} {value} does not fit uint32")
        if len(self.commitment) != 32:
            raise SealedOpeningError(f"sealed opening commitment is {len(self.commitment)} bytes, expected 32")
        return (
            self.task_id.to_bytes(32, "big")
            + struct.pack(">III", self.round_, self.fragment, self.segment)
            + bytes(self.commitment)
        )

    def aad(self) -> bytes:
        """AES-GCM associated data: ``"syncline/dp-opening/v1" || binding``."""
        return AAD_LABEL + self.encode()

    def info(self) -> bytes:
        """HPKE ``info`` of each wrapped data key: ``"syncline/dp-opening-key/v1" || binding``."""
        return INFO_LABEL + self.encode()


@dataclass(frozen=True)
class Recipient:
    """A committee witness the opening is sealed to: its address and its on-chain X25519 key."""

    address: bytes
    pubkey: bytes

    @classmethod
    def of(cls, address: str, pubkey: bytes) -> Recipient:
        raw = bytes.fromhex(address.removeprefix("0x"))
        if len(raw) != ADDRESS_BYTES:
            raise SealedOpeningError(f"recipient address {address!r} is not 20 bytes")
        return cls(raw, bytes(pubkey))


@dataclass(frozen=True)
class SealedOpening:
    """A parsed sealed opening (its envelopes not yet opened)."""

    binding: Binding
    nonce: bytes
    recipients: tuple[tuple[Recipient, bytes], ...]  # (recipient, wrapped data key)
    ciphertext: bytes

    def recipient_keys(self) -> frozenset[bytes]:
        return frozenset(r.pubkey for r, _ in self.recipients)


def seal_opening(opening: bytes, binding: Binding, recipients: Sequence[Recipient]) -> bytes:
    """Seal the ``SYNCDPO1`` bytes of ``opening`` to ``recipients`` (possibly none: then nobody can
    read it, which a later re-seal to the keys registered since fixes).

    A recipient whose key is no usable X25519 key or whose envelope fails for any reason is left
    out (a ``privacy.sealed_recipient_skipped`` warning) and the others are still sealed to; a key
    an earlier recipient (by address) already has gets no second envelope. SealedOpeningError only
    for what the caller must not pass: a plaintext of no opening's size, too many recipients, a zero
    or repeated address."""
    if not MIN_CIPHERTEXT - TAG_BYTES <= len(opening) <= MAX_OPENING_BYTES:
        raise SealedOpeningError(f"sealed opening plaintext is {len(opening)} bytes, outside the opening sizes")
    if len(recipients) > MAX_RECIPIENTS:
        raise SealedOpeningError(f"sealed opening recipients: {len(recipients)} is more than {MAX_RECIPIENTS}")
    ordered = sorted(recipients, key=lambda r: r.address)
    _check_addresses([r.address for r in ordered])
    head = binding.encode()
    info = binding.info()
    data_key = AESGCM.generate_key(bit_length=256)
    nonce = os.urandom(NONCE_BYTES)
    rows = []
    sealed_to: set[bytes] = set()
    for r in ordered:
        if r.pubkey in sealed_to:  # a copied key: its one envelope opens for its holder only
            continue
        try:
            wrapped = hpke_wrap_key(data_key, r.pubkey, info)
        except Exception as exc:  # any failure of one recipient is a bad recipient, never a failed seal
            log.warning(
                "privacy.sealed_recipient_skipped",
                recipient="0x" + r.address.hex(),
                reason=(str(exc).splitlines() or [type(exc).__name__])[0][:160],
            )
            continue
        sealed_to.add(r.pubkey)
        rows.append(r.address + r.pubkey + wrapped)
    ciphertext = AESGCM(data_key).encrypt(nonce, bytes(opening), binding.aad())
    return b"".join(
        (
            MAGIC,
            head,
            nonce,
            struct.pack(">H", len(rows)),
            *rows,
            struct.pack(">I", len(ciphertext)),
            ciphertext,
        )
    )


def _check_addresses(addresses: Sequence[bytes]) -> None:
    for i, address in enumerate(addresses):
        if not isinstance(address, bytes) or len(address) != ADDRESS_BYTES or address == bytes(ADDRESS_BYTES):
            raise SealedOpeningError(f"sealed opening recipient {i}: zero or malformed address")
        if i and address <= addresses[i - 1]:
            raise SealedOpeningError(f"sealed opening recipient {i}: addresses not strictly ascending")


def _check_recipients(rows: Sequence[tuple[bytes, bytes]]) -> None:
    _check_addresses([address for address, _ in rows])
    seen: set[bytes] = set()
    for i, (_, pubkey) in enumerate(rows):
        try:
            check_x25519_public_key(pubkey, f"sealed opening recipient {i} pubkey")
        except X25519KeyError as exc:
            raise SealedOpeningError(str(exc)) from None
        if pubkey in seen:
            raise SealedOpeningError(f"sealed opening recipient {i}: pubkey listed twice")
        seen.add(pubkey)


def parse_sealed_opening(data: bytes) -> SealedOpening:
    """Strictly decode a sealed opening (no key needed); SealedOpeningError naming the field."""
    data = check_frame(
        data,
        what="sealed opening",
        magic=MAGIC,
        header=_HEADER,
        limit=MAX_SEALED_OPENING_BYTES,
        error=SealedOpeningError,
    )
    task_id = int.from_bytes(data[8:40], "big")
    round_, fragment, segment = struct.unpack(">III", data[40:52])
    commitment = data[52:84]
    nonce = data[84:96]
    (count,) = struct.unpack(">H", data[96:98])
    if count > MAX_RECIPIENTS:
        raise SealedOpeningError(f"sealed opening count {count} is more than {MAX_RECIPIENTS} recipients")
    at = _HEADER + RECIPIENT_BYTES * count
    if len(data) < at + 4:
        raise SealedOpeningError(f"sealed opening is {len(data)} bytes, its {count} recipients need {at + 4} or more")
    rows = [data[_HEADER + RECIPIENT_BYTES * i : _HEADER + RECIPIENT_BYTES * (i + 1)] for i in range(count)]
    _check_recipients([(row[:ADDRESS_BYTES], row[ADDRESS_BYTES : ADDRESS_BYTES + X25519_KEY_BYTES]) for row in rows])
    (length,) = struct.unpack(">I", data[at : at + 4])
    if not MIN_CIPHERTEXT <= length <= MAX_CIPHERTEXT:
        raise SealedOpeningError(f"sealed opening length {length} is outside {MIN_CIPHERTEXT}..{MAX_CIPHERTEXT}")
    if len(data) != at + 4 + length:
        raise SealedOpeningError(f"sealed opening is {len(data)} bytes, its length {length} needs {at + 4 + length}")
    recipients = tuple(
        (
            Recipient(row[:ADDRESS_BYTES], row[ADDRESS_BYTES : ADDRESS_BYTES + X25519_KEY_BYTES]),
            row[ADDRESS_BYTES + X25519_KEY_BYTES :],
        )
        for row in rows
    )
    return SealedOpening(Binding(task_id, round_, fragment, segment, commitment), nonce, recipients, data[at + 4 :])


def unseal_opening(data: bytes, private_key: bytes, expected: Binding) -> bytes:
    """The ``SYNCDPO1`` plaintext of a sealed opening, in memory, for the holder of ``private_key``;
    SealedOpeningError (one line) when it is malformed, bound to anything but ``expected``, has no
    envelope for this key, or does not open under it."""
    sealed = parse_sealed_opening(data)
    got = sealed.binding
    for name, want, have in (
        ("task_id", expected.task_id, got.task_id),
        ("round", expected.round_, got.round_),
        ("fragment", expected.fragment, got.fragment),
        ("segment", expected.segment, got.segment),
    ):
        if want != have:
            raise SealedOpeningError(f"sealed opening {name} {have} is not the disputed {want}")
    if got.commitment != expected.commitment:
        raise SealedOpeningError(
            f"sealed opening commitment 0x{got.commitment.hex()} is not the bound 0x{expected.commitment.hex()}"
        )
    if not isinstance(private_key, bytes | bytearray) or len(private_key) != KEY_BYTES:
        raise SealedOpeningError("sealed opening: the dispute key must be 32 bytes")
    mine = enclave_public_key(bytes(private_key))
    wrapped = next((w for r, w in sealed.recipients if r.pubkey == mine), None)
    if wrapped is None:
        raise SealedOpeningError(f"sealed opening has no envelope for key 0x{mine.hex()}")
    try:
        data_key = hpke_unwrap_key(wrapped, bytes(private_key), expected.info(), what="sealed opening")
    except SealingError as exc:
        raise SealedOpeningError(str(exc)) from None
    try:
        return AESGCM(data_key).decrypt(sealed.nonce, sealed.ciphertext, expected.aad())
    except InvalidTag:
        raise SealedOpeningError("sealed opening ciphertext does not authenticate under its binding") from None
