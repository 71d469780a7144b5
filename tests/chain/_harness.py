"""Deploy a test harness contract (outside contracts/src) on the session anvil."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from web3 import Web3
from web3.contract import Contract

from syncline.chain.deployment import deploy_contract
from syncline.chain.keys import Signer
from syncline.chain.toolchain import compile_harness


def deploy_harness(
    w3: Web3, deployer: Signer, source: str, contract: str, extra_sources: Sequence[Path] = ()
) -> Contract:
    artifact = compile_harness(source, contract, extra_sources)
    address, _ = deploy_contract(w3, deployer, artifact)
    return w3.eth.contract(address=Web3.to_checksum_address(address), abi=artifact.abi)
