"""Sending signed transactions and turning contract reverts into one-line errors."""

from __future__ import annotations

import threading
from typing import Any, cast

from eth_abi import decode as abi_decode
from web3 import Web3
from web3.contract.contract import ContractFunction
from web3.exceptions import ContractCustomError, ContractLogicError, TimeExhausted, Web3RPCError
from web3.types import TxParams, TxReceipt, Wei

from syncline.chain.keys import Signer
from syncline.errors import ChainError
from syncline.protocol import enums as protocol_enums

# What to do about the errors a user meets most, keyed by custom error name.
HINTS: dict[str, str] = {
    "SynclineWrongStake": "send exactly the task's trainerStake",
    "SynclineSubmissionLate": (
        "commit before the round's commit deadline (`commitDeadline`: extended once when nobody committed);"
        " work after it is rejected, not slashed"
    ),
    "SynclineNothingToVote": "nobody committed to this round: carry it forward (no vote, no fee)",
    "SynclineRoundStillOpen": (
        "wait until the round deadline has passed, or every active trainer has committed, before finalizing"
    ),
    "SynclineGraceWindowOpen": "carry forward only after deadline + grace window (empty: its extended deadline)",
    "SynclineChallengeWindowOpen": "seal after the last round's challenge window",
    "SynclineNothingToWithdraw": "nothing is owed to this account yet",
    "SynclineUnknownTask": "check the task id (`syncline train list-runs`)",
    "SynclineX25519KeyInvalid": (
        "use a key from X25519PrivateKey.generate(): 32 bytes, little-endian u below 2^255 - 19, "
        "not a small-order point"
    ),
    "ConflictingFinalize": "this witness computed a different result than the finalized one: fork detected",
}


GAS_HEADROOM_DIVISOR = 5  # 20 % over the estimate
GAS_HEADROOM_CONSTANT = 20_000


def gas_with_headroom(estimate: int, block_gas_limit: int, min_gas: int = 0) -> int:
    """The gas limit to send with a transaction estimated at ``estimate``: 20 % + 20,000 over the
    estimate (state may change between estimate and inclusion; an exact limit fails on the first
    extra storage write), at least ``min_gas``, and never above the block gas limit (a node
    rejects a transaction that could not fit in a block). Unused gas is not charged."""
    wanted = max(estimate + estimate // GAS_HEADROOM_DIVISOR + GAS_HEADROOM_CONSTANT, min_gas)
    return min(wanted, block_gas_limit) if block_gas_limit > 0 else wanted


class ErrorDecoder:
    """Maps revert data (selector + ABI-encoded args) to ``Name(arg=value, ...)``."""

    def __init__(self, abi: list[dict[str, Any]]):
        self._errors: dict[bytes, tuple[str, list[str], list[str], list[str]]] = {}
        for item in abi:
            if item.get("type") != "error":
                continue
            types = [_abi_type(i) for i in item["inputs"]]
            signature = f"{item['name']}({','.join(types)})"
            selector = Web3.keccak(text=signature)[:4]
            self._errors[bytes(selector)] = (
                item["name"],
                types,
                [i["name"] for i in item["inputs"]],
                [i.get("internalType", "") for i in item["inputs"]],
            )

    def decode(self, data: str | bytes | None) -> tuple[str, dict[str, object]] | None:
        if data is None:
            return None
        raw = bytes.fromhex(data[2:] if data.startswith("0x") else data) if isinstance(data, str) else bytes(data)
        entry = self._errors.get(raw[:4])
        if entry is None:
            return None
        name, types, names, internal = entry
        values = abi_decode(types, raw[4:])
        return name, {n: _plain(v, t) for n, v, t in zip(names, values, internal, strict=True)}

    def message(self, data: str | bytes | None) -> ChainError | None:
        decoded = self.decode(data)
        if decoded is None:
            return None
        name, args = decoded
        rendered = ", ".join(f"{k}={v}" for k, v in args.items())
        hint = HINTS.get(name)
        text = f"{name}({rendered})" + (f": {hint}" if hint else "")
        return ChainError(text, error_name=name, args=args)


def _abi_type(inp: dict[str, Any]) -> str:
    if inp["type"].startswith("tuple"):
        inner = ",".join(_abi_type(c) for c in inp["components"])
        return f"({inner}){inp['type'][5:]}"
    return str(inp["type"])


def _plain(value: object, internal_type: str = "") -> object:
    """Hex for bytes, enum member names (lower case) for Solidity enums, the value otherwise."""
    if isinstance(value, bytes):
        return "0x" + value.hex()
    if internal_type == "address" and isinstance(value, str):
        return Web3.to_checksum_address(value)
    if internal_type.startswith("enum ") and isinstance(value, int):
        enum_cls = getattr(protocol_enums, internal_type.split(".")[-1].split()[-1], None)
        if enum_cls is not None:
            try:
                return enum_cls(value).name.lower()
            except ValueError:
                return value
    return value


class TransactionSender:
    """Signs and sends contract calls; serializes nonces per sender within the process."""

    def __init__(self, w3: Web3, decoder: ErrorDecoder, *, receipt_timeout_s: float = 120.0):
        self.w3 = w3
        self.decoder = decoder
        self.receipt_timeout_s = receipt_timeout_s
        self._lock = threading.Lock()
        self._chain_id: int | None = None
        self._block_gas_limit: int | None = None

    @property
    def block_gas_limit(self) -> int:
        """The latest block's gas limit when first needed (it moves slowly, if at all)."""
        if self._block_gas_limit is None:
            self._block_gas_limit = int(self.w3.eth.get_block("latest")["gasLimit"])
        return self._block_gas_limit

    @property
    def chain_id(self) -> int:
        if self._chain_id is None:
            self._chain_id = int(self.w3.eth.chain_id)
        return self._chain_id

    def send(self, signer: Signer, fn: ContractFunction, *, value: int = 0, min_gas: int = 0) -> TxReceipt:
        """Estimate, sign, send and wait. A revert raises ``ChainError`` naming the custom error.

        ``min_gas`` is a floor for calls whose cost depends on who lands first: the vote that
        completes a quorum (or a referee verdict) does far more work than the one estimated a
        block earlier, and would otherwise run out of gas in the race. Unused gas is not charged.
        """
        with self._lock:
            try:
                sender = Web3.to_checksum_address(signer.address)
                params: TxParams = {
                    "from": sender,
                    "value": Wei(value),
                    "nonce": self.w3.eth.get_transaction_count(sender, "pending"),
                    "chainId": self.chain_id,
                }
                # Estimate against the block the transaction will land in, not the latest mined one:
                # a deadline may have passed since the last block (devnets mine on demand).
                estimate = fn.estimate_gas(params, block_identifier="pending")
                params["gas"] = gas_with_headroom(estimate, self.block_gas_limit, min_gas)
                tx = fn.build_transaction(params)
            except (ContractCustomError, ContractLogicError) as exc:
                raise self._decode(exc, fn) from None
            except Web3RPCError as exc:  # the node refused the estimate: invalid opcode, no funds...
                raise ChainError(f"{fn.fn_name} failed: {one_line(str(exc))}") from None
            signed = signer.account.sign_transaction(cast(Any, tx))
            tx_hash = self.w3.eth.send_raw_transaction(signed.raw_transaction)
        try:
            receipt = self.w3.eth.wait_for_transaction_receipt(tx_hash, timeout=self.receipt_timeout_s)
        except TimeExhausted as exc:
            raise ChainError(
                f"{fn.fn_name}: no receipt for 0x{bytes(tx_hash).hex()} after {self.receipt_timeout_s:.0f}s"
            ) from exc
        if receipt["status"] != 1:
            raise self._replay_failure(signer, fn, value, receipt)
        return receipt

    def _replay_failure(self, signer: Signer, fn: ContractFunction, value: int, receipt: TxReceipt) -> ChainError:
        """Re-run a transaction that reverted on chain at its block to name the custom error."""
        tx_hash = "0x" + bytes(receipt["transactionHash"]).hex()
        try:
            fn.call({"from": signer.address, "value": Wei(value)}, block_identifier=receipt["blockNumber"])
        except (ContractCustomError, ContractLogicError) as exc:
            err = self._decode(exc, fn)
            return ChainError(f"{err} (transaction {tx_hash})", error_name=err.error_name, args=err.error_args)
        return ChainError(f"{fn.fn_name}: transaction {tx_hash} reverted on chain")

    def _decode(self, exc: ContractLogicError, fn: ContractFunction) -> ChainError:
        data = getattr(exc, "data", None)
        if isinstance(data, dict):
            data = data.get("data")
        err = self.decoder.message(data if isinstance(data, str | bytes) else None)
        if err is not None:
            return ChainError(f"{fn.fn_name} reverted: {err}", error_name=err.error_name, args=err.error_args)
        return ChainError(f"{fn.fn_name} reverted: {one_line(str(exc))}")


def one_line(text: str, limit: int = 240) -> str:
    """``text`` on one line (whitespace runs collapsed), at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
