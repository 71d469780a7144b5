"""The trainer's checkpoint keeper: kept on disk, published per segment, pruned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

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


@pytest.mark.parametrize(("snapshot", "wait"), [(True, True), (False, True), (True, False)])
def test_checkpoints_written_while_training_goes_on_are_the_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snapshot: bool, wait: bool
) -> None:
    """A small model's checkpoints are copied and kept from a background thread while the next
    steps train; a large one's streamed from the model at once (forced here with the threshold at
    0). Either way the keeper holds exactly the bytes of the checkpoints captured in memory, and
    the training is the same. A run that does not wait for the last ones (``wait_for_checkpoints``
    False, the trainer's) has them once ``checkpoints_written`` returns."""
    import numpy as np

    from syncline.demo.trainer_setup import TINY_MODEL
    from syncline.modality.language import LanguageAdapter
    from syncline.protocol.layout import ParameterLayout
    from syncline.protocol.state import TrainingState
    from syncline.run.agent_config import InnerOptimizerConfig
    from syncline.trainer import inner_loop
    from syncline.trainer.inner_loop import InnerLoop

    if not snapshot:
        monkeypatch.setattr(inner_loop, "SNAPSHOT_MAX_NUMEL", 0)
    adapter = LanguageAdapter(seq_len=16)
    config = {**TINY_MODEL, "max_position_embeddings": 16, "vocab_size": 64}
    params = {k: v.detach() for k, v in adapter.build_model(config, seed=0).named_parameters()}
    layout = ParameterLayout.from_state_dict(params)
    start = TrainingState.from_model_state_dict(params, layout)
    shards = [np.random.default_rng(s).integers(0, 64, 2000).astype("<u2").tobytes() for s in (1, 2)]
    inner = InnerOptimizerConfig(inner_steps=6, batch_size=2)

    def run(sink: Any) -> Any:
        loop = InnerLoop(adapter, adapter.build_model(config, seed=0), layout, inner)
        return loop.run(start, shards, seed=7, checkpoint_interval=2, checkpoint_sink=sink, wait_for_checkpoints=wait)

    in_memory = run(None)
    keeper = CheckpointKeeper(tmp_path / "kept")
    kept = run(lambda index, write: keeper.keep_stream(4, index, write, durable=False))
    if not wait:
        assert kept.checkpoints_pending and len(kept.checkpoint_digests) < 4
        kept = kept.checkpoints_written()
    assert not kept.checkpoints_pending and kept.checkpoints_written() is kept
    assert len(in_memory.checkpoints) == 4 and kept.checkpoints == ()
    assert kept.checkpoint_digests == tuple(digest_of(c) for c in in_memory.checkpoints)
    assert [keeper.get(4, i) for i in range(4)] == list(in_memory.checkpoints)
    assert torch.equal(kept.pseudo_gradient, in_memory.pseudo_gradient)
