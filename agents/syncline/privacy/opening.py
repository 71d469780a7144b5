"""A dispute's noise opening on the wire (docs/protocol.md §12.10, docs/privacy.md).

When the committee's public spot-check draw, or a training claim on chain, names training segment
``s`` of a DP submission, its trainer publishes the opening ``(b, g_s)`` with the round's seed
hashes as a blob, in its own signed slot of :func:`opening_alias`. The alias is a hint: a reader
keeps a candidate only if it opens the noise commitment the submission's ``checkpointRoot`` binds
(the checkpoint manifest's ``noise``), so the bytes are evidence and the slot is not.

Encoding (all integers big-endian)::

    magic     8 bytes   b"SYNCDPO1"
    segment   uint32    s
    b         32 bytes  the round's batch key
    g_s       32 bytes  segment s's noise seed
    count     uint32    S + 1 (the number of hashes)
    hashes    count x 32 bytes: keccak256(b), keccak256(g_0), ..., keccak256(g_{S-1})

Exactly ``80 + 32 * count`` bytes; anything else is refused with one line naming the field.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from syncline.privacy.noise import NoiseSeedError, Revealed, RoundNoise, SegmentNoise, open_reveal
from syncline.protocol.checkpoints import MAX_SEGMENTS

MAGIC = b"SYNCDPO1"
_FIXED = 8 + 4 + 32 + 32 + 4
MAX_OPENING_BYTES = _FIXED + 32 * (MAX_SEGMENTS + 1)


@dataclass(frozen=True)
class Opening:
    """A parsed (not yet verified) opening of one segment."""

    revealed: Revealed
    hashes: tuple[bytes, ...]

    def verify(self, commitment: bytes) -> Revealed:
        """The revealed seeds if they open ``commitment``; NoiseSeedError (one line) otherwise."""
        return open_reveal(commitment, self.hashes, self.revealed)


def check_frame(
    data: object, *, what: str, magic: bytes, header: int, limit: int, error: type[NoiseSeedError] = NoiseSeedError
) -> bytes:
    """``data`` as bytes once its type, its size (at most ``limit``, at least its ``header``) and
    its ``magic`` are checked, before anything is parsed; ``error`` (one line naming ``what``)
    otherwise."""
    if not isinstance(data, bytes | bytearray):
        raise error(f"{what} must be bytes, got {type(data).__name__}")
    if len(data) > limit:
        raise error(f"{what} is {len(data)} bytes, more than the limit {limit}")
    if len(data) < header:
        raise error(f"{what} is {len(data)} bytes, shorter than its {header}-byte header")
    data = bytes(data)
    if data[: len(magic)] != magic:
        raise error(f"{what} magic {data[: len(magic)]!r} != {magic!r}")
    return data


def opening_alias(task_id: int, round_: int, fragment: int, segment: int) -> str:
    """Blob-store alias of the opening of one segment (candidates are hints, the trainer's slot first)."""
    return f"dp-opening:{task_id}:{round_}:{fragment}:{segment}"


def encode_opening(noise: RoundNoise, segment: int) -> bytes:
    """The opening of ``segment`` of a round, as the trainer publishes it."""
    revealed = noise.reveal(segment)
    hashes = noise.hashes()
    return b"".join(
        (
            MAGIC,
            struct.pack(">I", segment),
            revealed.batch_key,
            revealed.segment.seed,
            struct.pack(">I", len(hashes)),
            *hashes,
        )
    )


def parse_opening(data: bytes, *, interval: int, segments: int) -> Opening:
    """Strictly decode an opening for a task of ``segments`` training segments of ``interval``
    steps; NoiseSeedError (one line naming the field) on anything malformed."""
    data = check_frame(data, what="noise opening", magic=MAGIC, header=_FIXED, limit=MAX_OPENING_BYTES)
    (segment,) = struct.unpack(">I", data[8:12])
    (count,) = struct.unpack(">I", data[76:80])
    if count != segments + 1:
        raise NoiseSeedError(f"noise opening count {count}: the task has {segments} segments, so {segments + 1} hashes")
    if len(data) != _FIXED + 32 * count:
        raise NoiseSeedError(f"noise opening is {len(data)} bytes, its count {count} needs {_FIXED + 32 * count}")
    if segment >= segments:
        raise NoiseSeedError(f"noise opening segment {segment} is outside 0..{segments - 1}")
    hashes = tuple(data[_FIXED + 32 * i : _FIXED + 32 * (i + 1)] for i in range(count))
    revealed = Revealed(batch_key=data[12:44], segment=SegmentNoise(segment, interval, data[44:76]))
    return Opening(revealed, hashes)
