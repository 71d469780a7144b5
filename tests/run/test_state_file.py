"""Agents' large-model path (issue 12, item 6): the state, the payloads and the checkpoints stay in
files and are streamed, never held as bytes and tensors at once.

Each test checks the file path against the in-memory one (same bytes, roots, weights) and, where it
is about memory, bounds the Python-tracked peak (numpy and bytes allocations: ``tracemalloc``) far
below one copy of the data."""

from __future__ import annotations

import functools
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from eth_account import Account

from syncline.blobstore import LocalBlobStore, digest_of
from syncline.blobstore.store import BlobUnavailable, put_signed_file
from syncline.demo.trainer_setup import TINY_MODEL
from syncline.modality.language import LanguageAdapter
from syncline.protocol.checkpoints import Checkpoint, InnerHyperparameters
from syncline.protocol.chunking import gradient_chunk_root
from syncline.protocol.disk_round import PayloadFile
from syncline.protocol.enums import AggregationRule
from syncline.protocol.fixed_point import to_fixed
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.quantization import quantize
from syncline.protocol.state import TrainingState
from syncline.protocol.sync_round import CommittedSubmission, compute_round
from syncline.run.agent_config import InnerOptimizerConfig
from syncline.run.context import StateUnavailable, TaskContext, load_weights
from syncline.run.state_file import StateFile, use_disk_state
from syncline.trainer.checkpoint_keeper import CheckpointKeeper
from syncline.trainer.inner_loop import InnerLoop
from syncline.trainer.outbox import Outbox


class Net(torch.nn.Module):
    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.a = torch.nn.Linear(width, width)
        self.b = torch.nn.Linear(width, 3)


def _state(model: torch.nn.Module, seed: int = 0) -> TrainingState:
    params = {k: v.detach() for k, v in model.named_parameters()}
    state = TrainingState.from_model_state_dict(params)
    gen = torch.Generator().manual_seed(seed)
    momentum = torch.randint(-(1 << 30), 1 << 30, (state.layout.numel,), generator=gen)
    return TrainingState(state.layout, state.weights, momentum)


def _context(store: LocalBlobStore, layout: ParameterLayout, publisher: str, spec: Any = None) -> TaskContext:
    """A TaskContext over ``store`` without a chain (what the state and round paths read)."""
    return TaskContext(
        task_id=1,
        market=None,  # type: ignore[arg-type]
        blobs=store,
        spec=spec,
        spec_uri="",
        adapter=None,  # type: ignore[arg-type]
        layout=layout,
        tokenizer_json="",
        _publishers=(publisher.lower(),),
    )


def test_a_state_file_holds_the_state_bytes_root_and_weights(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Net()
    state = _state(model)
    sf = StateFile.write(state, tmp_path / "s.safetensors")
    assert sf.path.read_bytes() == state.to_bytes()
    reopened = StateFile.open(sf.path, state.layout)
    assert reopened.state_root() == state.state_root()
    assert reopened.to_state() == state
    # loading from the file gives the parameters loading from memory gives, bit for bit
    from_memory, from_file = Net(), Net()
    load_weights(from_memory, state)
    load_weights(from_file, reopened)
    for (name, a), (_, b) in zip(from_memory.named_parameters(), from_file.named_parameters(), strict=True):
        assert torch.equal(a.view(torch.int32), b.view(torch.int32)), name


def test_a_state_file_with_another_layout_or_format_is_refused(tmp_path: Path) -> None:
    state = _state(Net())
    path = StateFile.write(state, tmp_path / "s.safetensors").path
    with pytest.raises(ValueError, match="layout"):
        StateFile.open(path, _state(Net(width=32)).layout)
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(ValueError):
        StateFile.open(path, state.layout)


def test_over_the_bound_a_state_file_has_no_root(tmp_path: Path) -> None:
    state = _state(Net())
    sf = StateFile.write(state, tmp_path / "s.safetensors")
    weights, _ = sf.regions(writable=True)
    weights.write(5, np.array([1 << 47], dtype=np.int64))
    weights.close()
    with pytest.raises(ValueError, match="bound"):
        StateFile.open(sf.path, state.layout).state_root()


def test_disk_state_is_the_default_from_4m_parameters_and_configurable() -> None:
    assert not use_disk_state(557_696, None) and use_disk_state(119_556_864, None)
    assert use_disk_state(10, True) and not use_disk_state(10**9, False)


def test_a_state_is_published_and_fetched_through_files_in_bounded_memory(tmp_path: Path) -> None:
    numel = 1 << 21  # a 32 MiB state
    layout = ParameterLayout.from_state_dict({"w": torch.zeros(numel)})
    gen = torch.Generator().manual_seed(1)
    weights = to_fixed(torch.randn(numel, generator=gen))
    state = TrainingState(layout, weights, weights // 3)
    root = state.state_root_hex
    source = StateFile.write(state, tmp_path / "source.safetensors")
    del state, weights
    store = LocalBlobStore(tmp_path / "store", fsync=False)
    witness = Account.create()
    ctx = _context(store, layout, witness.address)

    tracemalloc.start()
    try:
        put_signed_file(store, source.path, root, witness)  # what publish_state_file does
        published = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        fetched, size = ctx.fetch_state_file(root, tmp_path / "fetched.safetensors")
        assert fetched.state_root_hex == root  # recomputed from the file
        fetched_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert size == source.path.stat().st_size == 16 * numel + (size - 16 * numel)
    assert fetched.path.read_bytes() == source.path.read_bytes()
    # one copy of the state is 32 MiB: both sides stay at a few ranges
    assert published < 8 << 20, published
    assert fetched_peak < 8 << 20, fetched_peak


def test_a_state_blob_that_does_not_hash_to_the_root_is_skipped(tmp_path: Path) -> None:
    state = _state(Net())
    store = LocalBlobStore(tmp_path / "store", fsync=False)
    witness = Account.create()
    other = _state(Net(), seed=1)
    # a candidate under the alias that holds another state: refused, the real one is found
    bogus = StateFile.write(other, tmp_path / "bogus.safetensors")
    put_signed_file(store, bogus.path, state.state_root_hex, witness)
    ctx = _context(store, state.layout, witness.address)
    with pytest.raises(StateUnavailable, match="candidates tried"):
        ctx.fetch_state_file(state.state_root_hex, tmp_path / "x.safetensors")
    real = StateFile.write(state, tmp_path / "real.safetensors")
    store.put_file(real.path, alias=state.state_root_hex)
    fetched, _ = ctx.fetch_state_file(state.state_root_hex, tmp_path / "x.safetensors")
    assert fetched.to_state() == state
    assert not (tmp_path / "x.safetensors.download").exists()


def _spec() -> Any:
    class Spec:
        aggregation = type("A", (), {"rule": AggregationRule.COORDINATE_MEDIAN, "rule_param": 0})()
        gradient_bits = 8
        outer_lr_ppm = 700_000
        outer_momentum_ppm = 900_000

    return Spec()


def test_a_round_on_files_gives_the_in_memory_round(tmp_path: Path) -> None:
    torch.manual_seed(2)
    model = Net(width=96)
    previous = _state(model)
    store = LocalBlobStore(tmp_path / "store", fsync=False)
    ctx = _context(store, previous.layout, Account.create().address, spec=_spec())
    submissions, files = [], []
    for fragment in range(3):
        payload = quantize(torch.randn(previous.layout.numel) * 1e-3, 8)
        data = payload.to_safetensors_bytes()
        sub = CommittedSubmission(fragment, bytes.fromhex(digest_of(data)[2:]), gradient_chunk_root(payload), data)
        submissions.append(sub)
        path = tmp_path / f"p{fragment}.bin"
        path.write_bytes(data)
        files.append(PayloadFile(fragment, sub.payload_hash, sub.chunk_root, str(path)))
    expected = compute_round(
        previous,
        submissions,
        rule=AggregationRule.COORDINATE_MEDIAN,
        rule_param=0,
        bits=8,
        lr_ppm=700_000,
        momentum_ppm=900_000,
        max_payload_bytes=ctx.max_payload_bytes,
    )
    held = StateFile.write(previous, tmp_path / "prev.safetensors")
    before = held.path.read_bytes()
    new, result = ctx.compute_round_file(held, files, tmp_path / "next.safetensors")
    assert held.path.read_bytes() == before  # the previous state is left as it was
    assert (result.state_root, result.aggregate_root, result.accepted_mask) == (
        expected.state_root,
        expected.aggregate_root,
        expected.accepted_mask,
    )
    assert new.state_root() == expected.state_root
    assert new.path.read_bytes() == expected.state.to_bytes()
    assert not list(tmp_path.glob("*.work"))
    assert not any(Path(f.path).exists() for f in files if f.path)  # payload files are deleted after the round
    # in place: the previous state's own file becomes the new state (one state file on disk)
    new.remove()
    for sub, f in zip(submissions, files, strict=True):
        assert sub.payload is not None and f.path is not None
        Path(f.path).write_bytes(sub.payload)
    moved, again = ctx.compute_round_file(held, files, tmp_path / "next.safetensors", in_place=True)
    assert again == result and moved is held and not (tmp_path / "prev.safetensors").exists()
    assert moved.path.read_bytes() == expected.state.to_bytes()
    assert StateFile.open(moved.path, previous.layout).state_root() == expected.state_root


# ---------------------------------------------------------------------- trainer side


def _checkpoint(numel: int) -> Checkpoint:
    layout = ParameterLayout.from_state_dict({"w": torch.zeros(numel)})
    gen = torch.Generator().manual_seed(3)
    return Checkpoint(
        step=4,
        layout_digest=layout.digest(),
        params=torch.randn(numel, generator=gen),
        exp_avg=torch.randn(numel, generator=gen) * 1e-3,
        exp_avg_sq=torch.rand(numel, generator=gen) * 1e-6,
        adam_steps=(12,),
        optimizer=InnerHyperparameters(lr=3e-3, beta1=0.9, beta2=0.95, weight_decay=0.01, eps=1e-8, batch_size=8),
        dtype="fp32",
        threads=1,
        rng_state=bytes(range(256)) * 3,
    )


def test_a_checkpoint_streams_to_the_keeper_as_its_canonical_bytes(tmp_path: Path) -> None:
    ckpt = _checkpoint(1 << 20)  # 12 MiB of tensors
    pieces: list[bytes] = []
    ckpt.write(pieces.append, block=1 << 16)
    expected = ckpt.to_bytes()
    assert b"".join(pieces) == expected
    keeper = CheckpointKeeper(tmp_path / "kept")
    tracemalloc.start()
    try:
        digest = keeper.keep_checkpoint(7, 0, ckpt)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert digest == digest_of(expected)
    assert keeper.get(7, 0) == expected
    assert peak < 6 << 20, peak  # to_bytes alone would hold two 12 MiB copies
    store = LocalBlobStore(tmp_path / "store", fsync=False)
    assert keeper.publish_segment(store, 7, 0, 1) is None  # c_1 is not kept yet
    keeper.keep_checkpoint(7, 1, ckpt)
    assert keeper.publish_segment(store, 7, 0, 1) == 2 * len(expected) and store.get(digest) == expected
    keeper.prune(8)
    assert list((tmp_path / "kept").iterdir()) == []


class _Down(LocalBlobStore):
    def put_file(self, path: Path, **kwargs: Any) -> Any:
        raise BlobUnavailable("down")


def test_a_payload_file_is_uploaded_streamed_or_spooled_and_kept(tmp_path: Path) -> None:
    data = bytes(range(256)) * 4096
    payload = tmp_path / "own.bin"
    payload.write_bytes(data)
    store = LocalBlobStore(tmp_path / "store", fsync=False)
    outbox = Outbox(store, tmp_path / "outbox")
    ref = outbox.put_file(payload)
    assert ref.digest == digest_of(data) and store.get(ref.digest) == data
    outbox.keep_own_file(3, payload, ref.digest)
    assert outbox.own(ref.digest) == data
    outbox.prune_own(4)
    assert outbox.own(ref.digest) is None
    # the store is down: the file is spooled and uploaded by a later flush
    down = Outbox(_Down(tmp_path / "down", fsync=False), tmp_path / "outbox2")
    spooled = down.put_file(payload)
    assert spooled.digest == ref.digest and spooled.size == len(data)
    target = LocalBlobStore(tmp_path / "later", fsync=False)
    assert Outbox(target, tmp_path / "outbox2").flush() == 0
    assert target.get(ref.digest) == data


def test_a_checkpoint_streamed_from_the_model_is_the_checkpoints_bytes(tmp_path: Path) -> None:
    adapter = LanguageAdapter(seq_len=16)
    config = {**TINY_MODEL, "max_position_embeddings": 16, "vocab_size": 64}
    model = adapter.build_model(config, seed=0)
    layout = ParameterLayout.from_state_dict(dict(model.named_parameters()))
    loop = InnerLoop(adapter, model, layout, InnerOptimizerConfig(inner_steps=2, batch_size=2))
    keeper = CheckpointKeeper(tmp_path / "kept")
    for step in (0, 1):  # a fresh optimizer (zero moments), then after a step
        if step:
            ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(5))
            model(input_ids=ids).logits.float().pow(2).mean().backward()
            loop.optimizer.step()
            loop.optimizer.zero_grad(set_to_none=True)
        pieces: list[bytes] = []
        loop.write_checkpoint(step, pieces.append)
        expected = loop.checkpoint(step).to_bytes()
        assert b"".join(pieces) == expected
        assert keeper.keep_stream(3, step, functools.partial(loop.write_checkpoint, step)) == digest_of(expected)
        assert keeper.get(3, step) == expected
