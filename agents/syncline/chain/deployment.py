"""Deploying the market and the deployment file agents read (addresses, chain id, ABI path).

The market is two contracts: ``SynclineCourt`` (the fraud-proof module, deployed first) and
``SynclineMarket(court)``, whose fallback delegates the court's functions to it (the court creates
its ``SynclineRulings`` and ``SynclineConfidential`` modules itself). Clients talk to the market's
address only, with one ABI: the market's merged with the court's, the confidential module's and
the devnet attestation verifier's errors.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

from web3 import Web3
from web3.types import TxParams

from syncline.chain.keys import Signer
from syncline.chain.toolchain import Artifact, compile_contracts
from syncline.chain.transactions import gas_with_headroom, one_line
from syncline.errors import ChainError, SynclineError


@dataclass(frozen=True)
class Deployment:
    """Where the Syncline contracts live on one chain."""

    chain_id: int
    rpc_url: str
    market: str
    court: str
    deployed_at_block: int
    abi_path: str
    deployer: str

    def abi(self) -> list[dict[str, Any]]:
        data: list[dict[str, Any]] = json.loads(Path(self.abi_path).read_text())
        return data

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")
        return path

    @classmethod
    def read(cls, path: Path) -> Deployment:
        try:
            data = json.loads(Path(path).read_text())
            return cls(**data)
        except FileNotFoundError:
            raise SynclineError(
                f"no deployment file at {path}: run `syncline devnet up` or `syncline deploy`"
            ) from None
        except (ValueError, TypeError) as exc:
            raise SynclineError(f"deployment file {path} is malformed: {exc}") from None


def merged_abi(market_abi: list[dict[str, Any]], court_abi: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The market's ABI plus every court entry it lacks (identical entries once).

    The court's constructor, fallback and receive entries are dropped: calls go to the market. An
    entry the two ABIs declare differently (same kind, name and inputs) is an error, since a
    client could not know which one the market runs.
    """

    def key(item: dict[str, Any]) -> tuple[str, str, str]:
        inputs = ",".join(
            str(i.get("type")) + json.dumps(i.get("components"), sort_keys=True) for i in item.get("inputs", [])
        )
        return str(item.get("type")), str(item.get("name", "")), inputs

    out = list(market_abi)
    seen = {key(item): json.dumps(item, sort_keys=True) for item in market_abi}
    for item in court_abi:
        if item.get("type") in ("constructor", "fallback", "receive"):
            continue
        k, text = key(item), json.dumps(item, sort_keys=True)
        if k in seen:
            if seen[k] != text:
                raise ChainError(f"the market and court ABIs declare {k[0]} {k[1]}({k[2]}) differently")
            continue
        seen[k] = text
        out.append(item)
    return out


def client_abi(artifacts: dict[str, Any]) -> list[dict[str, Any]]:
    """The ABI a client uses at the market's address: the market's, the modules it forwards to
    (``SynclinePosting``: ``postTask``; the court, and through it ``SynclineConfidential``, whose
    verifier call bubbles the verifier's errors up) merged by :func:`merged_abi`."""
    verifier_errors = [e for e in artifacts["DevnetAttestationVerifier"].abi if e["type"] == "error"]
    modules = ("SynclinePosting", "SynclineCourt", "SynclineConfidential")
    return merged_abi(
        artifacts["SynclineMarket"].abi, [e for name in modules for e in artifacts[name].abi] + verifier_errors
    )


# Creation code that needs the Cancun opcodes the contracts are compiled for (evm_version cancun):
#   TLOAD(0) POP; BLOBBASEFEE POP; MSTORE(0, 1); MCOPY(dst 0x20, src 0, len 0x20); RETURN mem[0x20:0x40]
# A Cancun EVM returns the word 1; an older one fails on the first unknown opcode (TLOAD).
CANCUN_PROBE = "0x" + "60005c50" + "4a50" + "6001600052" + "6020600060205e" + "60206020f3"
CANCUN_PROBE_RESULT = "0x" + "00" * 31 + "01"


def check_cancun(w3: Web3) -> None:
    """Raise ``ChainError`` (one line) unless the chain runs the Cancun opcodes the contracts use
    (MCOPY, TLOAD/TSTORE, BLOBBASEFEE), probed with an ``eth_call`` of a tiny creation code."""
    try:
        result = w3.eth.call(cast(TxParams, {"data": CANCUN_PROBE}))
        answer = "0x" + bytes(result).hex()
    except Exception as exc:  # the node's error for an invalid opcode varies: all of them mean "no"
        answer = one_line(str(exc) or type(exc).__name__, 160)
    if answer != CANCUN_PROBE_RESULT:
        raise ChainError(
            "the target chain does not run the Cancun EVM (MCOPY/TLOAD/BLOBBASEFEE probe: "
            f"{answer}); Syncline's contracts need a Cancun-enabled EVM chain"
        )


def deploy_market(w3: Web3, deployer: Signer, rpc_url: str, out_dir: Path) -> Deployment:
    """Check the chain runs Cancun, compile (cached), deploy ``SynclineCourt`` then
    ``SynclineMarket(court)``, and write ``deployment.json`` + the merged client ABI to ``out_dir``."""
    check_cancun(w3)
    artifacts = compile_contracts()
    market, court = artifacts["SynclineMarket"], artifacts["SynclineCourt"]
    abi = client_abi(artifacts)
    court_address, _ = deploy_contract(w3, deployer, court)
    address, block = deploy_contract(w3, deployer, market, court_address)
    out_dir.mkdir(parents=True, exist_ok=True)
    abi_path = out_dir / "SynclineMarket.abi.json"
    abi_path.write_text(json.dumps(abi, indent=1))
    deployment = Deployment(
        chain_id=int(w3.eth.chain_id),
        rpc_url=rpc_url,
        market=address,
        court=court_address,
        deployed_at_block=block,
        abi_path=str(abi_path.resolve()),
        deployer=deployer.address,
    )
    deployment.write(out_dir / "deployment.json")
    return deployment


def deploy_contract(w3: Web3, deployer: Signer, artifact: Artifact, *constructor_args: Any) -> tuple[str, int]:
    """Deploy a compiled contract with ``constructor_args``; returns (address, block number)."""
    contract = w3.eth.contract(abi=artifact.abi, bytecode=artifact.bytecode)
    sender = Web3.to_checksum_address(deployer.address)
    params: TxParams = {
        "from": sender,
        "nonce": w3.eth.get_transaction_count(sender, "pending"),
        "chainId": int(w3.eth.chain_id),
    }
    constructor = contract.constructor(*constructor_args)
    estimate = int(constructor.estimate_gas(params))
    params["gas"] = gas_with_headroom(estimate, int(w3.eth.get_block("latest")["gasLimit"]))
    tx = constructor.build_transaction(params)
    signed = deployer.account.sign_transaction(cast(Any, tx))
    receipt = w3.eth.wait_for_transaction_receipt(w3.eth.send_raw_transaction(signed.raw_transaction), timeout=120)
    if receipt["status"] != 1 or receipt["contractAddress"] is None:
        raise ChainError(f"deploying {artifact.name} failed (receipt status {receipt['status']})")
    return str(receipt["contractAddress"]), int(receipt["blockNumber"])
