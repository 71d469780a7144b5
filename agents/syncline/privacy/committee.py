"""Who a DP noise opening is sealed to: the task's witness committee and their keys on chain.

* A witness's **dispute key** is an X25519 key pair (the HPKE recipient key of
  :mod:`syncline.privacy.sealed`). In a Confidential task it is the witness's attested enclave key
  (``registerWitnessEnclave``); in any other DP task the witness generates one once, keeps it in
  an encrypted keystore in its state dir (``<state_dir>/dispute-keystore.json``, the enclave
  keystore's format: eth-account Web3 Secret Storage, scrypt + AES-128-CTR, mode 0600; its
  password in ``$SYNCLINE_DISPUTE_PASSWORD``) and registers its public key with
  ``registerWitnessKey`` before the task runs. The private key is decrypted into the witness's
  process only; nothing writes it in the clear.
* :class:`CommitteeKeys` reads ``getEnclave`` for each of the spec's witnesses (what a trainer
  seals to). A witness registers at most once (no rotation), so a key once read is final: only the
  witnesses still without one are read again. A key that is no usable X25519 key
  (:func:`syncline.confidential.sealing.check_x25519_public_key`: small-order or non-canonical,
  which the contract refuses too) is final as well: that witness is left out, logged once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from syncline.confidential.keystore import EnclaveKey, load_enclave_key, new_enclave_key, write_enclave_keystore
from syncline.confidential.sealing import X25519KeyError, check_x25519_public_key
from syncline.errors import KeyConfigError
from syncline.observability import get_logger
from syncline.privacy.sealed import Recipient

log = get_logger("syncline.privacy")

DISPUTE_PASSWORD_ENV = "SYNCLINE_DISPUTE_PASSWORD"
DISPUTE_KEYSTORE = "dispute-keystore.json"
ZERO_KEY = bytes(32)


def load_or_create_dispute_key(
    state_dir: Path,
    *,
    password: str | None = None,
    password_env: str = DISPUTE_PASSWORD_ENV,
    scrypt_n: int | None = None,
) -> EnclaveKey:
    """This witness's dispute key from ``<state_dir>/dispute-keystore.json``, generated (and
    encrypted there) on first use. KeyConfigError (one line) without a password or with a wrong one.

    ``scrypt_n``: the keystore's work factor when it is created (default eth-account's 2**18); a
    lower one only where the password is itself a random secret (the demo's)."""
    path = Path(state_dir) / DISPUTE_KEYSTORE
    secret = password if password is not None else os.environ.get(password_env)
    if secret is None:
        raise KeyConfigError(f"{path} needs a password: set ${password_env}")
    if path.exists():
        return load_enclave_key(path, password=secret)
    key = new_enclave_key()
    write_enclave_keystore(key, path, secret, scrypt_n=scrypt_n)
    return key


KeyOf = Callable[[str], bytes]
"""``account -> the X25519 key the chain records for it in the task`` (``getEnclave``; zeros: none)."""


@dataclass
class CommitteeKeys:
    """The committee's registered dispute keys, read from the chain as they appear."""

    witnesses: Sequence[str]
    key_of: KeyOf
    _known: dict[str, bytes] = field(default_factory=dict)
    _unusable: set[str] = field(default_factory=set)

    def recipients(self) -> tuple[Recipient, ...]:
        """Every witness whose usable key the chain has now (its address and key)."""
        for w in self.witnesses:
            address = w.lower()
            if address in self._known or address in self._unusable:
                continue
            key = bytes(self.key_of(w))
            if key == ZERO_KEY:
                continue
            try:
                self._known[address] = check_x25519_public_key(key, f"witness {address}'s dispute key")
            except X25519KeyError as exc:  # final (no rotation): left out of every seal, said once
                self._unusable.add(address)
                log.warning("privacy.dispute_key_unusable", witness=address, reason=str(exc))
        return tuple(Recipient.of(a, k) for a, k in sorted(self._known.items()))

    @property
    def complete(self) -> bool:
        return len(self._known) + len(self._unusable) == len({w.lower() for w in self.witnesses})
