"""The sponsor's side of a Confidential task: seal the shards before posting, then install (and
extend) the sealed manifest as attested enclaves are admitted on chain.

Sealing happens once, before the task is posted: the spec's dataset names the ciphertext hashes
(so the on-chain dataset root binds the ciphertexts) and its ``confidential`` section the verifier,
the measurement allow-list and the ``dataset_id``. The data keys go to the sponsor's encrypted
store (:func:`syncline.confidential.keystore.write_data_keys`) and nowhere else.

:func:`build_manifest` reads the enclaves the chain admitted (``getEnclave`` of every enrolled
trainer and every listed witness), wraps each data key to every enclave that has no envelope yet
and publishes the manifest blob; :func:`send_manifest` installs its hash
(``installSealedManifest``, a new version) with the sponsor's key, or the sponsor's wallet signs
:meth:`ManifestBuild.call` (``POST /api/runs/{id}/sealed-manifest/build``).
:func:`install_manifest` is both steps (``syncline train install-sealed-manifest``). The shards are
never re-encrypted: every version names the same ciphertext hashes.

Whose keys for which task: the spec names no sponsor, so anyone can re-post a sponsor's exact spec
(same hash) under its own verifier. :func:`build_manifest` therefore wraps only for a task whose
on-chain sponsor is the caller that authorised the build and the store's bound sponsor
(:class:`~syncline.confidential.keystore.StoreBinding`), and whose on-chain attestation policy
(``getConfidentialConfig``: verifier, measurements) is both the spec's and the store's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from syncline.blobstore import BlobStore
from syncline.chain.calls import ContractCall
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.confidential.enclave import check_binds
from syncline.confidential.keystore import (
    SEALING_PASSWORD_ENV,
    SealingKeys,
    StoreBinding,
    bind_data_keys,
    load_data_keys,
)
from syncline.confidential.manifest import (
    MAX_MANIFEST_BYTES,
    Enclave,
    ManifestError,
    SealedDatasetManifest,
    with_enclaves,
)
from syncline.errors import SpecError
from syncline.observability import get_logger
from syncline.protocol.spec import MAX_SPEC_BYTES, TrainingTaskSpec
from syncline.run.context import fetch_by_digest

log = get_logger("syncline.sponsor.confidential")
ZERO32 = b"\x00" * 32


@dataclass(frozen=True)
class SealingRequest:
    """What a sponsor asks of a Confidential task before its data is sealed."""

    verifier: str
    measurements: tuple[str, ...]

    def section(self, dataset_id: bytes) -> dict[str, Any]:
        """The spec's ``confidential`` section for the dataset sealed under ``dataset_id``."""
        return {
            "verifier": self.verifier,
            "measurements": list(self.measurements),
            "dataset_id": "0x" + dataset_id.hex(),
        }


@dataclass(frozen=True)
class InstalledManifest:
    task_id: int
    manifest_hash: str
    uri: str
    version: int
    envelopes: int
    added: int
    enclaves: int

    def to_mapping(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "manifest_hash": self.manifest_hash,
            "uri": self.uri,
            "version": self.version,
            "envelopes": self.envelopes,
            "added": self.added,
            "enclaves": self.enclaves,
        }


def task_spec(market: MarketClient, blobs: BlobStore, task_id: int) -> TrainingTaskSpec:
    """The task's spec artifact, read by the hash the chain holds."""
    onchain = market.spec_tuple(task_id)
    spec_hash, spec_uri = "0x" + bytes(onchain[0]).hex(), str(onchain[1])
    spec = TrainingTaskSpec.from_artifact(fetch_by_digest(blobs, spec_hash, (spec_uri,), max_bytes=MAX_SPEC_BYTES))
    if spec.spec_hash != spec_hash:
        raise SpecError(f"task {task_id}: spec artifact hash {spec.spec_hash} != on-chain {spec_hash}")
    return spec


def admitted_enclaves(market: MarketClient, task_id: int, spec: TrainingTaskSpec) -> list[Enclave]:
    """Every enclave the chain admitted for the task: enrolled trainers', then registered witnesses'."""
    out: list[Enclave] = []
    for role, accounts in (("trainer", market.trainers(task_id)), ("witness", list(spec.witnesses))):
        for account in accounts:
            pubkey, measurement = market.get_enclave(task_id, account)
            if pubkey != ZERO32:
                out.append(Enclave(pubkey, measurement, role))
    return out


def current_manifest(
    market: MarketClient, blobs: BlobStore, task_id: int, spec: TrainingTaskSpec
) -> tuple[SealedDatasetManifest | None, int]:
    """The installed manifest (None before the first install) and its version."""
    manifest_hash, uri, version = market.get_sealed_manifest(task_id)
    if version == 0:
        return None, 0
    raw = fetch_by_digest(blobs, "0x" + manifest_hash.hex(), (uri,), max_bytes=MAX_MANIFEST_BYTES)
    manifest = SealedDatasetManifest.parse(raw)
    check_binds(manifest, spec)
    return manifest, version


class DataKeysMismatch(ManifestError):
    """The sponsor's data-key store holds another dataset's keys than the task's."""


class DataKeysUnbound(DataKeysMismatch):
    """The store was written without a :class:`StoreBinding` (bind it: ``install-sealed-manifest --bind-keys``)."""


class BuildRefused(ManifestError):
    """The build would wrap the keys for someone who does not own them: the caller or the store's
    sponsor is not the task's on-chain sponsor, or the on-chain policy is not the spec's or the store's."""


def task_binding(market: MarketClient, task_id: int, spec: TrainingTaskSpec, caller: str) -> StoreBinding:
    """The task's on-chain sponsor and attestation policy, once they are ``caller`` and the spec's
    (BuildRefused otherwise; DataKeysMismatch before ``configureConfidential``)."""
    if spec.confidential is None:
        raise SpecError(f"task {task_id} is not a Confidential task with sealed data")
    sponsor = market.task(task_id).sponsor.lower()
    if caller.lower() != sponsor:
        raise BuildRefused(f"{caller.lower()} is not task {task_id}'s sponsor ({sponsor}): only the sponsor builds")
    verifier, measurements = market.get_confidential_config(task_id)
    if int(verifier, 16) == 0:
        raise DataKeysMismatch(f"task {task_id} has no attestation policy on chain yet (configureConfidential)")
    onchain = StoreBinding.of(sponsor, verifier, measurements)
    wanted = StoreBinding.of(sponsor, spec.confidential.verifier, spec.confidential.measurements)
    if onchain != wanted:
        raise BuildRefused(
            f"task {task_id}'s attestation policy on chain is not its spec's (verifier {onchain.verifier}, "
            f"{len(onchain.measurements)} measurement(s); the spec names verifier {wanted.verifier}): "
            "no keys are wrapped"
        )
    return onchain


def check_store_binding(store: SealingKeys, task_id: int, binding: StoreBinding) -> None:
    """The store is bound to the task's on-chain sponsor and policy (``binding``)."""
    bound = store.binding
    if bound is None:
        raise DataKeysUnbound(
            f"the data-key store is bound to no sponsor: bind it with `syncline train install-sealed-manifest "
            f"--task-id {task_id} --bind-keys` (the sponsor's key)"
        )
    if bound.sponsor != binding.sponsor:
        raise BuildRefused(
            f"the data-key store belongs to sponsor {bound.sponsor}, not task {task_id}'s sponsor {binding.sponsor}"
        )
    if bound.policy() != binding.policy():
        raise BuildRefused(
            f"the data-key store is bound to verifier {bound.verifier} and {len(bound.measurements)} measurement(s), "
            f"not task {task_id}'s on-chain policy (verifier {binding.verifier})"
        )


def bind_keys_to_task(
    market: MarketClient,
    blobs: BlobStore,
    task_id: int,
    keys_file: Path,
    caller: str,
    *,
    password: str | None = None,
    password_env: str = SEALING_PASSWORD_ENV,
) -> StoreBinding:
    """Bind an unbound store (one written before stores were bound) to the task's on-chain sponsor
    (``caller``, the sponsor's key) and policy, once they are the spec's."""
    binding = task_binding(market, task_id, task_spec(market, blobs, task_id), caller)
    bind_data_keys(keys_file, binding, password=password, password_env=password_env)
    return binding


@dataclass(frozen=True)
class ManifestBuild:
    """The task's next sealed manifest, published to the blob store but not installed yet
    (``install``), or the installed one when no enclave is new (``install`` False).

    ``version`` is the version installing it makes (``current_version + 1``), or the current one
    when there is nothing to install."""

    task_id: int
    manifest_hash: str
    uri: str
    version: int
    current_version: int
    envelopes: int
    added: int
    enclaves: int
    install: bool

    def call(self, market: MarketClient) -> ContractCall:
        """The sponsor's ``installSealedManifest(taskId, manifestHash, uri)`` transaction, ready to sign."""
        if not self.install:
            raise ManifestError(f"task {self.task_id}: sealed manifest version {self.version} is current")
        function = "installSealedManifest"
        calldata = market.encode_call(function, [self.task_id, bytes.fromhex(self.manifest_hash[2:]), self.uri])
        return ContractCall(target=market.address, function=function, calldata=calldata, value=0)

    def installed(self, version: int) -> InstalledManifest:
        return InstalledManifest(
            self.task_id, self.manifest_hash, self.uri, version, self.envelopes, self.added, self.enclaves
        )


def build_manifest(
    market: MarketClient,
    blobs: BlobStore,
    task_id: int,
    keys_file: Path,
    *,
    caller: str,
    password: str | None = None,
    password_env: str = SEALING_PASSWORD_ENV,
    now: int | None = None,
    spec: TrainingTaskSpec | None = None,
) -> ManifestBuild:
    """Wrap the data keys to every newly admitted enclave and publish the next manifest version
    (content-addressed) to ``blobs``; installing it on chain is the caller's (:func:`send_manifest`,
    or a wallet signing :meth:`ManifestBuild.call`).

    ``caller``: the address that authorised the build (the CLI's key, the API request's signer); it,
    the store's bound sponsor and the task's on-chain sponsor must be one, and the on-chain policy
    the spec's and the store's (:func:`task_binding`, :func:`check_store_binding`): BuildRefused.
    Publishes nothing when no enclave is new and a version is installed. ``spec``: the task's spec
    when the caller already read it by the on-chain hash (:func:`task_spec`).
    """
    spec = spec or task_spec(market, blobs, task_id)
    binding = task_binding(market, task_id, spec, caller)  # before the store is even decrypted
    assert spec.confidential is not None
    store = load_data_keys(keys_file, password=password, password_env=password_env)
    if "0x" + store.dataset_id.hex() != spec.confidential.dataset_id:
        raise DataKeysMismatch(
            f"{keys_file} holds the keys of dataset 0x{store.dataset_id.hex()}, not task {task_id}'s"
        )
    check_store_binding(store, task_id, binding)
    manifest, version = current_manifest(market, blobs, task_id, spec)
    if manifest is None:
        manifest = SealedDatasetManifest(
            spec_hash=bytes.fromhex(spec.spec_hash[2:]),
            dataset_id=store.dataset_id,
            shards=store.shards,
            validation=store.validation,
        )
        check_binds(manifest, spec)
    enclaves = admitted_enclaves(market, task_id, spec)
    updated = with_enclaves(manifest, store.keys, enclaves, created_at=int(time.time()) if now is None else now)
    added = len(updated.envelopes) - len(manifest.envelopes)
    envelopes, count = len(updated.envelopes), len(updated.enclaves())
    if added == 0 and version > 0:
        h, uri, _ = market.get_sealed_manifest(task_id)
        return ManifestBuild(task_id, "0x" + h.hex(), uri, version, version, envelopes, 0, count, install=False)
    ref = blobs.put(updated.canonical_bytes())
    if ref.digest != updated.manifest_hash:
        raise RuntimeError("manifest blob digest differs from the manifest hash")  # keccak of the same bytes
    return ManifestBuild(task_id, ref.digest, ref.uri, version + 1, version, envelopes, added, count, install=True)


def send_manifest(market: MarketClient, sponsor: Signer, built: ManifestBuild) -> InstalledManifest:
    """Install a built manifest (``installSealedManifest`` from the sponsor); nothing when it is current."""
    if not built.install:
        return built.installed(built.current_version)
    market.install_sealed_manifest(sponsor, built.task_id, bytes.fromhex(built.manifest_hash[2:]), built.uri)
    _, _, version = market.get_sealed_manifest(built.task_id)
    log.info(
        "sponsor.sealed_manifest_installed",
        task_id=built.task_id,
        version=version,
        manifest_hash=built.manifest_hash,
        envelopes=built.envelopes,
        added=built.added,
    )
    return built.installed(version)


def install_manifest(
    market: MarketClient,
    sponsor: Signer,
    blobs: BlobStore,
    task_id: int,
    keys_file: Path,
    *,
    password: str | None = None,
    password_env: str = SEALING_PASSWORD_ENV,
    now: int | None = None,
) -> InstalledManifest:
    """Wrap the data keys to every newly admitted enclave and install the new manifest version
    (:func:`build_manifest`, then :func:`send_manifest`).

    Installs nothing (and returns the current version) when no enclave is new.
    """
    built = build_manifest(
        market, blobs, task_id, keys_file, caller=sponsor.address, password=password, password_env=password_env, now=now
    )
    return send_manifest(market, sponsor, built)
