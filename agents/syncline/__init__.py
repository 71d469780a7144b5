"""Syncline: a permissionless market for verifiable decentralized training.

Packages
--------
protocol
    Pure protocol logic (task specs, receipts, tier policy). No I/O.
chain
    The edge to an EVM chain: compiling and deploying the contracts, a local anvil devnet,
    keys, and a typed client for the market contract.
demo
    The main job run by ``make demo``.
"""

__version__ = "0.1.0"
