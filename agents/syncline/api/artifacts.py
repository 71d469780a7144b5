"""Downloads: a run's model as a Hugging Face directory in a tar.gz (cached per spec and state
root), and verified state blobs."""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from pathlib import Path

from syncline.api.errors import ApiError
from syncline.api.services import ApiServices
from syncline.protocol.state import TrainingState
from syncline.sponsor.task_builder import export_model

MAX_STATE_BYTES = 1 << 30


def model_archive(services: ApiServices, task_id: int) -> tuple[Path, str]:
    """The tar.gz of the task's current (final, once sealed) model; returns (path, download name)."""
    root = services.market.task(task_id).state_root
    ctx = services.task_context(task_id)
    key = f"{ctx.spec.spec_hash[2:18]}-{root[2:]}"
    path = services.cache_dir / f"{key}.tar.gz"
    name = f"syncline-task-{task_id}-{root[2:10]}"
    with services.file_lock(key):
        if not path.exists():
            with tempfile.TemporaryDirectory(dir=services.cache_dir) as tmp:
                out = export_model(ctx, root, Path(tmp) / name)
                partial = Path(tmp) / "archive.tar.gz"
                with tarfile.open(partial, "w:gz") as tar:
                    tar.add(out, arcname=name)
                shutil.move(partial, path)
    return path, f"{name}.tar.gz"


def state_blob(services: ApiServices, root: str) -> bytes:
    """The serialized state whose Merkle root is ``root``, verified by recomputing the root."""
    digest = services.blobs.resolve(root.lower())
    if digest is None:
        raise ApiError(404, f"no blob is published for state root {root}")
    data = services.blobs.get(digest)
    try:
        state = TrainingState.from_bytes(data, max_bytes=MAX_STATE_BYTES)
    except ValueError as exc:
        raise ApiError(502, f"the blob for state root {root} is not a training state: {exc}") from None
    if state.state_root_hex != root.lower():
        raise ApiError(502, f"the blob for {root} holds state {state.state_root_hex}")
    return data
