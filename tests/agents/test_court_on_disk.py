"""The court on disk: a large model's referee and challenger judge from files (issue 27, "Verification
at scale").

With ``state_on_disk`` a referee fetches the checkpoints a check needs into files
(:class:`~syncline.court.referee.BlobCheckpoints`, :class:`~syncline.protocol.checkpoints.CheckpointFile`),
reads the round's start state from a :class:`~syncline.run.state_file.StateFile`, replays a training
segment into a file (hashed on the way) and derives the payload range by range. Every verdict must
be the in-memory one: honest segments innocent, a fake gradient and a lazy trainer guilty, malformed
committed bytes guilty with the same reason, unavailable bytes undecided. No chain: a 1-layer Llama
(~18k parameters), H = 4, a checkpoint every 2 steps, a local blob store. Also the auditor's
round recomputation on disk (:class:`~syncline.court.files.CourtFiles`) keeps at most ``keep`` states.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from eth_utils import keccak

from syncline.blobstore import LocalBlobStore
from syncline.court.files import CourtFiles
from syncline.court.referee import (
    BlobCheckpoints,
    Claim,
    ReplayInputs,
    Undecided,
    Verdict,
    check_segment,
)
from syncline.modality.language import LanguageAdapter
from syncline.protocol.checkpoints import (
    Checkpoint,
    CheckpointError,
    CheckpointFile,
    CheckpointManifest,
    checkpoint_hash,
    checkpoint_root,
    segment_count,
)
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.state import TrainingState
from syncline.run.agent_config import InnerOptimizerConfig
from syncline.run.state_file import StateFile
from syncline.trainer.inner_loop import InnerLoop
from syncline.trainer.segments import encode_payload, holds_start_state

from .test_referee import MODEL as REFEREE_MODEL
from .test_referee import SEQ

H, INTERVAL = 4, 2
S = segment_count(H, INTERVAL)
MODEL: dict[str, Any] = {"family": "llama", **REFEREE_MODEL}  # test_referee's 1-layer Llama
INNER: dict[str, Any] = {"lr": 3e-3, "inner_steps": H, "batch_size": 4}


@dataclasses.dataclass
class Case:
    store: LocalBlobStore
    layout: ParameterLayout
    start: TrainingState
    start_file: StateFile
    blobs: list[bytes]
    claim: Claim
    manifest: CheckpointManifest
    memory: ReplayInputs
    disk: ReplayInputs
    scratch: Path


def _commit(
    store: LocalBlobStore, blobs: list[bytes], payload_hash: bytes, chunk_root: bytes
) -> tuple[Claim, CheckpointManifest]:
    for b in blobs:
        store.put(b)
    hashes = tuple(checkpoint_hash(b) for b in blobs)
    manifest = CheckpointManifest(INTERVAL, H, hashes, ("",) * len(blobs))
    return Claim(payload_hash, chunk_root, checkpoint_root(hashes)), manifest


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> Case:
    root = tmp_path_factory.mktemp("court-on-disk")
    adapter = LanguageAdapter(seq_len=SEQ)
    model = adapter.build_model(MODEL, seed=0)
    layout = ParameterLayout.from_state_dict(dict(model.named_parameters()))
    start = TrainingState.from_model_state_dict(dict(model.named_parameters()), layout)
    start_file = StateFile.write(start, root / "start.safetensors")
    shards = [np.random.default_rng(7).integers(0, 256, 3000).astype("<u2").tobytes()]
    work = InnerLoop(adapter, model, layout, InnerOptimizerConfig(**INNER)).run(
        start, shards, seed=3, checkpoint_interval=INTERVAL
    )
    blobs = list(work.checkpoints)
    store = LocalBlobStore(root / "blobs", fsync=False)
    claim, manifest = _commit(store, blobs, *_payload(work.pseudo_gradient))
    scratch = root / "scratch"
    scratch.mkdir()
    memory = ReplayInputs(
        adapter=adapter,
        build_model=lambda: adapter.build_model(MODEL, seed=0),
        layout=layout,
        shards=shards,
        seed=3,
        inner_steps=H,
        interval=INTERVAL,
        gradient_bits=8,
        start_state=start,
    )
    disk = dataclasses.replace(memory, start_state=start_file, scratch=scratch)
    return Case(store, layout, start, start_file, blobs, claim, manifest, memory, disk, scratch)


def _payload(gradient: torch.Tensor) -> tuple[bytes, bytes]:
    payload, chunk_root = encode_payload(gradient, 8)
    return keccak(payload), chunk_root


def _both(case: Case, segment: int, claim: Claim, manifest: CheckpointManifest, blobs: list[bytes]) -> tuple[Any, Any]:
    """The in-memory verdict (bytes) and the on-disk one (files), on the same committed data."""
    in_memory = check_segment(segment, claim, manifest, lambda m, i: blobs[i], case.memory)
    on_disk = check_segment(segment, claim, manifest, BlobCheckpoints(case.store, case.layout), case.disk)
    for path in case.scratch.iterdir():
        path.unlink()
    return in_memory, on_disk


def test_a_checkpoint_file_decodes_as_its_bytes(case: Case, tmp_path: Path) -> None:
    for i, data in enumerate(case.blobs):
        path = tmp_path / f"{i}.ckpt"
        path.write_bytes(data)
        f = CheckpointFile.open(path, layout=case.layout)
        c = Checkpoint.from_bytes(data, layout=case.layout)
        assert (f.step, f.adam_steps, f.optimizer, f.rng_state, f.device_class) == (
            c.step,
            c.adam_steps,
            c.optimizer,
            c.rng_state,
            c.device_class,
        )
        for vector in ("params", "exp_avg", "exp_avg_sq"):
            assert torch.equal(f.values(vector, 5, 900), c.values(vector, 5, 900))
        assert f.to_checkpoint(case.layout).to_bytes() == data
    first = CheckpointFile.open(tmp_path / "0.ckpt", layout=case.layout)
    assert holds_start_state(first, case.start_file) and holds_start_state(first, case.start)


def _numel(data: bytes) -> int:
    header = json.loads(data[16 : 16 + int.from_bytes(data[8:16], "little")])
    return int(header["numel"])


def _set_float(data: bytes, index: int, value: float) -> bytes:
    """``data`` with float ``index`` of its vectors (params, then the two moments) set to ``value``."""
    at = 16 + int.from_bytes(data[8:16], "little") + 4 * index
    return data[:at] + np.array([value], dtype="<f4").tobytes() + data[at + 4 :]


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: b"NOTACKPT" + d[8:],
        lambda d: d[:-8],
        lambda d: _set_float(d, 10, np.nan),
        lambda d: _set_float(d, 3 * _numel(d) - 1, -1.0),
        lambda d: d.replace(b'"step":0', b'"step": 0', 1),
    ],
    ids=["magic", "size", "nan", "negative-moment", "non-canonical"],
)
def test_malformed_checkpoint_files_fail_as_their_bytes(case: Case, tmp_path: Path, edit: Any) -> None:
    data = edit(case.blobs[0])
    path = tmp_path / "bad.ckpt"
    path.write_bytes(data)
    with pytest.raises(CheckpointError) as from_bytes:
        Checkpoint.from_bytes(data, layout=case.layout)
    with pytest.raises(CheckpointError) as from_file:
        CheckpointFile.open(path, layout=case.layout)
    assert str(from_file.value) == str(from_bytes.value)


def test_honest_segments_are_innocent_on_disk_as_in_memory(case: Case) -> None:
    for segment in range(S + 1):
        in_memory, on_disk = _both(case, segment, case.claim, case.manifest, case.blobs)
        assert isinstance(on_disk, Verdict) and not on_disk.guilty, on_disk
        assert on_disk == in_memory


def test_fraud_is_caught_on_disk_as_in_memory(case: Case) -> None:
    # A fake gradient: the payload is not the one derived from c_S.
    fake = torch.randn(case.layout.numel, generator=torch.Generator().manual_seed(1)) * 1e-3
    claim, manifest = _commit(case.store, case.blobs, *_payload(fake))
    in_memory, on_disk = _both(case, S, claim, manifest, case.blobs)
    assert on_disk.guilty and on_disk == in_memory
    # A lazy trainer: c_1 is c_0 relabelled, so the first training segment does not re-run to it.
    c0 = Checkpoint.from_bytes(case.blobs[0])
    lazy = [case.blobs[0], dataclasses.replace(c0, step=INTERVAL).to_bytes(), *case.blobs[2:]]
    claim, manifest = _commit(case.store, lazy, case.claim.payload_hash, case.claim.chunk_root)
    in_memory, on_disk = _both(case, 0, claim, manifest, lazy)
    assert on_disk.guilty and on_disk == in_memory, on_disk
    # Malformed committed bytes: guilty, with the same reason.
    broken = [case.blobs[0], b"not a checkpoint", *case.blobs[2:]]
    claim, manifest = _commit(case.store, broken, case.claim.payload_hash, case.claim.chunk_root)
    in_memory, on_disk = _both(case, 1, claim, manifest, broken)
    assert on_disk.guilty and "malformed" in on_disk.reason and on_disk == in_memory


def test_unavailable_checkpoints_leave_the_disk_referee_undecided(case: Case) -> None:
    missing = [*case.blobs[:-1], case.blobs[-1] + b"x"]  # committed, never stored
    hashes = tuple(checkpoint_hash(b) for b in missing)
    manifest = CheckpointManifest(INTERVAL, H, hashes, ("",) * len(missing))
    claim = dataclasses.replace(case.claim, checkpoint_root=checkpoint_root(hashes))
    outcome = check_segment(S, claim, manifest, BlobCheckpoints(case.store, case.layout), case.disk)
    assert isinstance(outcome, Undecided) and "unavailable" in outcome.reason


def test_court_files_hold_at_most_keep_states(case: Case, tmp_path: Path) -> None:
    files = CourtFiles(tmp_path / "court", keep=2)
    roots = []
    for bump in range(3):
        state = TrainingState(case.layout, case.start.weights + bump, case.start.momentum)
        work = StateFile.write(state, files.work_path(bump))
        roots.append(files.adopt(work).state_root_hex)
    assert files.held_roots() == roots[1:]
    assert sorted(p.name for p in files.states_dir.iterdir()) == sorted(f"{r}.safetensors" for r in roots[1:])
    files.release(roots[1])
    assert files.held_roots() == roots[2:]
