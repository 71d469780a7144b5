"""A contract call built ahead of sending: what the off-chain court hands to whoever signs."""

from __future__ import annotations

from dataclasses import dataclass

ZERO_ADDRESS = "0x" + "00" * 20
"""The zero address: an empty submission slot, or no single accused (a quorum's fault)."""


@dataclass(frozen=True)
class ContractCall:
    """One transaction, ready to sign: ``calldata`` to ``target`` with ``value`` wei.

    ``function`` names what ``calldata`` calls (for logs and the web UI)."""

    target: str
    function: str
    calldata: bytes
    value: int
