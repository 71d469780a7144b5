"""Downloads: a run's model as a Hugging Face directory in a tar.gz (cached per spec and state
root), and verified state blobs."""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from pathlib import Path

from syncline.api.errors import ApiError
from syncline.api.services import ApiServices
from syncline.blobstore import DEFAULT_MAX_BLOB_BYTES, BlobNotFound, find_verified
from syncline.protocol.state import TrainingState
from syncline.sponsor.task_builder import export_model

MAX_STATE_BYTES = DEFAULT_MAX_BLOB_BYTES
"""The state of the largest model the tooling admits (:data:`~syncline.protocol.spec.MAX_PARAM_COUNT`)."""


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

    def check(data: bytes) -> bytes:
        if TrainingState.from_bytes(data, max_bytes=MAX_STATE_BYTES).state_root_hex != root.lower():
            raise ValueError("another state")
        return data

    try:  # the alias's candidates are hints: the first that recomputes the root
        return find_verified(services.blobs, (root.lower(),), check, what=f"state {root}", max_bytes=MAX_STATE_BYTES)
    except BlobNotFound:
        raise ApiError(404, f"no blob published for state root {root} holds that state") from None
