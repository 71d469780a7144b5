"""Where the secrets of a Confidential task live on disk, always encrypted.

* An enclave's X25519 private key: an eth-account (Web3 Secret Storage, scrypt + AES-128-CTR)
  keystore file, like the agents' Ethereum keys (:mod:`syncline.chain.keys`), its password in an
  environment variable (``$SYNCLINE_ENCLAVE_PASSWORD`` by default). It is decrypted into the
  trainer's or witness's process and never leaves it: :class:`EnclaveKey` prints as its public key.
* The sponsor's data keys (one per sealed shard): one file encrypted with AES-256-GCM under a key
  derived with scrypt from ``$SYNCLINE_SEALING_PASSWORD``; the sponsor needs them again only to wrap
  them for enclaves that enroll later. The store also holds its :class:`StoreBinding` (the sponsor
  address and the attestation policy it seals for), inside the AES-GCM ciphertext, so nobody without
  the password can change it: a build wraps keys only for a task whose on-chain sponsor and policy
  are the binding's (:func:`syncline.confidential.sponsor.build_manifest`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt
from eth_account import Account

from syncline.chain.keys import decrypt_keystore
from syncline.confidential import sealing
from syncline.confidential.manifest import SealedDataset, SealedShard
from syncline.errors import KeyConfigError
from syncline.protocol.wire import WireFormatError, load_bounded_json

ENCLAVE_PASSWORD_ENV = "SYNCLINE_ENCLAVE_PASSWORD"
SEALING_PASSWORD_ENV = "SYNCLINE_SEALING_PASSWORD"
ENCLAVE_KIND = "syncline-enclave-x25519"
DATA_KEYS_KIND = "syncline-sealing-data-keys"
MAX_KEYSTORE_BYTES = 64 << 10
SCRYPT_N = 1 << 15


@dataclass(frozen=True)
class EnclaveKey:
    """An enclave's X25519 key pair; ``repr`` shows the public key, never the private one."""

    private_key: bytes = field(repr=False)

    @property
    def pubkey(self) -> bytes:
        return sealing.enclave_public_key(self.private_key)

    def __repr__(self) -> str:
        return f"EnclaveKey(pubkey=0x{self.pubkey.hex()})"


def _password(password: str | None, env: str, path: Path) -> str:
    if password is None:
        password = os.environ.get(env)
    if password is None:
        raise KeyConfigError(f"{path} needs a password: set ${env}")
    return password


def _write_private(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    path.chmod(0o600)
    return path


def _read_json(path: Path, what: str) -> dict[str, object]:
    try:
        raw = Path(path).read_bytes()
        data = load_bounded_json(
            raw, max_bytes=MAX_KEYSTORE_BYTES if what == "enclave keystore" else 4 << 20, what=what
        )
    except OSError as exc:
        raise KeyConfigError(f"cannot read {what} {path}: {exc.strerror}") from None
    except WireFormatError as exc:
        raise KeyConfigError(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise KeyConfigError(f"{path} is not a {what}")
    return data


def new_enclave_key() -> EnclaveKey:
    return EnclaveKey(sealing.generate_enclave_keypair()[0])


def write_enclave_keystore(key: EnclaveKey, path: Path, password: str, *, scrypt_n: int | None = None) -> Path:
    """Encrypt ``key`` into an eth-account keystore file (mode 0600); it names its public key.

    ``scrypt_n``: the KDF's work factor (default eth-account's, 2**18); a lower one only where the
    password is itself a random secret (the demo's 128-bit passwords), never a person's."""
    data = dict(Account.encrypt(key.private_key, password, kdf="scrypt", iterations=scrypt_n))
    data.pop("address", None)  # not an Ethereum account: the keystore names the X25519 public key
    data["kind"] = ENCLAVE_KIND
    data["enclave_pubkey"] = "0x" + key.pubkey.hex()
    return _write_private(path, json.dumps(data))


def load_enclave_key(
    path: Path, *, password: str | None = None, password_env: str = ENCLAVE_PASSWORD_ENV
) -> EnclaveKey:
    """Decrypt an enclave keystore written by :func:`write_enclave_keystore` (one-line KeyConfigError)."""
    secret = _password(password, password_env, path)
    data = _read_json(path, "enclave keystore")
    if data.get("kind") != ENCLAVE_KIND:
        raise KeyConfigError(f"{path} is not an enclave keystore (kind {ENCLAVE_KIND})")
    key = EnclaveKey(decrypt_keystore(data, secret, path, "enclave keystore"))
    if data.get("enclave_pubkey") != "0x" + key.pubkey.hex():
        raise KeyConfigError(f"{path}: the stored enclave_pubkey is not the key's public key")
    return key


def _kdf(password: str, salt: bytes) -> bytes:
    return Scrypt(salt=salt, length=32, n=SCRYPT_N, r=8, p=1).derive(password.encode())


def _hex_of(value: str | bytes, size: int, what: str) -> str:
    text = "0x" + value.hex() if isinstance(value, bytes | bytearray) else str(value).lower()
    if not (text.startswith("0x") and len(text) == 2 + 2 * size and all(c in "0123456789abcdef" for c in text[2:])):
        raise KeyConfigError(f"store binding: {what} {text!r} is not {size} bytes of 0x-hex")
    return text


@dataclass(frozen=True)
class StoreBinding:
    """Whose data keys these are and for which attestation policy: the sponsor's address, the
    verifier and the measurement allow-list (lowercase hex, measurements sorted). Written inside the
    encrypted store; a build refuses a task whose on-chain sponsor or policy differs."""

    sponsor: str
    verifier: str
    measurements: tuple[str, ...]

    @classmethod
    def of(cls, sponsor: str, verifier: str, measurements: Iterable[str | bytes]) -> StoreBinding:
        return cls(
            sponsor=_hex_of(sponsor, 20, "sponsor"),
            verifier=_hex_of(verifier, 20, "verifier"),
            measurements=tuple(sorted({_hex_of(m, 32, "measurement") for m in measurements})),
        )

    def to_mapping(self) -> dict[str, object]:
        return {"sponsor": self.sponsor, "verifier": self.verifier, "measurements": list(self.measurements)}

    @classmethod
    def from_mapping(cls, data: object) -> StoreBinding:
        if not isinstance(data, dict) or set(data) != {"sponsor", "verifier", "measurements"}:
            raise KeyConfigError("store binding: expected {sponsor, verifier, measurements}")
        measurements = data["measurements"]
        if not isinstance(measurements, list) or not all(isinstance(m, str) for m in measurements):
            raise KeyConfigError("store binding: measurements is not a list of hex strings")
        return cls.of(str(data["sponsor"]), str(data["verifier"]), measurements)

    def policy(self) -> tuple[str, tuple[str, ...]]:
        return self.verifier, self.measurements


@dataclass(frozen=True)
class SealingKeys:
    """The sponsor's record of one sealed dataset: its data keys (secret), its shards' public facts
    and its :class:`StoreBinding` (None: a store written unbound; builds refuse it until bound)."""

    dataset_id: bytes
    keys: dict[int, bytes] = field(repr=False)
    shards: tuple[SealedShard, ...]
    validation: SealedShard | None
    binding: StoreBinding | None = None


def _shard_doc(s: SealedShard) -> list[object]:
    return [s.index, s.ciphertext_hash.hex(), s.ciphertext_bytes]


def _shard_of(doc: list[object]) -> SealedShard:
    index, digest, size = doc
    return SealedShard(int(str(index)), bytes.fromhex(str(digest)), int(str(size)))


def write_data_keys(path: Path, dataset: SealedDataset, password: str, *, binding: StoreBinding | None = None) -> Path:
    """Encrypt the sponsor's data keys of one sealed dataset into ``path`` (mode 0600), bound to
    ``binding`` (the sponsor and the policy it seals for; ``post-task`` always binds)."""
    keys = SealingKeys(
        dataset_id=dataset.dataset_id,
        keys=dict(dataset.data_keys),
        shards=tuple(dataset.shards()),
        validation=dataset.validation(),
        binding=binding,
    )
    return _write_store(path, keys, password)


def _write_store(path: Path, store: SealingKeys, password: str) -> Path:
    salt, nonce = os.urandom(16), os.urandom(12)
    body = json.dumps(
        {
            "dataset_id": "0x" + store.dataset_id.hex(),
            "keys": {str(i): k.hex() for i, k in store.keys.items()},
            "shards": [_shard_doc(s) for s in store.shards],
            "validation": _shard_doc(store.validation) if store.validation is not None else None,
            "binding": store.binding.to_mapping() if store.binding is not None else None,
        }
    )
    ct = AESGCM(_kdf(password, salt)).encrypt(nonce, body.encode(), DATA_KEYS_KIND.encode())
    doc = {
        "kind": DATA_KEYS_KIND,
        "kdf": "scrypt",
        "n": SCRYPT_N,
        "salt": salt.hex(),
        "nonce": nonce.hex(),
        "ciphertext": ct.hex(),
    }
    return _write_private(path, json.dumps(doc))


def load_data_keys(path: Path, *, password: str | None = None, password_env: str = SEALING_PASSWORD_ENV) -> SealingKeys:
    """The sponsor's :class:`SealingKeys` from its encrypted data-key file."""
    secret = _password(password, password_env, path)
    doc = _read_json(path, "data-key store")
    try:
        if doc["kind"] != DATA_KEYS_KIND or doc["n"] != SCRYPT_N:
            raise KeyConfigError(f"{path} is not a data-key store")
        salt, nonce, ct = (bytes.fromhex(str(doc[k])) for k in ("salt", "nonce", "ciphertext"))
        body = json.loads(AESGCM(_kdf(secret, salt)).decrypt(nonce, ct, DATA_KEYS_KIND.encode()))
        return SealingKeys(
            dataset_id=bytes.fromhex(body["dataset_id"][2:]),
            keys={int(i): bytes.fromhex(k) for i, k in body["keys"].items()},
            shards=tuple(_shard_of(d) for d in body["shards"]),
            validation=_shard_of(body["validation"]) if body["validation"] is not None else None,
            binding=_binding_of(body.get("binding"), path),
        )
    except InvalidTag:
        raise KeyConfigError(f"cannot decrypt data-key store {path}: wrong password or corrupt file") from None
    except (KeyError, TypeError, ValueError, AttributeError):
        raise KeyConfigError(f"{path} is not a data-key store") from None


def _binding_of(raw: object, path: Path) -> StoreBinding | None:
    try:
        return StoreBinding.from_mapping(raw) if raw is not None else None
    except KeyConfigError as exc:
        raise KeyConfigError(f"{path}: {exc}") from None


def bind_data_keys(
    path: Path, binding: StoreBinding, *, password: str | None = None, password_env: str = SEALING_PASSWORD_ENV
) -> SealingKeys:
    """Bind an unbound data-key store to ``binding`` (re-encrypted in place); a store bound to the
    same binding is left as it is, one bound to another is refused (KeyConfigError)."""
    secret = _password(password, password_env, path)
    store = load_data_keys(path, password=secret)
    if store.binding == binding:
        return store
    if store.binding is not None:
        raise KeyConfigError(
            f"{path} is already bound to sponsor {store.binding.sponsor} (verifier {store.binding.verifier}); "
            "a store is bound once"
        )
    bound = replace(store, binding=binding)
    _write_store(path, bound, secret)
    return bound
