"""``SealedDatasetManifest``: who may open which sealed shard (docs/protocol.md §12.8).

A manifest lists ``SealedShardEnvelope`` rows, one per (shard, admitted enclave): the shard's
ciphertext hash and size, and its data key wrapped with HPKE to that enclave's X25519 public key.
Training shards are sealed to every attested trainer and witness enclave of the task (witnesses
re-execute training as referees), the validation shard to the witnesses' enclaves only.

The manifest is a content-addressed artifact: its canonical JSON (sorted keys, no whitespace,
envelopes sorted by shard index then public key) hashed with keccak256 is the ``manifestHash`` the
sponsor installs on chain (``installSealedManifest``). Parsing bounds the size, the nesting, every
count and every hex length before trusting anything, and insists on canonical bytes, so the hash a
reader computes is the hash the chain holds.

Adding envelopes for an enclave that enrolls later re-wraps the data keys only: the shards'
ciphertexts, and so their hashes and the on-chain dataset root, do not change.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from syncline.confidential import sealing
from syncline.confidential.sealing import VALIDATION_INDEX, WRAP_ALG, SealingError
from syncline.errors import SynclineError
from syncline.protocol.hashing import keccak
from syncline.protocol.wire import WireFormatError, load_bounded_json

FORMAT_VERSION = 1
MAX_MANIFEST_BYTES = 16 << 20
MAX_MANIFEST_DEPTH = 4
MAX_SHARDS = 256
MAX_ENCLAVES = 96
"""At most 64 trainers and 32 witnesses per task (protocol/spec.py's MAX_TRAINERS, MAX_WITNESSES)."""
MAX_ENVELOPES = (MAX_SHARDS + 1) * MAX_ENCLAVES
MAX_MEASUREMENTS = 16
MAX_SHARD_BYTES = 256 << 20
ROLES = ("trainer", "witness")


class ManifestError(SynclineError):
    """A sealed manifest is malformed, not canonical, or does not match its task."""


def canonical_json(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _hex(data: bytes) -> str:
    return "0x" + bytes(data).hex()


def _hexbytes(value: object, name: str, length: int) -> bytes:
    if not isinstance(value, str) or len(value) != 2 + 2 * length or not value.startswith("0x"):
        raise ManifestError(f"{name}: expected 0x-prefixed lowercase hex of {length} bytes")
    body = value[2:]
    if any(c not in "0123456789abcdef" for c in body):
        raise ManifestError(f"{name}: expected 0x-prefixed lowercase hex of {length} bytes")
    return bytes.fromhex(body)


def _int(value: object, name: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ManifestError(f"{name}: expected an integer within {lo}..{hi}")
    return value


def _list(value: object, name: str, limit: int) -> list[Any]:
    if not isinstance(value, list):
        raise ManifestError(f"{name}: expected a list")
    if len(value) > limit:
        raise ManifestError(f"{name}: {len(value)} entries exceed the limit of {limit}")
    return value


def _fields(value: object, name: str, required: Iterable[str]) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ManifestError(f"{name}: expected an object")
    want = set(required)
    unknown = sorted(set(value) - want)
    if unknown:
        raise ManifestError(f"{name}: unknown field(s) {', '.join(unknown)}")
    missing = sorted(want - set(value))
    if missing:
        raise ManifestError(f"{name}: missing field(s) {', '.join(missing)}")
    return value


@dataclass(frozen=True)
class Enclave:
    """An attested enclave of a task: its X25519 public key, measurement and role."""

    pubkey: bytes
    measurement: bytes
    role: str = "trainer"

    def __post_init__(self) -> None:
        if len(self.pubkey) != 32 or len(self.measurement) != 32:
            raise ManifestError("enclave: pubkey and measurement are 32 bytes each")
        if self.role not in ROLES:
            raise ManifestError(f"enclave: role {self.role!r} is not one of {', '.join(ROLES)}")

    def may_open(self, index: int) -> bool:
        """Training shards: trainers and witnesses; the validation shard: witnesses only."""
        return self.role == "witness" or index != VALIDATION_INDEX


@dataclass(frozen=True)
class SealedShardEnvelope:
    """One shard's data key wrapped to one enclave."""

    shard_index: int
    shard_ciphertext_hash: bytes
    shard_ciphertext_bytes: int
    wrapped_data_key: bytes
    enclave_pubkey: bytes
    enclave_measurements_hex: tuple[str, ...]
    created_at: int
    wrap_alg: str = WRAP_ALG

    def to_mapping(self) -> dict[str, Any]:
        return {
            "shard_index": self.shard_index,
            "shard_ciphertext_hash": _hex(self.shard_ciphertext_hash),
            "shard_ciphertext_bytes": self.shard_ciphertext_bytes,
            "wrapped_data_key": _hex(self.wrapped_data_key),
            "wrap_alg": self.wrap_alg,
            "enclave_pubkey": _hex(self.enclave_pubkey),
            "enclave_measurements_hex": list(self.enclave_measurements_hex),
            "created_at": self.created_at,
        }

    @classmethod
    def from_mapping(cls, data: object, where: str) -> SealedShardEnvelope:
        d = _fields(
            data,
            where,
            (
                "shard_index",
                "shard_ciphertext_hash",
                "shard_ciphertext_bytes",
                "wrapped_data_key",
                "wrap_alg",
                "enclave_pubkey",
                "enclave_measurements_hex",
                "created_at",
            ),
        )
        if d["wrap_alg"] != WRAP_ALG:
            raise ManifestError(f"{where}.wrap_alg: {str(d['wrap_alg'])[:64]!r} is not {WRAP_ALG}")
        measurements = _list(d["enclave_measurements_hex"], f"{where}.enclave_measurements_hex", MAX_MEASUREMENTS)
        if not measurements:
            raise ManifestError(f"{where}.enclave_measurements_hex: expected at least one measurement")
        for i, m in enumerate(measurements):
            _hexbytes(m, f"{where}.enclave_measurements_hex[{i}]", 32)
        index = _int(d["shard_index"], f"{where}.shard_index", 0, VALIDATION_INDEX)
        if MAX_SHARDS <= index < VALIDATION_INDEX:
            raise ManifestError(f"{where}.shard_index: {index} is neither a shard (0..255) nor the validation shard")
        return cls(
            shard_index=index,
            shard_ciphertext_hash=_hexbytes(d["shard_ciphertext_hash"], f"{where}.shard_ciphertext_hash", 32),
            shard_ciphertext_bytes=_int(
                d["shard_ciphertext_bytes"], f"{where}.shard_ciphertext_bytes", 1, MAX_SHARD_BYTES
            ),
            wrapped_data_key=_hexbytes(d["wrapped_data_key"], f"{where}.wrapped_data_key", sealing.WRAPPED_KEY_BYTES),
            enclave_pubkey=_hexbytes(d["enclave_pubkey"], f"{where}.enclave_pubkey", 32),
            enclave_measurements_hex=tuple(measurements),
            created_at=_int(d["created_at"], f"{where}.created_at", 0, 2**63 - 1),
        )


@dataclass(frozen=True)
class SealedShard:
    """A sealed shard's public facts: its index, ciphertext hash and size."""

    index: int
    ciphertext_hash: bytes
    ciphertext_bytes: int


@dataclass(frozen=True)
class SealedDatasetManifest:
    """The envelopes of a Confidential task's sealed dataset."""

    spec_hash: bytes
    dataset_id: bytes
    shards: tuple[SealedShard, ...]
    validation: SealedShard | None
    envelopes: tuple[SealedShardEnvelope, ...] = field(default=())

    # ------------------------------------------------------------------ encoding

    def to_mapping(self) -> dict[str, Any]:
        envelopes = sorted(self.envelopes, key=lambda e: (e.shard_index, e.enclave_pubkey))
        return {
            "version": FORMAT_VERSION,
            "spec_hash": _hex(self.spec_hash),
            "dataset_id": _hex(self.dataset_id),
            "shard_ciphertext_hashes": [_hex(s.ciphertext_hash) for s in self.shards],
            "shard_ciphertext_bytes": [s.ciphertext_bytes for s in self.shards],
            "validation_ciphertext_hash": _hex(self.validation.ciphertext_hash) if self.validation else None,
            "validation_ciphertext_bytes": self.validation.ciphertext_bytes if self.validation else None,
            "envelopes": [e.to_mapping() for e in envelopes],
        }

    def canonical_bytes(self) -> bytes:
        return canonical_json(self.to_mapping())

    @property
    def manifest_hash(self) -> str:
        """The content address (keccak256 of the canonical JSON): the on-chain ``manifestHash``."""
        return _hex(keccak(self.canonical_bytes()))

    def shard(self, index: int) -> SealedShard:
        if index == VALIDATION_INDEX and self.validation is not None:
            return self.validation
        if 0 <= index < len(self.shards):
            return self.shards[index]
        raise ManifestError(f"sealed manifest has no shard {index}")

    def envelope(self, index: int, enclave_pubkey: bytes) -> SealedShardEnvelope | None:
        for e in self.envelopes:
            if e.shard_index == index and e.enclave_pubkey == enclave_pubkey:
                return e
        return None

    def enclaves(self) -> set[bytes]:
        return {e.enclave_pubkey for e in self.envelopes}

    # ------------------------------------------------------------------ parsing

    @classmethod
    def parse(cls, raw: bytes) -> SealedDatasetManifest:
        """Parse hostile bytes: size, nesting, types, counts and hex lengths bounded; canonical only."""
        try:
            data = load_bounded_json(
                raw, max_bytes=MAX_MANIFEST_BYTES, max_depth=MAX_MANIFEST_DEPTH, what="sealed manifest"
            )
        except WireFormatError as exc:
            raise ManifestError(str(exc)) from None
        d = _fields(
            data,
            "sealed manifest",
            (
                "version",
                "spec_hash",
                "dataset_id",
                "shard_ciphertext_hashes",
                "shard_ciphertext_bytes",
                "validation_ciphertext_hash",
                "validation_ciphertext_bytes",
                "envelopes",
            ),
        )
        if d["version"] != FORMAT_VERSION or isinstance(d["version"], bool):
            raise ManifestError(f"sealed manifest: version {str(d['version'])[:16]!r} is not {FORMAT_VERSION}")
        hashes = _list(d["shard_ciphertext_hashes"], "shard_ciphertext_hashes", MAX_SHARDS)
        sizes = _list(d["shard_ciphertext_bytes"], "shard_ciphertext_bytes", MAX_SHARDS)
        if not hashes or len(hashes) != len(sizes):
            raise ManifestError(
                "shard_ciphertext_hashes and shard_ciphertext_bytes need one entry per shard (at least one)"
            )
        shards = tuple(
            SealedShard(
                i,
                _hexbytes(h, f"shard_ciphertext_hashes[{i}]", 32),
                _int(n, f"shard_ciphertext_bytes[{i}]", 1, MAX_SHARD_BYTES),
            )
            for i, (h, n) in enumerate(zip(hashes, sizes, strict=True))
        )
        validation = None
        if d["validation_ciphertext_hash"] is not None or d["validation_ciphertext_bytes"] is not None:
            validation = SealedShard(
                VALIDATION_INDEX,
                _hexbytes(d["validation_ciphertext_hash"], "validation_ciphertext_hash", 32),
                _int(d["validation_ciphertext_bytes"], "validation_ciphertext_bytes", 1, MAX_SHARD_BYTES),
            )
        rows = _list(d["envelopes"], "envelopes", MAX_ENVELOPES)
        envelopes = tuple(SealedShardEnvelope.from_mapping(r, f"envelopes[{i}]") for i, r in enumerate(rows))
        manifest = cls(
            spec_hash=_hexbytes(d["spec_hash"], "spec_hash", 32),
            dataset_id=_hexbytes(d["dataset_id"], "dataset_id", 32),
            shards=shards,
            validation=validation,
            envelopes=envelopes,
        )
        manifest.check_consistent()
        if manifest.canonical_bytes() != bytes(raw):
            raise ManifestError("sealed manifest: not in canonical form (sorted keys, no whitespace, sorted envelopes)")
        return manifest

    def check_consistent(self) -> None:
        """Every envelope names a shard of this manifest with its ciphertext hash and size, once per enclave."""
        seen: set[tuple[int, bytes]] = set()
        enclaves: set[bytes] = set()
        for i, e in enumerate(self.envelopes):
            try:
                shard = self.shard(e.shard_index)
            except ManifestError:
                raise ManifestError(
                    f"envelopes[{i}]: shard_index {e.shard_index} is not a shard of this manifest"
                ) from None
            if e.shard_ciphertext_hash != shard.ciphertext_hash or e.shard_ciphertext_bytes != shard.ciphertext_bytes:
                raise ManifestError(f"envelopes[{i}]: ciphertext hash or size differs from shard {e.shard_index}'s")
            key = (e.shard_index, e.enclave_pubkey)
            if key in seen:
                raise ManifestError(f"envelopes[{i}]: a second envelope of shard {e.shard_index} for one enclave")
            seen.add(key)
            enclaves.add(e.enclave_pubkey)
        if len(enclaves) > MAX_ENCLAVES:
            raise ManifestError(f"envelopes: {len(enclaves)} enclaves exceed the limit of {MAX_ENCLAVES}")


# ---------------------------------------------------------------------- sealing a dataset


@dataclass(frozen=True)
class SealedDataset:
    """What the sponsor produces once: the sealed blobs (public) and the data keys (secret)."""

    dataset_id: bytes
    blobs: tuple[bytes, ...]
    validation_blob: bytes | None
    data_keys: Mapping[int, bytes] = field(repr=False)

    def shards(self) -> tuple[SealedShard, ...]:
        return tuple(SealedShard(i, sealing.ciphertext_hash(b), len(b)) for i, b in enumerate(self.blobs))

    def validation(self) -> SealedShard | None:
        b = self.validation_blob
        return None if b is None else SealedShard(VALIDATION_INDEX, sealing.ciphertext_hash(b), len(b))


def seal_dataset(shards: Sequence[bytes], validation: bytes | None, dataset_id: bytes | None = None) -> SealedDataset:
    """Encrypt every shard (and the validation shard) under its own fresh data key."""
    if not 1 <= len(shards) <= MAX_SHARDS:
        raise ManifestError(f"a sealed dataset has 1..{MAX_SHARDS} shards, not {len(shards)}")
    overhead = len(sealing.MAGIC) + sealing.NONCE_BYTES + sealing.TAG_BYTES
    for i, plaintext in enumerate([*shards, *([validation] if validation is not None else [])]):
        if not 0 < len(plaintext) <= MAX_SHARD_BYTES - overhead:
            what = f"shard {i}" if i < len(shards) else "the validation shard"
            raise ManifestError(f"{what}: {len(plaintext)} bytes; a sealed shard holds 1..{MAX_SHARD_BYTES - overhead}")
    did = dataset_id if dataset_id is not None else sealing.new_dataset_id()
    keys: dict[int, bytes] = {}
    blobs = []
    for i, plaintext in enumerate(shards):
        keys[i] = sealing.new_data_key()
        blobs.append(sealing.seal_shard(plaintext, keys[i], did, i))
    vblob = None
    if validation is not None:
        keys[VALIDATION_INDEX] = sealing.new_data_key()
        vblob = sealing.seal_shard(validation, keys[VALIDATION_INDEX], did, VALIDATION_INDEX)
    return SealedDataset(dataset_id=did, blobs=tuple(blobs), validation_blob=vblob, data_keys=keys)


def new_manifest(spec_hash: bytes, dataset: SealedDataset) -> SealedDatasetManifest:
    """A manifest with no envelope yet (add them with :func:`with_enclaves`)."""
    return SealedDatasetManifest(
        spec_hash=spec_hash, dataset_id=dataset.dataset_id, shards=dataset.shards(), validation=dataset.validation()
    )


def with_enclaves(
    manifest: SealedDatasetManifest,
    data_keys: Mapping[int, bytes],
    enclaves: Iterable[Enclave],
    *,
    created_at: int,
) -> SealedDatasetManifest:
    """``manifest`` plus an envelope for every (shard, enclave) pair the enclave may open and has none
    yet: the data keys are re-wrapped, the shards are not re-encrypted (same ciphertext hashes)."""
    added: list[SealedShardEnvelope] = []
    have = {(e.shard_index, e.enclave_pubkey) for e in manifest.envelopes}
    indices = [s.index for s in manifest.shards] + ([VALIDATION_INDEX] if manifest.validation else [])
    for enclave in enclaves:
        for index in indices:
            if not enclave.may_open(index) or (index, enclave.pubkey) in have:
                continue
            shard = manifest.shard(index)
            key = data_keys.get(index)
            if key is None:
                raise ManifestError(f"the sponsor's key store has no data key for shard {index}")
            wrapped = sealing.wrap_data_key(key, enclave.pubkey, manifest.dataset_id, index, shard.ciphertext_hash)
            added.append(
                SealedShardEnvelope(
                    shard_index=index,
                    shard_ciphertext_hash=shard.ciphertext_hash,
                    shard_ciphertext_bytes=shard.ciphertext_bytes,
                    wrapped_data_key=wrapped,
                    enclave_pubkey=enclave.pubkey,
                    enclave_measurements_hex=(_hex(enclave.measurement),),
                    created_at=created_at,
                )
            )
            have.add((index, enclave.pubkey))
    out = replace(
        manifest,
        envelopes=tuple(sorted((*manifest.envelopes, *added), key=lambda e: (e.shard_index, e.enclave_pubkey))),
    )
    out.check_consistent()
    return out


def open_envelope(manifest: SealedDatasetManifest, blob: bytes, index: int, enclave_private_key: bytes) -> bytes:
    """The plaintext of shard ``index`` for the enclave holding ``enclave_private_key``, in memory.

    ``blob`` must already be verified against the shard's ciphertext hash (it is checked again).
    Raises ManifestError when this enclave has no envelope, SealingError when it does not open.
    """
    shard = manifest.shard(index)
    if sealing.ciphertext_hash(blob) != shard.ciphertext_hash:
        raise ManifestError(f"shard {index}: the blob's hash is not the manifest's ciphertext hash")
    pubkey = sealing.enclave_public_key(enclave_private_key)
    envelope = manifest.envelope(index, pubkey)
    if envelope is None:
        raise ManifestError(f"shard {index}: the sealed manifest has no envelope for enclave {_hex(pubkey)}")
    key = sealing.unwrap_data_key(
        envelope.wrapped_data_key, enclave_private_key, manifest.dataset_id, index, shard.ciphertext_hash
    )
    return sealing.open_shard(blob, key, manifest.dataset_id, index)


__all__ = [
    "Enclave",
    "ManifestError",
    "SealedDataset",
    "SealedDatasetManifest",
    "SealedShard",
    "SealedShardEnvelope",
    "SealingError",
    "new_manifest",
    "open_envelope",
    "seal_dataset",
    "with_enclaves",
]
