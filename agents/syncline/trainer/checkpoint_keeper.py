"""A trainer's inner checkpoints, kept on its own disk and published only when asked.

In an on-demand task (``verification.checkpoints: on-demand``) every checkpoint is bound by the
committed ``checkpointRoot`` (its hash is a leaf), so the trainer need not upload it with the
commitment. It keeps them for the rounds a claim can still name and publishes exactly the
checkpoints a segment's re-execution needs
(:func:`~syncline.protocol.spot_checks.checkpoints_for_segment`) when the committee's draw or an
on-chain claim names the segment.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from syncline.blobstore.store import BlobRef, HashingSink, Putter, digest_of
from syncline.protocol.checkpoints import Checkpoint
from syncline.protocol.spot_checks import checkpoints_for_segment
from syncline.run.local_store import sync_files

_KEPT = re.compile(r"^(\d+)-(\d+)-(0x[0-9a-f]{64})\.ckpt$")


@runtime_checkable
class FilePutter(Protocol):
    """A store (the trainer's outbox) that uploads a file streamed."""

    def put_file(self, path: Path) -> BlobRef: ...


@dataclass
class CheckpointKeeper:
    """Checkpoints of this trainer's own submissions, by round and index, in ``directory``."""

    directory: Path

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)

    def keep(self, round_: int, checkpoints: Sequence[bytes], *, durable: bool = True) -> tuple[str, ...]:
        """Store a round's checkpoints ``c_0 .. c_S`` given as bytes; returns their digests (the
        manifest's hashes). :meth:`keep_stream` of each."""
        return tuple(
            self.keep_stream(round_, index, functools.partial(_write_bytes, data), durable=durable)
            for index, data in enumerate(checkpoints)
        )

    def keep_checkpoint(self, round_: int, index: int, checkpoint: Checkpoint, *, durable: bool = True) -> str:
        """:meth:`keep_stream` of a :class:`Checkpoint`."""
        return self.keep_stream(round_, index, checkpoint.write, durable=durable)

    def keep_stream(
        self, round_: int, index: int, write: Callable[[Callable[[bytes], object]], None], *, durable: bool = True
    ) -> str:
        """Store checkpoint ``index`` of ``round_``, whose canonical bytes ``write`` streams into
        the function it is given, hashing them on the way to disk (a large model's checkpoint is
        never one bytes object); returns its digest (its leaf in the manifest).

        It replaces any kept earlier for the same round and index (work trained ahead of a round
        that then opened from another state and was trained again): only the committed ones may be
        served. ``durable=False`` leaves flushing it to disk to :meth:`sync` (before it is
        committed to), so the flush can overlap other work."""
        tmp = self.directory / f".{round_}-{index}.ckpt.tmp"
        with tmp.open("wb") as fh:
            sink = HashingSink(fh)
            write(sink.write)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        digest = sink.digest()
        path = self.directory / f"{round_}-{index}-{digest}.ckpt"
        for other in self.directory.glob(f"{round_}-{index}-0x*.ckpt"):
            if other != path:
                other.unlink(missing_ok=True)
        os.replace(tmp, path)
        return digest

    def sync(self, round_: int, digests: Sequence[str]) -> None:
        """Flush a round's checkpoints kept with ``durable=False`` to disk."""
        sync_files([self.directory / f"{round_}-{index}-{digest}.ckpt" for index, digest in enumerate(digests)])

    def get(self, round_: int, index: int) -> bytes | None:
        """Checkpoint ``index`` of ``round_`` (verified against its digest), or None."""
        for path in self.directory.glob(f"{round_}-{index}-0x*.ckpt"):
            match = _KEPT.match(path.name)
            data = path.read_bytes()
            if match and digest_of(data) == match.group(3):
                return data
        return None

    def kept(self, round_: int, index: int) -> tuple[Path, str] | None:
        """The file of checkpoint ``index`` of ``round_`` and its digest (named by the digest its
        bytes hashed to as they were written), or None."""
        for path in self.directory.glob(f"{round_}-{index}-0x*.ckpt"):
            match = _KEPT.match(path.name)
            if match:
                return path, match.group(3)
        return None

    def publish_segment(self, blobs: Putter | FilePutter, round_: int, segment: int, segments: int) -> int | None:
        """Upload the checkpoints ``segment`` needs, each streamed from its file when ``blobs``
        takes files (``put_file``: a large model's checkpoint is never read into memory); returns
        the bytes uploaded, or None when one is no longer kept (or its file no longer hashes to
        its name). A store that cannot take them now raises: the caller retries."""
        indices = checkpoints_for_segment(segment, segments)
        needed = [self.kept(round_, i) for i in indices]
        if any(entry is None for entry in needed):
            return None
        sent = 0
        for index, entry in zip(indices, needed, strict=True):
            assert entry is not None
            path, digest = entry
            if isinstance(blobs, FilePutter):
                ref = blobs.put_file(path)
            else:
                data = self.get(round_, index)
                if data is None:
                    return None
                ref = blobs.put(data)
            if ref.digest != digest:
                return None
            sent += ref.size
        return sent

    def prune(self, before_round: int) -> None:
        """Forget the checkpoints of rounds before ``before_round`` (no claim can name them now)."""
        for path in self.directory.iterdir():
            match = _KEPT.match(path.name)
            if match and int(match.group(1)) < before_round:
                path.unlink(missing_ok=True)


def _write_bytes(data: bytes, out: Callable[[bytes], object]) -> None:
    out(data)
