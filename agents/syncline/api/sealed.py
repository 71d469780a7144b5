"""``GET /api/runs/{task_id}/sealed-manifest``: a Confidential task's sealed manifest as the chain
names it (``getSealedManifest``), read by its hash from the blob store and checked against the spec.

The manifest is public (ciphertext hashes and wrapped keys); installing a new version needs the
sponsor's data keys and signing key, so it is done with ``syncline train install-sealed-manifest``
where the sponsor keeps them, never by this server.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from syncline.api.errors import ApiError
from syncline.api.services import ApiServices
from syncline.confidential.manifest import ManifestError
from syncline.confidential.sponsor import current_manifest, task_spec
from syncline.errors import SynclineError


class SealedManifestOut(BaseModel):
    task_id: int
    manifest_hash: str
    """keccak256 of the manifest's canonical JSON, as installed on chain (zero: none yet)."""
    uri: str
    version: int
    """The on-chain version counter (0: no manifest installed yet)."""
    shards: int = 0
    enclaves: list[str] = []
    """X25519 public keys that hold envelopes."""
    envelopes: int = 0
    manifest: dict[str, Any] | None = None
    """The whole manifest (canonical mapping), or None before the first install."""


def sealed_manifest(services: ApiServices, task_id: int) -> SealedManifestOut:
    try:
        spec = task_spec(services.market, services.blobs, task_id)
    except SynclineError as exc:
        raise ApiError(503, f"task {task_id}: cannot read its spec: {exc}") from None
    if spec.confidential is None:
        raise ApiError(404, f"task {task_id} is not a Confidential task with sealed data")
    manifest_hash, uri, version = services.market.get_sealed_manifest(task_id)
    out = SealedManifestOut(task_id=task_id, manifest_hash="0x" + manifest_hash.hex(), uri=uri, version=version)
    if version == 0:
        return out
    try:
        manifest, _ = current_manifest(services.market, services.blobs, task_id, spec)
    except ManifestError as exc:
        raise ApiError(502, f"task {task_id}: the installed sealed manifest is invalid: {exc}") from None
    except SynclineError as exc:
        raise ApiError(503, f"task {task_id}: sealed manifest {out.manifest_hash} unavailable: {exc}") from None
    assert manifest is not None
    out.shards = len(manifest.shards)
    out.enclaves = sorted("0x" + k.hex() for k in manifest.enclaves())
    out.envelopes = len(manifest.envelopes)
    out.manifest = manifest.to_mapping()
    return out
