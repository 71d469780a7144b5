"""Keccak-256 (Ethereum's ``keccak256``, not NIST SHA3-256) for the protocol's hot paths.

Every commitment hashes 16 bytes per parameter of state plus each payload's bytes, and a
Merkle tree makes two small hashes per chunk, so both the throughput and the per-call cost of
the hash set the speed of a round (issue 12). ``safe-pysha3``'s C implementation hashes about
1.5x faster than ``eth_utils.keccak`` on 4 KiB and costs about a tenth per call on 64-byte
messages; the bytes out are the same (``tests/protocol/test_hashing.py`` checks it against
``eth_utils``).

:class:`Keccak256` hashes incrementally, for bodies streamed from the network or from disk.
"""

from __future__ import annotations

from typing import Any

import sha3  # type: ignore[import-untyped]

Keccak256: Any = sha3.keccak_256
"""Incremental hasher: ``h = Keccak256(); h.update(part); ...; h.digest()``."""


def keccak(data: bytes | bytearray | memoryview) -> bytes:
    """``keccak256(data)``: 32 bytes."""
    digest: bytes = sha3.keccak_256(data).digest()
    return digest
