"""The agents' JSON-RPC connection to the node."""

from __future__ import annotations

from web3 import Web3
from web3.types import RPCEndpoint


def http_web3(url: str, *, timeout_s: float = 60.0) -> Web3:
    """A ``Web3`` over HTTP that asks the node for its chain id once.

    web3's validation middleware looks up the chain id before every ``eth_call`` and gas estimate,
    which was half of an agent's round trips to the node; a node's chain id never changes."""
    return Web3(
        Web3.HTTPProvider(
            url,
            request_kwargs={"timeout": timeout_s},
            cache_allowed_requests=True,
            cacheable_requests={RPCEndpoint("eth_chainId")},
        )
    )
