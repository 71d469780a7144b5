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

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from syncline.chain.market import MarketClient
from syncline.confidential.attestation import check_confidential_terms
from syncline.confidential.keystore import ENCLAVE_PASSWORD_ENV, EnclaveKey, load_enclave_key
from syncline.confidential.manifest import (
    MAX_MANIFEST_BYTES,
    ManifestError,
    SealedDatasetManifest,
    open_envelope,
)
from syncline.confidential.sealing import VALIDATION_INDEX, SealingError
from syncline.errors import KeyConfigError, SpecError, SynclineError
from syncline.observability import get_logger
from syncline.protocol.spec import TrainingTaskSpec
from syncline.protocol.wire import WireFormatError, load_bounded_json
from syncline.run.agent_config import AgentConfig

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


MAX_ATTESTATION_FILE_BYTES = 16 << 10


@dataclass(frozen=True)
class AgentEnclave:
    """A trainer's or witness's enclave: its key (from the encrypted keystore), its measurement and
    the attestation report binding both to the agent's account (``enroll_attested`` /
    ``register_witness_enclave`` send them; the chain's verifier checks the parity)."""

    key: EnclaveKey = field(repr=False)
    measurement: bytes
    report: bytes = field(repr=False)

    @classmethod
    def from_files(
        cls, keystore: Path, attestation: Path | None, *, password_env: str = ENCLAVE_PASSWORD_ENV
    ) -> AgentEnclave:
        """The keystore (password from ``$password_env``) and the attestation file: JSON
        ``{"enclave_pubkey", "measurement", "report"}`` (0x hex), whose public key must be the key's."""
        key = load_enclave_key(keystore, password_env=password_env)
        if attestation is None:
            raise KeyConfigError("enclave_keystore needs enclave_attestation (the attestation report file)")
        try:
            data = load_bounded_json(
                Path(attestation).read_bytes(), max_bytes=MAX_ATTESTATION_FILE_BYTES, what="attestation file"
            )
            pubkey = bytes.fromhex(str(data["enclave_pubkey"]).removeprefix("0x"))
            measurement = bytes.fromhex(str(data["measurement"]).removeprefix("0x"))
            report = bytes.fromhex(str(data["report"]).removeprefix("0x"))
        except OSError as exc:
            raise KeyConfigError(f"cannot read attestation file {attestation}: {exc.strerror}") from None
        except (WireFormatError, KeyError, TypeError, ValueError) as exc:
            raise KeyConfigError(f"{attestation} is not an attestation file: {str(exc).splitlines()[0]}") from None
        if pubkey != key.pubkey:
            raise KeyConfigError(
                f"{attestation} attests enclave 0x{pubkey.hex()}, not this keystore's 0x{key.pubkey.hex()}"
            )
        if len(measurement) != 32 or not report:
            raise KeyConfigError(f"{attestation}: measurement must be 32 bytes and report non-empty")
        return cls(key=key, measurement=measurement, report=report)


def write_attestation_file(path: Path, enclave_pubkey: bytes, measurement: bytes, report: bytes) -> Path:
    """The file :meth:`AgentEnclave.from_files` reads (public data: a report is no secret)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "enclave_pubkey": "0x" + enclave_pubkey.hex(),
                "measurement": "0x" + measurement.hex(),
                "report": "0x" + report.hex(),
            }
        )
    )
    return path


def agent_enclave(cfg: AgentConfig) -> AgentEnclave | None:
    """The agent's enclave from its config (``enclave_keystore``, ``enclave_attestation``), or None."""
    if cfg.enclave_keystore is None:
        return None
    return AgentEnclave.from_files(cfg.enclave_keystore, cfg.enclave_attestation)


def check_task_policy(market: MarketClient, task_id: int, spec: TrainingTaskSpec) -> None:
    """Before an enclave is attested to a task: the chain's attestation policy
    (``getConfidentialConfig``) is the one the spec names (one-line SpecError otherwise; none yet:
    the sponsor has not configured it, retried)."""
    conf = spec.confidential
    if conf is None:
        raise SpecError(f"task {task_id}: a Confidential task's spec must name its sealed dataset (confidential)")
    check_confidential_terms(task_id, market.get_confidential_config(task_id), conf.verifier, conf.measurements)
