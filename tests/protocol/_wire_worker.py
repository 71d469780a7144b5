"""Feeds one parser of network bytes a deeply nested JSON value, in a worker thread, as an agent would.

Used by ``test_wire.py`` in a subprocess, because before the fix the parser overflowed the C stack
and killed the process (SIGSEGV) instead of raising::

    python tests/protocol/_wire_worker.py safetensors

Prints ``refused <ErrorType>: <message>`` and exits 0 when the parser refuses the input with its
documented error type.
"""

from __future__ import annotations

import asyncio
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    import syncline
except ImportError:  # pragma: no cover - a bare venv without the editable install
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "agents"))

import syncline.chain.market  # noqa: F401  (web3 -> py_ecc, exactly as every agent imports it)
from syncline.errors import SynclineError

DEPTH = 120_000
NESTED = b"[" * DEPTH + b"]" * DEPTH


def safetensors() -> None:
    from syncline.protocol.quantization import QuantizedGradient

    QuantizedGradient.from_safetensors_bytes(struct.pack("<Q", len(NESTED)) + NESTED)


def state_layout() -> None:
    import torch

    from syncline.protocol.fixed_point import write_safetensors
    from syncline.protocol.state import STATE_FORMAT, TrainingState

    zeros = torch.zeros(4, dtype=torch.int64)
    data = write_safetensors({"weights": zeros, "momentum": zeros}, {"format": STATE_FORMAT, "layout": NESTED.decode()})
    TrainingState.from_bytes(data)


def checkpoint() -> None:
    from syncline.protocol.checkpoints import MAGIC, Checkpoint

    header = NESTED + b" " * (-len(NESTED) % 8)
    Checkpoint.from_bytes(MAGIC + struct.pack("<Q", len(header)) + header + b"\0" * 64)


def manifest() -> None:
    from syncline.protocol.checkpoints import CheckpointManifest

    CheckpointManifest.from_json(NESTED)


def spec_artifact() -> None:
    import tempfile

    from syncline.api.specs import fetch_artifact
    from syncline.blobstore import BlobService, HttpBlobStore, LocalBlobStore

    with tempfile.TemporaryDirectory() as root, BlobService(LocalBlobStore(Path(root))) as service:
        blobs = HttpBlobStore(service.url)
        ref = blobs.put(NESTED)
        fetch_artifact(blobs, ref.uri, ref.digest)


def api_body() -> None:
    """``POST /api/runs/1/challenges/build`` with 64 KiB of ``[`` through the API's own middleware."""
    from fastapi import FastAPI

    from syncline.api.errors import install_error_handlers
    from syncline.api.middleware import BodyLimit
    from syncline.api.schemas import ChallengeRequest
    from syncline.api.settings import MAX_BODY_BYTES

    app = FastAPI()
    install_error_handlers(app)

    @app.post("/api/runs/{task_id}/challenges/build")
    def build(task_id: int, body: ChallengeRequest) -> dict[str, Any]:
        return {}

    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)
    body = b"[" * MAX_BODY_BYTES
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    path = "/api/runs/1/challenges/build"
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    asyncio.run(app(scope, receive, send))
    status = int(sent[0]["status"])
    if status >= 500:
        raise SystemExit(f"api answered {status}: {sent[1]['body'][:200]!r}")
    raise ValueError(f"HTTP {status} {sent[1]['body'].decode()}")


PARSERS: dict[str, Callable[[], None]] = {
    f.__name__: f for f in (safetensors, state_layout, checkpoint, manifest, spec_artifact, api_body)
}


def main() -> None:
    parse = PARSERS[sys.argv[1]]
    outcome: list[str] = []

    def run() -> None:
        try:
            parse()
            outcome.append("accepted")
        except (ValueError, SynclineError) as exc:  # each parser's documented one-line error
            outcome.append(f"refused {type(exc).__name__}: {exc}")

    thread = threading.Thread(target=run)  # agents and the API parse in worker threads
    thread.start()
    thread.join()
    print(outcome[0] if outcome else "no outcome", flush=True)


if __name__ == "__main__":
    main()
