"""The trainer's checkpoint keeper: kept on disk, published per segment, pruned."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncline.blobstore import LocalBlobStore, digest_of
from syncline.protocol.spot_checks import checkpoints_for_segment
from syncline.trainer.checkpoint_keeper import CheckpointKeeper


def test_a_segment_needs_its_two_ends_and_the_derivation_only_the_last() -> None:
    assert checkpoints_for_segment(0, 3) == (0, 1)
    assert checkpoints_for_segment(2, 3) == (2, 3)
    assert checkpoints_for_segment(3, 3) == (3,)
    for bad in (-1, 4, True):
        with pytest.raises(ValueError):
            checkpoints_for_segment(bad, 3)  # type: ignore[arg-type]


def test_kept_checkpoints_are_published_per_segment_and_pruned(tmp_path: Path) -> None:
    keeper = CheckpointKeeper(tmp_path / "kept")
    checkpoints = [b"c%d" % i * 100 for i in range(4)]  # S = 3 segments
    assert keeper.keep(5, checkpoints) == tuple(digest_of(c) for c in checkpoints)
    store = LocalBlobStore(tmp_path / "store", fsync=False)
    assert keeper.publish_segment(store, 5, 1, 3) == len(checkpoints[1]) + len(checkpoints[2])
    assert [store.has(digest_of(c)) for c in checkpoints] == [False, True, True, False]
    assert keeper.publish_segment(store, 5, 3, 3) == len(checkpoints[3]) and store.has(digest_of(checkpoints[3]))
    # a tampered file is not served
    (path,) = (tmp_path / "kept").glob("5-0-*.ckpt")
    path.write_bytes(b"tampered")
    assert keeper.get(5, 0) is None and keeper.publish_segment(store, 5, 0, 3) is None
    keeper.prune(6)
    assert keeper.get(5, 1) is None and keeper.publish_segment(store, 5, 1, 3) is None
