"""A contract call built ahead of sending: what the off-chain court hands to whoever signs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ContractCall:
    """One transaction, ready to sign: ``calldata`` to ``target`` with ``value`` wei.

    ``function`` and ``args`` are what ``calldata`` encodes (kept for logs and error decoding)."""

    target: str
    function: str
    args: tuple[Any, ...]
    calldata: bytes
    value: int
