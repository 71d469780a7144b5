"""Public randomness of a round: anyone recomputes it from on-chain data (for re-execution)."""

from __future__ import annotations

from syncline.protocol.hashing import keccak


def round_seed(task_id: int, round_: int, fragment: int) -> int:
    """Seed of a fragment's batch order in a round: the low 63 bits of the first 8 bytes of
    ``keccak256(uint256(task_id) ‖ uint256(round) ‖ uint256(fragment))`` (big-endian)."""
    data = task_id.to_bytes(32, "big") + round_.to_bytes(32, "big") + fragment.to_bytes(32, "big")
    return int.from_bytes(keccak(data)[:8], "big") & ((1 << 63) - 1)
