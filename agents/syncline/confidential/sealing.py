"""Sealed shards: AES-256-GCM under a fresh data key, the key wrapped to enclaves with HPKE.

Pure functions, no I/O (docs/protocol.md §12.8):

* A shard is encrypted once, under a fresh random 32-byte data key, with AES-256-GCM. The sealed
  blob is ``MAGIC (8 B) || nonce (12 B, random) || ciphertext || tag (16 B)``; its keccak256 (the
  blob store's digest) is the shard's ``shard_ciphertext_hash``, the value a Confidential task's
  dataset manifest and on-chain dataset root bind. The associated data binds the task's sealed
  dataset (``dataset_id``, a random 32-byte value the spec carries) and the shard's index, so a
  ciphertext moved to another shard or another task fails authentication.
* The data key is wrapped to each admitted enclave's X25519 public key with HPKE base mode, RFC 9180
  suite DHKEM(X25519, HKDF-SHA256) / HKDF-SHA256 / AES-256-GCM (``pyhpke``, never hand-written
  crypto). The HPKE ``info`` binds the dataset, the shard index and the shard's ciphertext hash;
  a wrapped key is ``enc (32 B) || sealed data key (48 B)``.

Re-wrapping a data key for a late enclave leaves the shard's ciphertext (and its hash) unchanged.

Every X25519 public key that comes from outside (an enclave or dispute key read from the chain, a
recipient row or an ``enc`` of a sealed blob) passes :func:`check_x25519_public_key` before any
Diffie-Hellman with it: a small-order or non-canonical u-coordinate is refused with
:class:`X25519KeyError` (a :class:`SealingError`), never a library's bare ``ValueError``.
"""

from __future__ import annotations

import os
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pyhpke import AEADId, CipherSuite, KDFId, KEMId, PyHPKEError

from syncline.errors import SynclineError
from syncline.protocol.hashing import keccak

WRAP_ALG = "hpke-x25519-hkdf-sha256-aes-256-gcm"
"""The ``wrap_alg`` of every envelope: the one HPKE suite Syncline accepts."""
MAGIC = b"SYNSEAL1"
NONCE_BYTES = 12
TAG_BYTES = 16
KEY_BYTES = 32
X25519_KEY_BYTES = 32
WRAPPED_KEY_BYTES = X25519_KEY_BYTES + KEY_BYTES + TAG_BYTES
"""``enc`` (the ephemeral X25519 public key) followed by the data key sealed under the HPKE context."""
VALIDATION_INDEX = 0xFFFF_FFFF
"""The shard index the validation shard's AAD and HPKE info carry (training shards: 0..255)."""
SHARD_AAD_LABEL = b"syncline/sealed-shard/v1"
WRAP_INFO_LABEL = b"syncline/sealed-key/v1"

SUITE = CipherSuite.new(KEMId.DHKEM_X25519_HKDF_SHA256, KDFId.HKDF_SHA256, AEADId.AES256_GCM)

X25519_P = 2**255 - 19
"""The field prime of Curve25519; a canonical u-coordinate is below it (RFC 7748 §5)."""
X25519_SMALL_ORDER_U = frozenset(
    {
        0,
        1,
        X25519_P - 1,
        325606250916557431795983626356110631294008115727848805560023387167927233504,
        39382357235489614581723060781553021112529911719440698176882885853963445705823,
    }
)
"""The canonical u-coordinates of the points of order 1, 2, 4 and 8 on Curve25519 and its twist
(libsodium's ``has_small_order`` blocklist, whose ``p`` and ``p + 1`` entries are non-canonical
here): a Diffie-Hellman with one yields the all-zero secret whatever the scalar."""


class SealingError(SynclineError):
    """A sealed shard or a wrapped key does not open: wrong key, wrong binding or tampered bytes."""


class X25519KeyError(SealingError):
    """Bytes that are no usable X25519 public key: not 32 bytes, non-canonical or small-order."""


def check_x25519_public_key(pubkey: object, name: str = "X25519 public key") -> bytes:
    """``pubkey`` as bytes if it is a usable X25519 public key, else X25519KeyError (one line).

    The one check every recipient key and ``enc`` passes (the contract's ``_requireX25519`` is
    the same rule): 32 bytes whose little-endian u-coordinate (RFC 7748: byte 0 least
    significant) is canonical, below ``2^255 - 19`` (the top bit included: an honest key never
    sets it), and not in :data:`X25519_SMALL_ORDER_U`."""
    if not isinstance(pubkey, bytes | bytearray) or len(pubkey) != X25519_KEY_BYTES:
        raise X25519KeyError(f"{name}: expected {X25519_KEY_BYTES} bytes of an X25519 public key")
    u = int.from_bytes(pubkey, "little")
    if u >= X25519_P:
        raise X25519KeyError(f"{name} 0x{bytes(pubkey).hex()}: non-canonical X25519 u-coordinate (>= 2^255 - 19)")
    if u in X25519_SMALL_ORDER_U:
        raise X25519KeyError(f"{name} 0x{bytes(pubkey).hex()}: small-order X25519 point (no shared secret)")
    return bytes(pubkey)


def _check32(value: bytes, name: str) -> bytes:
    if not isinstance(value, bytes | bytearray) or len(value) != 32:
        raise SealingError(f"{name}: expected 32 bytes")
    return bytes(value)


def _index(index: int) -> bytes:
    if not 0 <= index <= VALIDATION_INDEX:
        raise SealingError(f"shard index {index} does not fit uint32")
    return struct.pack(">I", index)


def shard_aad(dataset_id: bytes, index: int) -> bytes:
    """AES-GCM associated data of shard ``index``: ``label || dataset_id (32 B) || uint32 index``."""
    return SHARD_AAD_LABEL + _check32(dataset_id, "dataset_id") + _index(index)


def wrap_info(dataset_id: bytes, index: int, ciphertext_hash: bytes) -> bytes:
    """HPKE ``info`` of a wrapped data key: ``label || dataset_id || uint32 index || ciphertext hash``."""
    return WRAP_INFO_LABEL + _check32(dataset_id, "dataset_id") + _index(index) + _check32(ciphertext_hash, "hash")


def new_data_key() -> bytes:
    """A fresh random AES-256 key (one per shard, never reused)."""
    return AESGCM.generate_key(bit_length=256)


def new_dataset_id() -> bytes:
    return os.urandom(32)


def seal_shard(plaintext: bytes, data_key: bytes, dataset_id: bytes, index: int) -> bytes:
    """The sealed blob of shard ``index`` (``MAGIC || nonce || ciphertext || tag``)."""
    nonce = os.urandom(NONCE_BYTES)
    body = AESGCM(_check32(data_key, "data key")).encrypt(nonce, plaintext, shard_aad(dataset_id, index))
    return MAGIC + nonce + body


def ciphertext_hash(blob: bytes) -> bytes:
    """``shard_ciphertext_hash``: keccak256 of the sealed blob (the blob store's digest)."""
    return keccak(blob)


def open_shard(blob: bytes, data_key: bytes, dataset_id: bytes, index: int) -> bytes:
    """The plaintext of a sealed shard, in memory; SealingError (one line) when it does not authenticate."""
    if len(blob) < len(MAGIC) + NONCE_BYTES + TAG_BYTES or not blob.startswith(MAGIC):
        raise SealingError(f"shard {index}: not a sealed shard (bad magic or too short)")
    nonce = blob[len(MAGIC) : len(MAGIC) + NONCE_BYTES]
    try:
        return AESGCM(_check32(data_key, "data key")).decrypt(
            nonce, blob[len(MAGIC) + NONCE_BYTES :], shard_aad(dataset_id, index)
        )
    except InvalidTag:
        raise SealingError(
            f"shard {index}: the sealed shard does not authenticate under this key and binding"
        ) from None


def generate_enclave_keypair() -> tuple[bytes, bytes]:
    """A fresh X25519 key pair ``(private, public)``, 32 bytes each."""
    key = X25519PrivateKey.generate()
    return key.private_bytes_raw(), key.public_key().public_bytes_raw()


def enclave_public_key(private_key: bytes) -> bytes:
    """The X25519 public key of ``private_key``."""
    return X25519PrivateKey.from_private_bytes(_check32(private_key, "enclave key")).public_key().public_bytes_raw()


def hpke_wrap_key(data_key: bytes, recipient_pubkey: bytes, info: bytes) -> bytes:
    """HPKE base-mode seal of a 32-byte ``data_key`` to an X25519 ``recipient_pubkey`` under
    ``info``: ``enc || ciphertext`` (80 bytes). Shared by sealed shards and sealed DP openings.
    SealingError (X25519KeyError for a bad key) when it cannot be sealed to that key."""
    pubkey = check_x25519_public_key(recipient_pubkey, "enclave_pubkey")
    key = _check32(data_key, "data key")
    try:
        pkr = SUITE.kem.deserialize_public_key(pubkey)
        enc, sender = SUITE.create_sender_context(pkr, info=info)
        return bytes(enc) + bytes(sender.seal(key))
    except (PyHPKEError, ValueError) as exc:  # the DH failed all the same (the check above should catch it)
        raise SealingError(f"enclave_pubkey 0x{pubkey.hex()}: {str(exc).splitlines()[0][:120]}") from None


def hpke_unwrap_key(wrapped: bytes, private_key: bytes, info: bytes, *, what: str) -> bytes:
    """The data key an :func:`hpke_wrap_key` envelope wraps; SealingError (``what``: this key cannot
    unwrap the data key) when this key or ``info`` does not open it."""
    if not isinstance(wrapped, bytes | bytearray):
        raise SealingError(f"wrapped_data_key: expected {WRAPPED_KEY_BYTES} bytes, got {type(wrapped).__name__}")
    if len(wrapped) != WRAPPED_KEY_BYTES:
        raise SealingError(f"wrapped_data_key: expected {WRAPPED_KEY_BYTES} bytes, got {len(wrapped)}")
    enc = check_x25519_public_key(wrapped[:X25519_KEY_BYTES], f"{what}: wrapped key's enc")
    try:
        skr = SUITE.kem.deserialize_private_key(_check32(private_key, "enclave key"))
        recipient = SUITE.create_recipient_context(enc, skr, info=info)
        key = bytes(recipient.open(bytes(wrapped[X25519_KEY_BYTES:])))
    except (PyHPKEError, ValueError):
        raise SealingError(f"{what}: this key cannot unwrap the data key") from None
    return _check32(key, "data key")


def wrap_data_key(data_key: bytes, enclave_pubkey: bytes, dataset_id: bytes, index: int, ct_hash: bytes) -> bytes:
    """HPKE base-mode seal of ``data_key`` to ``enclave_pubkey``: ``enc || ciphertext`` (80 bytes)."""
    return hpke_wrap_key(data_key, enclave_pubkey, wrap_info(dataset_id, index, ct_hash))


def unwrap_data_key(wrapped: bytes, enclave_private_key: bytes, dataset_id: bytes, index: int, ct_hash: bytes) -> bytes:
    """The data key an envelope wraps; SealingError when this enclave key or binding does not open it."""
    info = wrap_info(dataset_id, index, ct_hash)
    return hpke_unwrap_key(wrapped, enclave_private_key, info, what=f"shard {index}")
