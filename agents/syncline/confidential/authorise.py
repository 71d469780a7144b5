"""The sponsor's wallet signature that authorises one sealed-manifest build on its API server.

``POST /api/runs/{id}/sealed-manifest/build`` wraps the sponsor's data keys, so the server builds
only when the task's on-chain sponsor asks: the body is ``{version, expires, signature}``, the
signature an EIP-191 ``personal_sign`` (a wallet's text signing) over :func:`build_message`, which
binds the chain id, the market address, the task id, the manifest version the build installs and
the expiry (unix seconds, at most :data:`MAX_AHEAD_S` ahead of the server's clock). The web UI
signs the same text (frontend/src/pages/sealed.ts); :func:`sign_build` is the Python side.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from eth_account import Account
from eth_account.messages import encode_defunct

from syncline.chain.keys import Signer
from syncline.errors import SynclineError

MAX_AHEAD_S = 600
"""The furthest ahead an authorisation may expire: a leaked signature is useless after 10 minutes."""
_SIGNATURE = re.compile(r"^0x[0-9a-fA-F]{130}$")


class BuildUnauthorised(SynclineError):
    """The build request carries no valid, current signature (``status``: 401 or 403)."""

    def __init__(self, message: str, status: int = 401):
        super().__init__(message)
        self.status = status


def build_message(chain_id: int, market: str, task_id: int, version: int, expires: int) -> str:
    """The text the sponsor signs to authorise building ``version`` of the task's sealed manifest."""
    return (
        "Syncline: build the sealed manifest of a Confidential task\n"
        f"chain id: {chain_id}\n"
        f"market: {market.lower()}\n"
        f"task: {task_id}\n"
        f"version: {version}\n"
        f"expires: {expires}"
    )


@dataclass(frozen=True)
class BuildAuthorisation:
    """The request body: the version the build installs, the expiry, the signature (0x, 65 bytes)."""

    version: int
    expires: int
    signature: str

    def to_mapping(self) -> dict[str, object]:
        return {"version": self.version, "expires": self.expires, "signature": self.signature}


def sign_build(
    signer: Signer, chain_id: int, market: str, task_id: int, version: int, *, expires: int | None = None
) -> BuildAuthorisation:
    """Authorise one build with the sponsor's key (expiring in 5 minutes by default)."""
    expires = int(time.time()) + 300 if expires is None else expires
    text = build_message(chain_id, market, task_id, version, expires)
    signed = signer.account.sign_message(encode_defunct(text=text))
    return BuildAuthorisation(version, expires, "0x" + bytes(signed.signature).hex())


def recover_signer(
    auth: BuildAuthorisation, chain_id: int, market: str, task_id: int, *, now: float | None = None
) -> str:
    """The lowercase address that signed ``auth`` for this chain, market and task; BuildUnauthorised
    (401) when it is expired, expires too far ahead or is no valid signature."""
    now = time.time() if now is None else now
    if auth.expires <= now:
        raise BuildUnauthorised(
            f"the build authorisation expired at {auth.expires} (server time {int(now)}): sign again"
        )
    if auth.expires > now + MAX_AHEAD_S:
        raise BuildUnauthorised(
            f"the build authorisation expires at {auth.expires}, more than {MAX_AHEAD_S} s "
            f"after the server's time {int(now)}"
        )
    if not _SIGNATURE.match(auth.signature):
        raise BuildUnauthorised("signature: expected 0x and 65 bytes of hex (an EIP-191 personal_sign signature)")
    message = encode_defunct(text=build_message(chain_id, market, task_id, auth.version, auth.expires))
    try:
        return str(Account.recover_message(message, signature=bytes.fromhex(auth.signature[2:]))).lower()
    except Exception:  # eth-keys raises several types for an unrecoverable signature
        raise BuildUnauthorised("signature: not a valid secp256k1 signature of the build authorisation") from None
