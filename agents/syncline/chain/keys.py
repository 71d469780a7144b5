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

from syncline.errors import KeyConfigError

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
    try:
        key = Account.decrypt(encrypted, password)
    except (KeyError, TypeError, AttributeError) as exc:
        raise KeyConfigError(f"{path} is not an eth-account keystore file") from exc
    except ValueError as exc:
        raise KeyConfigError(f"cannot decrypt keystore {path}: wrong password or corrupt file") from exc
    return Signer(Account.from_key(key))


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
