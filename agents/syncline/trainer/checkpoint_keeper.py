"""A trainer's inner checkpoints, kept on its own disk and published only when asked.

Issue 11, item 3 (work in progress on this branch): every checkpoint is bound by the committed
``checkpointRoot`` (its hash is a leaf), so the trainer need not upload it with the commitment.
It keeps them for the rounds a claim can still name and publishes exactly the checkpoints a
segment's re-execution needs when a spot-check request or an on-chain claim names the segment.

What a segment needs (``S`` training segments, ``c_0 .. c_S``):

* a training segment ``s < S``: ``c_s`` (the start) and ``c_{s+1}`` (the claimed end);
* the derivation segment ``S``: ``c_S`` (the payload derives from it and the round's start state).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from syncline.blobstore import BlobStore
from syncline.blobstore.store import digest_of
from syncline.protocol.checkpoints import CheckpointError

_KEPT = re.compile(r"^(\d+)-(\d+)-(0x[0-9a-f]{64})\.ckpt$")


def segment_checkpoints(segment: int, segments: int) -> tuple[int, ...]:
    """Indices of the checkpoints re-executing ``segment`` needs (``segments`` = S)."""
    if isinstance(segment, bool) or not 0 <= segment <= segments:
        raise CheckpointError(f"segment {segment!r} is outside 0..{segments}")
    return (segment,) if segment == segments else (segment, segment + 1)


@dataclass
class CheckpointKeeper:
    """Checkpoints of this trainer's own submissions, by round and index, in ``directory``."""

    directory: Path

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)

    def keep(self, round_: int, checkpoints: Sequence[bytes]) -> tuple[str, ...]:
        """Store a round's checkpoints ``c_0 .. c_S``; returns their digests (the manifest's hashes)."""
        digests = []
        for index, data in enumerate(checkpoints):
            digest = digest_of(data)
            path = self.directory / f"{round_}-{index}-{digest}.ckpt"
            if not path.exists():
                tmp = path.with_name(path.name + ".tmp")
                with tmp.open("wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, path)
            digests.append(digest)
        return tuple(digests)

    def get(self, round_: int, index: int) -> bytes | None:
        """Checkpoint ``index`` of ``round_`` (verified against its digest), or None."""
        for path in self.directory.glob(f"{round_}-{index}-0x*.ckpt"):
            match = _KEPT.match(path.name)
            data = path.read_bytes()
            if match and digest_of(data) == match.group(3):
                return data
        return None

    def publish_segment(self, blobs: BlobStore, round_: int, segment: int, segments: int) -> bool:
        """Upload the checkpoints ``segment`` needs; False when one is no longer kept (raises
        BlobUnavailable when the store cannot take them now: the caller retries)."""
        needed = [self.get(round_, i) for i in segment_checkpoints(segment, segments)]
        if any(data is None for data in needed):
            return False
        for data in needed:
            assert data is not None
            blobs.put(data)
        return True

    def prune(self, before_round: int) -> None:
        """Forget the checkpoints of rounds before ``before_round`` (no claim can name them now)."""
        for path in self.directory.iterdir():
            match = _KEPT.match(path.name)
            if match and int(match.group(1)) < before_round:
                path.unlink(missing_ok=True)
