"""A Confidential task's sealed manifest through the API.

``GET /api/runs/{task_id}/sealed-manifest``: the manifest as the chain names it
(``getSealedManifest``), read by its hash from the blob store and checked against the spec. The
manifest is public (ciphertext hashes and wrapped keys).

``POST /api/runs/{task_id}/sealed-manifest/build``: on the sponsor's own server, configured with
its data-key store (``ApiSettings.sealing_keys`` / ``$SYNCLINE_SEALING_KEYS``, password from
``$SYNCLINE_SEALING_PASSWORD``), wrap the data keys to the enclaves the chain admitted since the last
version and publish the next manifest (:func:`syncline.confidential.sponsor.build_manifest`, the
build step ``syncline train install-sealed-manifest`` runs too); the answer carries the
``installSealedManifest`` call, which the sponsor's wallet signs and sends. The server never holds
a signing key; without a configured store the endpoint answers 503.

Only the task's on-chain sponsor may ask: the body ``{version, expires, signature}`` is its wallet's
EIP-191 signature (:mod:`syncline.confidential.authorise`; 401 without a valid, current one, 403
from another account, 409 for another version than the next). ``build_manifest`` then also refuses
(403) unless the store is bound to that sponsor and the on-chain policy is the spec's and the
store's. Only authorised builds count towards ``seal_builds_per_minute``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from syncline.api.errors import ApiError
from syncline.api.limits import PrepareGate
from syncline.api.services import ApiServices
from syncline.api.settings import SEALING_KEYS_ENV
from syncline.blobstore import BlobStoreError
from syncline.confidential.authorise import BuildAuthorisation, BuildUnauthorised, recover_signer
from syncline.confidential.manifest import ManifestError
from syncline.confidential.sponsor import BuildRefused, DataKeysMismatch, build_manifest, current_manifest, task_spec
from syncline.errors import ChainError, KeyConfigError, SynclineError
from syncline.observability import get_logger
from syncline.protocol.enums import TaskStatus
from syncline.protocol.spec import TrainingTaskSpec

log = get_logger("syncline.api.sealed")


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


class SealedBuildRequest(BaseModel):
    """The sponsor's authorisation of one build (docs/api.md): an EIP-191 signature over the text
    ``syncline.confidential.authorise.build_message(chain_id, market, task_id, version, expires)``."""

    model_config = ConfigDict(extra="forbid")

    version: int = Field(ge=1, le=2**63 - 1)
    """The version the build installs: the installed version + 1."""
    expires: int = Field(ge=0, le=2**63 - 1)
    """Unix seconds; in the future and at most 600 s ahead of the server's clock."""
    signature: str = Field(max_length=200)
    """0x and 65 bytes: the task sponsor's ``personal_sign`` of the build message."""


class SealedManifestCall(BaseModel):
    """The transaction the sponsor's wallet signs: ``function(args)`` to ``to``, ``data`` its calldata."""

    function: str
    args: list[int | str]
    """``[task_id, manifest_hash, uri]``."""
    to: str
    data: str
    value_wei: str


class SealedManifestBuild(BaseModel):
    task_id: int
    sponsor: str
    """The account that must sign ``call`` (the task's sponsor; the contract refuses anyone else)."""
    manifest_hash: str
    """keccak256 of the built manifest's canonical JSON (the installed one when ``call`` is None)."""
    uri: str
    version: int
    """The version installing ``call`` makes (``current_version + 1``); the current one when ``call`` is None."""
    current_version: int
    envelopes: int
    added: int
    """Envelopes added for enclaves admitted since the current version (0: nothing new)."""
    enclaves: int
    call: SealedManifestCall | None
    """``installSealedManifest(task_id, manifest_hash, uri)``; None when no enclave is new."""


def confidential_spec(services: ApiServices, task_id: int) -> TrainingTaskSpec:
    """The task's spec (read by the on-chain hash); 404 unless it is a Confidential task."""
    try:
        spec = task_spec(services.market, services.blobs, task_id)
    except SynclineError as exc:
        raise ApiError(503, f"task {task_id}: cannot read its spec: {exc}") from None
    if spec.confidential is None:
        raise ApiError(404, f"task {task_id} is not a Confidential task with sealed data")
    return spec


def sealed_manifest(services: ApiServices, task_id: int) -> SealedManifestOut:
    spec = confidential_spec(services, task_id)
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


def seal_gate(services: ApiServices) -> PrepareGate:
    """The build endpoint's limit: one build at a time, ``seal_builds_per_minute`` per client."""
    return PrepareGate(
        services.settings.seal_builds_per_minute,
        what="sealed-manifest builds",
        busy="another sealed manifest is being built",
    )


def _keys_file(services: ApiServices, task_id: int, spec: TrainingTaskSpec) -> Path:
    """The data-key store for the task: the configured file, or ``<dir>/<spec hash>.json`` (the
    layout ``post-task`` writes) in the configured directory. Messages never name server paths."""
    configured = services.settings.sealing_keys_path
    if configured is None:
        raise ApiError(
            503,
            f"this server holds no sponsor data-key store (set ${SEALING_KEYS_ENV} where the sponsor runs "
            "its own API server), so it cannot build sealed manifests; use `syncline train install-sealed-manifest`",
        )
    if configured.is_dir():
        path = configured / f"{spec.spec_hash[2:]}.json"
        if not path.is_file():
            raise ApiError(409, f"this server holds no data-key store for task {task_id} (spec {spec.spec_hash})")
        return path
    if not configured.is_file():
        raise ApiError(503, f"${SEALING_KEYS_ENV} names no data-key store file or directory on this server")
    return configured


def authorised_sponsor(services: ApiServices, task_id: int, body: SealedBuildRequest | None) -> str:
    """The task's on-chain sponsor, once ``body`` is its valid, current signature for the task's next
    version (401 unsigned/expired/invalid, 403 another signer, 409 another version). Cheap: no
    store is read; the rate limit counts only requests that pass."""
    market = services.market
    if body is None:
        raise ApiError(
            401,
            "a sealed-manifest build must be signed by the task's sponsor: body {version, expires, signature} "
            "(EIP-191, docs/api.md)",
        )
    auth = BuildAuthorisation(body.version, body.expires, body.signature)
    try:
        signer = recover_signer(auth, services.chain_id, market.address, task_id)
    except BuildUnauthorised as exc:
        raise ApiError(exc.status, str(exc)) from None
    sponsor = market.task(task_id).sponsor.lower()
    if signer != sponsor:
        raise ApiError(403, f"signed by {signer}, not by task {task_id}'s sponsor {sponsor}")
    _, _, installed = market.get_sealed_manifest(task_id)
    if body.version != installed + 1:
        raise ApiError(
            409, f"signed for version {body.version}, but task {task_id}'s next version is {installed + 1}: sign again"
        )
    return sponsor


def build_sealed_manifest(
    services: ApiServices, task_id: int, sponsor: str, spec: TrainingTaskSpec
) -> SealedManifestBuild:
    """Build (and publish) the task's next sealed-manifest version for its authorised ``sponsor``
    (``spec``: :func:`confidential_spec`); the call is the wallet's to send."""
    market = services.market
    task = market.task(task_id)
    if task.status in (TaskStatus.SEALED, TaskStatus.CANCELLED):
        raise ApiError(409, f"task {task_id} is {task.status.name.lower()}: its sealed manifest can no longer change")
    path = _keys_file(services, task_id, spec)

    def clean(exc: Exception) -> str:
        return str(exc).replace(str(path), "the data-key store")

    try:
        built = build_manifest(market, services.blobs, task_id, path, caller=sponsor, spec=spec)
    except BuildRefused as exc:
        log.warning("api.sealed_build_refused", task_id=task_id, reason=clean(exc))
        raise ApiError(403, clean(exc)) from None
    except DataKeysMismatch as exc:
        raise ApiError(409, clean(exc)) from None
    except KeyConfigError as exc:
        raise ApiError(503, clean(exc)) from None
    except ManifestError as exc:
        raise ApiError(502, f"task {task_id}: the installed sealed manifest is invalid: {exc}") from None
    except (BlobStoreError, ChainError) as exc:
        raise ApiError(502, f"task {task_id}: cannot build the sealed manifest: {exc}") from None
    call = None
    if built.install:
        c = built.call(market)
        call = SealedManifestCall(
            function=c.function,
            args=[task_id, built.manifest_hash, built.uri],
            to=c.target.lower(),
            data="0x" + c.calldata.hex(),
            value_wei=str(c.value),
        )
    log.info(
        "api.sealed_manifest_built",
        task_id=task_id,
        version=built.version,
        manifest_hash=built.manifest_hash,
        added=built.added,
        install=built.install,
    )
    return SealedManifestBuild(
        task_id=task_id,
        sponsor=task.sponsor.lower(),
        manifest_hash=built.manifest_hash,
        uri=built.uri,
        version=built.version,
        current_version=built.current_version,
        envelopes=built.envelopes,
        added=built.added,
        enclaves=built.enclaves,
        call=call,
    )
