"""The enclave boundary of a trainer or witness in a Confidential task (simulated, docs/confidential.md).

:class:`EnclaveSession` holds the enclave's X25519 private key (decrypted from the agent's keystore
into this process, never written, logged or sent anywhere) and the task's sealed manifest. It turns
a ciphertext blob, already fetched and verified by its digest, into the plaintext shard, in memory
only: the caller keeps the plaintext in RAM and never writes it to disk.

The manifest is located by what the chain binds: ``getSealedManifest`` gives its keccak256 and a
URI hint; the blob is read by that digest, parsed strictly and must name this spec (``spec_hash``),
its ``dataset_id`` and exactly the spec's ciphertext hashes. A newer manifest version (envelopes
for late enrollees) replaces the cached one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from syncline.confidential.keystore import EnclaveKey
from syncline.confidential.manifest import (
    MAX_MANIFEST_BYTES,
    ManifestError,
    SealedDatasetManifest,
    open_envelope,
)
from syncline.confidential.sealing import VALIDATION_INDEX, SealingError
from syncline.errors import SynclineError
from syncline.observability import get_logger
from syncline.protocol.spec import TrainingTaskSpec

log = get_logger("syncline.confidential")

ManifestPointer = Callable[[], tuple[bytes, str, int]]
"""``() -> (manifest_hash, uri, version)``: the market's ``getSealedManifest`` for the task."""
FetchByDigest = Callable[[str, tuple[str, ...], int], bytes]
"""``(digest, uri hints, max_bytes) -> bytes``, verified against the digest."""


class SealedShardUnavailable(SynclineError):
    """This agent cannot open a sealed shard (yet): no enclave key, no manifest or no envelope for it."""


def check_binds(manifest: SealedDatasetManifest, spec: TrainingTaskSpec) -> None:
    """The manifest belongs to ``spec``: its spec hash, dataset id and ciphertext hashes (ManifestError)."""
    conf = spec.confidential
    if conf is None:
        raise ManifestError("the task is not Confidential: it has no sealed manifest")
    if "0x" + manifest.spec_hash.hex() != spec.spec_hash:
        raise ManifestError(f"sealed manifest names spec 0x{manifest.spec_hash.hex()}, not {spec.spec_hash}")
    if "0x" + manifest.dataset_id.hex() != conf.dataset_id:
        raise ManifestError(f"sealed manifest dataset_id 0x{manifest.dataset_id.hex()} is not the spec's")
    hashes = tuple("0x" + s.ciphertext_hash.hex() for s in manifest.shards)
    if hashes != tuple(h.lower() for h in spec.dataset.shard_hashes):
        raise ManifestError("sealed manifest shard ciphertext hashes differ from the spec's dataset")
    validation = None if manifest.validation is None else "0x" + manifest.validation.ciphertext_hash.hex()
    if validation != (spec.dataset.validation_hash.lower() if spec.dataset.validation_hash else None):
        raise ManifestError("sealed manifest validation ciphertext hash differs from the spec's dataset")


@dataclass
class EnclaveSession:
    """One task's sealed-data access inside the agent's (simulated) enclave."""

    task_id: int
    spec: TrainingTaskSpec
    key: EnclaveKey | None = field(repr=False)
    pointer: ManifestPointer = field(repr=False)
    fetch: FetchByDigest = field(repr=False)
    _manifest: SealedDatasetManifest | None = None
    _version: int = 0

    def manifest(self, *, refresh: bool = False) -> SealedDatasetManifest:
        """The task's current sealed manifest (re-read from the chain when ``refresh`` or none is cached)."""
        if self._manifest is not None and not refresh:
            return self._manifest
        manifest_hash, uri, version = self.pointer()
        if version == 0:
            raise SealedShardUnavailable(f"task {self.task_id}: the sponsor has not installed a sealed manifest yet")
        if self._manifest is not None and version == self._version:
            return self._manifest
        digest = "0x" + bytes(manifest_hash).hex()
        raw = self.fetch(digest, (uri,) if uri else (), MAX_MANIFEST_BYTES)
        try:
            manifest = SealedDatasetManifest.parse(raw)
            check_binds(manifest, self.spec)
        except ManifestError as exc:
            raise SealedShardUnavailable(f"task {self.task_id}: sealed manifest {digest}: {exc}") from None
        self._manifest, self._version = manifest, version
        log.info("enclave.manifest", task_id=self.task_id, version=version, manifest_hash=digest)
        return manifest

    def open(self, index: int, blob: bytes) -> bytes:
        """Shard ``index``'s plaintext (``VALIDATION_INDEX``: the validation shard), in memory."""
        what = "the validation shard" if index == VALIDATION_INDEX else f"shard {index}"
        if self.key is None:
            raise SealedShardUnavailable(
                f"task {self.task_id} is Confidential: {what} opens only inside an attested enclave "
                "(set enclave_keystore in the agent's config)"
            )
        manifest = self.manifest()
        if manifest.envelope(index, self.key.pubkey) is None:
            manifest = self.manifest(refresh=True)  # a newer version may carry this enclave's envelope
        try:
            return open_envelope(manifest, blob, index, self.key.private_key)
        except ManifestError as exc:
            raise SealedShardUnavailable(f"task {self.task_id}: {exc}") from None
        except SealingError as exc:
            raise SealedShardUnavailable(f"task {self.task_id}: {exc}") from None
