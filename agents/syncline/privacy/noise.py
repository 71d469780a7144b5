"""Secret but reproducible DP noise (docs/privacy.md, "The noise seed").

A DP trainer holds one 32-byte secret (``noise-secret`` in its state directory, never sent).
From it, per (task, round, fragment), it derives the round's noise seed
``r = keccak256("syncline.dp.round" ‖ secret ‖ uint256 task ‖ uint256 round ‖ uint256 fragment)``,
and from ``r``:

* the batch key ``b = keccak256("syncline.dp.batches" ‖ r)`` and the batch seed (which examples
  each step samples; it must be secret for the accountant's subsampling to hold): the low 63 bits
  of the first 8 bytes of ``b``;
* one seed per checkpoint segment ``s``: ``g_s = keccak256("syncline.dp.segment" ‖ r ‖ uint32 s)``;
* the seed of the noise generator at inner step ``t`` (in segment ``s = t // interval``): the low
  63 bits of the first 8 bytes of ``keccak256("syncline.dp.step" ‖ g_s ‖ uint32 t)``.

The trainer's noise commitment for the round is
``keccak256(keccak256(b) ‖ keccak256(g_0) ‖ ... ‖ keccak256(g_{S-1}))`` over the hashes it
publishes with it. To let referees replay segment ``s`` it reveals ``(b, g_s)``: each opens its
hash, the hashes open the commitment, and no other segment's noise is revealed (the batch order of
the whole round is).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from syncline.errors import SynclineError
from syncline.protocol.hashing import keccak

SECRET_BYTES = 32
_MASK63 = (1 << 63) - 1


class NoiseSeedError(SynclineError):
    """A noise seed that is missing, malformed, or does not open the trainer's commitment."""


def _u256(value: int) -> bytes:
    return value.to_bytes(32, "big")


def _u32(value: int) -> bytes:
    return value.to_bytes(4, "big")


def _seed63(digest: bytes) -> int:
    return int.from_bytes(digest[:8], "big") & _MASK63


def load_or_create_secret(path: Path) -> bytes:
    """The trainer's noise secret at ``path``, created (0600, from ``os.urandom``) on first use."""
    if path.exists():
        data = path.read_bytes()
        if len(data) != SECRET_BYTES:
            raise NoiseSeedError(f"noise secret {path}: expected {SECRET_BYTES} bytes, found {len(data)}")
        return data
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = os.urandom(SECRET_BYTES)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(secret)
    tmp.replace(path)
    return secret


@dataclass(frozen=True)
class SegmentNoise:
    """The noise of one checkpoint segment: what a trainer reveals to the referees of a dispute."""

    segment: int
    interval: int
    seed: bytes
    """``g_s`` (32 bytes)."""

    def step_seed(self, step: int) -> int:
        """Seed of the noise generator at inner step ``step`` (which must lie in this segment)."""
        if step // self.interval != self.segment:
            raise NoiseSeedError(f"step {step} is not in segment {self.segment} (interval {self.interval})")
        return _seed63(keccak(b"syncline.dp.step" + self.seed + _u32(step)))

    @property
    def seed_hash(self) -> bytes:
        return keccak(self.seed)


@dataclass(frozen=True)
class RoundNoise:
    """Every noise seed of one round of one trainer (known to the trainer alone)."""

    seed: bytes
    """``r`` (32 bytes)."""
    interval: int
    segments: int

    @classmethod
    def derive(
        cls, secret: bytes, *, task_id: int, round_: int, fragment: int, interval: int, inner_steps: int
    ) -> RoundNoise:
        if len(secret) != SECRET_BYTES:
            raise NoiseSeedError(f"noise secret: expected {SECRET_BYTES} bytes, got {len(secret)}")
        if interval <= 0 or inner_steps <= 0:
            raise NoiseSeedError(f"noise seeds need positive interval and inner steps, got {interval}, {inner_steps}")
        r = keccak(b"syncline.dp.round" + secret + _u256(task_id) + _u256(round_) + _u256(fragment))
        return cls(seed=r, interval=interval, segments=-(-inner_steps // interval))

    @property
    def batch_key(self) -> bytes:
        """``b``: revealed with a segment seed so that referees draw the trainer's batches."""
        return keccak(b"syncline.dp.batches" + self.seed)

    @property
    def batch_seed(self) -> int:
        """Seed of the round's batch order (secret: the accountant assumes secret sampling)."""
        return batch_seed_of(self.batch_key)

    def segment(self, s: int) -> SegmentNoise:
        if not 0 <= s < self.segments:
            raise NoiseSeedError(f"segment {s} is outside 0..{self.segments - 1}")
        return SegmentNoise(s, self.interval, keccak(b"syncline.dp.segment" + self.seed + _u32(s)))

    def step_seed(self, step: int) -> int:
        return self.segment(step // self.interval).step_seed(step)

    def hashes(self) -> tuple[bytes, ...]:
        """``keccak256(b)``, then ``keccak256(g_s)`` of every segment: published with the commitment."""
        return (keccak(self.batch_key), *(self.segment(s).seed_hash for s in range(self.segments)))

    def commitment(self) -> bytes:
        """``keccak256`` over :meth:`hashes`."""
        return commitment_of(self.hashes())

    def reveal(self, s: int) -> Revealed:
        """What the trainer shows the referees of a dispute over segment ``s``."""
        return Revealed(batch_key=self.batch_key, segment=self.segment(s))


def batch_seed_of(batch_key: bytes) -> int:
    return _seed63(batch_key)


@dataclass(frozen=True)
class Revealed:
    """A dispute's opening: the round's batch key and one segment's noise seed."""

    batch_key: bytes
    segment: SegmentNoise

    @property
    def batch_seed(self) -> int:
        return batch_seed_of(self.batch_key)


def commitment_of(hashes: tuple[bytes, ...]) -> bytes:
    if len(hashes) < 2 or any(len(h) != 32 for h in hashes):
        raise NoiseSeedError("noise commitment: need the batch key's hash and one 32-byte hash per segment")
    return keccak(b"".join(hashes))


def open_reveal(commitment: bytes, hashes: tuple[bytes, ...], revealed: Revealed) -> Revealed:
    """Check a dispute's opening against the trainer's commitment; return it (NoiseSeedError
    naming what does not match otherwise)."""
    if commitment_of(hashes) != commitment:
        raise NoiseSeedError("noise commitment: the published hashes do not open the committed value")
    s = revealed.segment.segment
    if not 0 <= s < len(hashes) - 1:
        raise NoiseSeedError(f"noise seed: segment {s} is outside 0..{len(hashes) - 2}")
    if keccak(revealed.batch_key) != hashes[0]:
        raise NoiseSeedError("noise seed: the revealed batch key is not the committed one")
    if revealed.segment.seed_hash != hashes[1 + s]:
        raise NoiseSeedError(f"noise seed: the revealed seed of segment {s} is not the committed one")
    return revealed
