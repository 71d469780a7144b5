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

from __future__ import annotations

import sys

import py_ecc  # noqa: F401  (imported here, once, so that its side effect below can be undone)

__version__ = "0.1.0"

RECURSION_LIMIT = 4_000
"""The interpreter's recursion limit in every Syncline process.

``py_ecc`` (imported through web3 and eth-account) raises it to 100,000 when first imported, which
lets a deeply nested JSON value from a peer overflow the C stack (SIGSEGV) instead of raising
``RecursionError``. Importing ``py_ecc`` first and lowering the limit here makes every entry point
(agents, API, CLI, tests) run with a bound the C stack can hold; network JSON is additionally
bounded before parsing (:mod:`syncline.protocol.wire`).
"""

if sys.getrecursionlimit() > RECURSION_LIMIT:
    sys.setrecursionlimit(RECURSION_LIMIT)
