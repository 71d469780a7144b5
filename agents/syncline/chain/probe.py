"""Start-up check that a deployment's addresses are Syncline's contracts on the chain asked.

An agent or a command given a wrong address otherwise fails later, and an agent retries for ever:
an address with no code answers every view with empty bytes (web3's generic
``BadFunctionCallOutput``), the court's address answers ``SynclineCourtDirectCall()``, another
contract answers garbage. :func:`check_market` probes the market with three ``eth_call``s and
raises a one-line :class:`~syncline.errors.ChainError` naming the address and what it is instead:

1. code is deployed at the market's address;
2. its ``COURT()`` (the market's immutable) names a contract with code, the deployment's court
   when the deployment names one;
3. the court refuses a direct call with ``SynclineCourtDirectCall()`` (the court's own guard) and the
   market answers ``taskCount()`` with one word: the two contracts are the market and its court.

A code-hash check against the compiled artifacts is not used: it would need the compiler (minutes on
a fresh clone) for every command, and the market's runtime code embeds its court's address.
"""

from __future__ import annotations

from typing import Any, cast

from eth_typing import ChecksumAddress
from web3 import Web3
from web3.types import TxParams

from syncline.chain.transactions import one_line
from syncline.errors import ChainError

COURT_SELECTOR = bytes(Web3.keccak(text="COURT()")[:4])
TASK_COUNT_SELECTOR = bytes(Web3.keccak(text="taskCount()")[:4])
COURT_DIRECT_CALL = bytes(Web3.keccak(text="SynclineCourtDirectCall()")[:4])
"""The revert selector of a call made to the court itself rather than through the market."""


def _call(w3: Web3, to: str, data: bytes) -> tuple[bytes | None, bytes | None, str]:
    """``eth_call`` of ``data`` at ``to``: (answer, revert data, error text); one of the first two is None."""
    try:
        return bytes(w3.eth.call(cast(TxParams, {"to": to, "data": "0x" + data.hex()}))), None, ""
    except Exception as exc:  # nodes and web3 versions raise several classes for a revert
        raw = getattr(exc, "data", None)
        if isinstance(raw, str) and raw.startswith("0x"):
            try:
                return None, bytes.fromhex(raw[2:]), one_line(str(exc), 120)
            except ValueError:
                pass
        if isinstance(raw, bytes):
            return None, raw, one_line(str(exc), 120)
        return None, b"", one_line(str(exc) or type(exc).__name__, 120)


def _word_address(answer: bytes | None) -> ChecksumAddress | None:
    if answer is None or len(answer) != 32 or any(answer[:12]):
        return None
    return Web3.to_checksum_address(answer[12:])


def check_market(w3: Web3, market: str, court: str | None = None, *, source: str = "the deployment") -> None:
    """Raise ``ChainError`` (one line) unless ``market`` is a Syncline market on ``w3``'s chain
    (and ``court``, if given, its court). ``source`` names where the addresses came from."""
    try:
        market = Web3.to_checksum_address(market)
    except (ValueError, TypeError):
        raise ChainError(f"{source}: market address {market!r} is not an address") from None
    chain = _chain_id(w3)
    if not bytes(w3.eth.get_code(market)):
        raise ChainError(
            f"{source}: no contract at market address {market} on chain {chain} "
            "(a wrong address, or the deployment file of another chain or of a devnet since restarted)"
        )
    answer, reverted, _ = _call(w3, market, COURT_SELECTOR)
    if reverted is not None and reverted[:4] == COURT_DIRECT_CALL:
        raise ChainError(
            f"{source}: {market} is the SynclineCourt, not the SynclineMarket: give the market's address "
            "(`market` in deployment.json)"
        )
    named_court = _word_address(answer)
    if named_court is None or not bytes(w3.eth.get_code(named_court)):
        raise ChainError(f"{source}: {market} on chain {chain} is not a Syncline market (it has no COURT())")
    if court is not None and Web3.to_checksum_address(court) != named_court:
        raise ChainError(f"{source}: the market {market} uses the court {named_court}, not {court}")
    _, guard, _ = _call(w3, named_court, TASK_COUNT_SELECTOR)
    count, _, why = _call(w3, market, TASK_COUNT_SELECTOR)
    if guard is None or guard[:4] != COURT_DIRECT_CALL or count is None or len(count) != 32:
        raise ChainError(
            f"{source}: {market} on chain {chain} is not a Syncline market (its court {named_court} does not "
            f"guard direct calls, or taskCount() failed{': ' + why if why else ''})"
        )


def _chain_id(w3: Web3) -> Any:
    try:
        return int(w3.eth.chain_id)
    except Exception:
        return "?"
