"""Signing keys for agents: an encrypted eth-account keystore or an environment variable.

No key is ever logged: ``Signer`` prints as its address only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from eth_account import Account
from eth_account.signers.local import LocalAccount

from syncline.errors import KeyConfigError, candidate_failure

DEFAULT_KEY_ENV = "SYNCLINE_PRIVATE_KEY"
DEFAULT_PASSWORD_ENV = "SYNCLINE_KEYSTORE_PASSWORD"


@dataclass(frozen=True)
class Signer:
    """A local account that signs transactions. ``repr`` shows the address, never the key."""

    account: LocalAccount = field(repr=False)

    @property
    def address(self) -> str:
        return str(self.account.address)

    def __repr__(self) -> str:
        return f"Signer({self.address})"


def from_private_key(key: str) -> Signer:
    try:
        return Signer(Account.from_key(key))
    except (ValueError, TypeError) as exc:
        raise KeyConfigError("the private key is not a 32-byte hex string") from exc


def from_env(var: str = DEFAULT_KEY_ENV) -> Signer:
    key = os.environ.get(var)
    if not key:
        raise KeyConfigError(f"no key: set ${var} or pass --keystore FILE")
    return from_private_key(key)


def from_keystore(path: Path, *, password: str | None = None, password_env: str = DEFAULT_PASSWORD_ENV) -> Signer:
    """Decrypt an eth-account (Web3 Secret Storage) keystore file."""
    if password is None:
        password = os.environ.get(password_env)
    if password is None:
        raise KeyConfigError(f"keystore {path} needs a password: set ${password_env}")
    try:
        encrypted = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise KeyConfigError(f"cannot read keystore {path}: {exc}") from exc
    return Signer(Account.from_key(decrypt_keystore(encrypted, password, path)))


MAX_KDF_WORK = 1 << 22
"""Largest scrypt ``n * r * p`` (and PBKDF2 rounds / 4) a keystore may ask for: a hostile or damaged
file with ``dklen`` or ``n`` of 2**70 hung the decryption (eth-account runs what the file says)."""


def _bounded_int(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def check_keystore_shape(doc: object, path: Path) -> None:
    """Raise KeyConfigError (one line) unless ``doc`` has the types of a Web3 Secret Storage (v3)
    keystore, with KDF parameters a decryption can afford; checked before eth-account reads it."""
    crypto = doc.get("crypto", doc.get("Crypto")) if isinstance(doc, dict) else None
    if not isinstance(crypto, dict):
        raise KeyConfigError(f"{path} is not an eth-account keystore file")
    params, cipher = crypto.get("kdfparams"), crypto.get("cipherparams")
    texts = (crypto.get("ciphertext"), crypto.get("mac"), crypto.get("cipher"), crypto.get("kdf"))
    if not isinstance(params, dict) or not isinstance(cipher, dict) or not all(isinstance(t, str) for t in texts):
        raise KeyConfigError(f"{path} is not an eth-account keystore file")
    if not isinstance(cipher.get("iv"), str) or not isinstance(params.get("salt"), str):
        raise KeyConfigError(f"{path} is not an eth-account keystore file")
    if not _bounded_int(params.get("dklen"), 32, 64):
        raise KeyConfigError(f"{path}: keystore kdfparams.dklen must be 32..64")
    if crypto["kdf"] == "scrypt":
        n, r, p = params.get("n"), params.get("r"), params.get("p")
        if not (_bounded_int(n, 2, MAX_KDF_WORK) and _bounded_int(r, 1, 64) and _bounded_int(p, 1, 64)):
            raise KeyConfigError(f"{path}: keystore scrypt parameters out of range")
        assert isinstance(n, int) and isinstance(r, int) and isinstance(p, int)
        if n & (n - 1) or n * r * p > MAX_KDF_WORK * 8:
            raise KeyConfigError(f"{path}: keystore scrypt parameters out of range")
    elif crypto["kdf"] == "pbkdf2":
        if not _bounded_int(params.get("c"), 1, 4 * MAX_KDF_WORK) or params.get("prf") != "hmac-sha256":
            raise KeyConfigError(f"{path}: keystore pbkdf2 parameters out of range")
    else:
        raise KeyConfigError(f"{path}: keystore kdf {crypto['kdf']!r:.40} is not scrypt or pbkdf2")


def decrypt_keystore(doc: object, password: str, path: Path, what: str = "keystore") -> bytes:
    """The private key in a Web3 Secret Storage keystore ``doc`` (its types and KDF cost checked
    first); any failure is one KeyConfigError line."""
    check_keystore_shape(doc, path)
    assert isinstance(doc, dict)
    try:
        return bytes(Account.decrypt(doc, password))
    except ValueError:
        raise KeyConfigError(f"cannot decrypt {what} {path}: wrong password or corrupt file") from None
    except Exception as exc:  # eth-account raises several types for a damaged file
        candidate_failure(exc)
        raise KeyConfigError(f"{path} is not an eth-account keystore file") from None


def write_keystore(signer: Signer, path: Path, password: str) -> Path:
    """Encrypt ``signer``'s key into a keystore file (mode 0600)."""
    data = Account.encrypt(signer.account.key, password)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(data))
    path.chmod(0o600)
    return path


def resolve(keystore: Path | None = None, key_env: str = DEFAULT_KEY_ENV) -> Signer:
    """A keystore if given, otherwise the environment variable."""
    if keystore is not None:
        return from_keystore(keystore)
    return from_env(key_env)
