"""The enclave boundary: only an admitted enclave key opens a sealed shard, bound to its spec."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import OFFLINE_DEADLINE, OFFLINE_WITNESSES, build_spec
from syncline.blobstore.local import LocalBlobStore
from syncline.confidential.enclave import EnclaveSession, SealedShardUnavailable
from syncline.confidential.keystore import new_enclave_key
from syncline.confidential.manifest import Enclave, new_manifest, seal_dataset, with_enclaves
from syncline.confidential.sealing import VALIDATION_INDEX
from syncline.errors import SpecError
from syncline.protocol.enums import Tier
from syncline.protocol.spec import ConfidentialSpec, DatasetManifest, TrainingTaskSpec

VERIFIER = "0x" + "ab" * 20
MEASUREMENT = b"\x4d" * 32
SHARDS = [f"confidential shard {i}: patient record {i * 7919}".encode() for i in range(4)]
VALIDATION = b"confidential validation: held-out records"


def _spec(dataset, **changes) -> TrainingTaskSpec:
    blobs = [f"0x{d.ciphertext_hash.hex()}" for d in dataset.shards()]
    return build_spec(
        witnesses=OFFLINE_WITNESSES,
        enrollment_deadline=OFFLINE_DEADLINE,
        shards=len(blobs),
        tier=Tier.CONFIDENTIAL,
        dataset=DatasetManifest(
            shard_hashes=tuple(blobs), validation_hash="0x" + dataset.validation().ciphertext_hash.hex()
        ),
        confidential=ConfidentialSpec(
            verifier=VERIFIER, measurements=("0x" + MEASUREMENT.hex(),), dataset_id="0x" + dataset.dataset_id.hex()
        ),
        **changes,
    )


class Chain:
    """Stands for the market's ``getSealedManifest`` slot: a hash, a URI and a version counter."""

    def __init__(self) -> None:
        self.slot: tuple[bytes, str, int] = (b"\x00" * 32, "", 0)

    def install(self, blobs: LocalBlobStore, manifest) -> None:
        ref = blobs.put(manifest.canonical_bytes())
        self.slot = (bytes.fromhex(ref.digest[2:]), ref.uri, self.slot[2] + 1)


@pytest.fixture
def world(tmp_path: Path):
    blobs = LocalBlobStore(tmp_path / "blobs")
    dataset = seal_dataset(SHARDS, VALIDATION)
    for b in (*dataset.blobs, dataset.validation_blob):
        blobs.put(b)
    spec = _spec(dataset).validate()
    trainer, witness = new_enclave_key(), new_enclave_key()
    manifest = with_enclaves(
        new_manifest(bytes.fromhex(spec.spec_hash[2:]), dataset),
        dataset.data_keys,
        [Enclave(trainer.pubkey, MEASUREMENT, "trainer"), Enclave(witness.pubkey, MEASUREMENT, "witness")],
        created_at=1,
    )
    chain = Chain()
    return blobs, dataset, spec, manifest, chain, trainer, witness


def _session(blobs, spec, chain, key) -> EnclaveSession:
    return EnclaveSession(
        task_id=7,
        spec=spec,
        key=key,
        pointer=lambda: chain.slot,
        fetch=lambda digest, hints, limit: blobs.get(digest, max_bytes=limit),
    )


def test_spec_confidential_section_round_trips_and_is_required_by_the_tier(world) -> None:
    _, dataset, spec, *_ = world
    again = TrainingTaskSpec.from_mapping(spec.to_mapping())
    assert again == spec and again.spec_hash == spec.spec_hash
    assert spec.to_mapping()["confidential"]["dataset_id"] == "0x" + dataset.dataset_id.hex()
    with pytest.raises(SpecError, match="only a Confidential task seals its data"):
        spec.with_updates(tier=Tier.VERIFIED).validate()
    bad = spec.to_mapping()
    bad["confidential"]["measurements"] = ["0x12"]
    with pytest.raises(SpecError, match=r"confidential\.measurements"):
        TrainingTaskSpec.from_mapping(bad)
    bad["confidential"] = {
        "verifier": VERIFIER,
        "measurements": ["0x" + "00" * 32],
        "dataset_id": "0x" + "11" * 32,
        "x": 1,
    }
    with pytest.raises(SpecError, match="unknown field"):
        TrainingTaskSpec.from_mapping(bad)


def test_admitted_enclaves_open_their_shards_in_memory(world) -> None:
    blobs, dataset, spec, manifest, chain, trainer, witness = world
    chain.install(blobs, manifest)
    t, w = _session(blobs, spec, chain, trainer), _session(blobs, spec, chain, witness)
    for i, plaintext in enumerate(SHARDS):
        assert t.open(i, dataset.blobs[i]) == plaintext
    assert w.open(VALIDATION_INDEX, dataset.validation_blob) == VALIDATION
    with pytest.raises(SealedShardUnavailable, match="no envelope"):
        t.open(VALIDATION_INDEX, dataset.validation_blob)


def test_a_trainer_without_the_enclave_key_cannot_read_a_shard(world) -> None:
    blobs, dataset, spec, manifest, chain, *_ = world
    chain.install(blobs, manifest)
    with pytest.raises(SealedShardUnavailable, match="opens only inside an attested enclave"):
        _session(blobs, spec, chain, None).open(0, dataset.blobs[0])
    with pytest.raises(SealedShardUnavailable, match="no envelope"):
        _session(blobs, spec, chain, new_enclave_key()).open(0, dataset.blobs[0])
    # and the ciphertext itself holds none of the plaintext
    assert all(b"patient record" not in blob for blob in dataset.blobs)


def test_no_manifest_yet_then_a_late_version_with_the_envelope(world) -> None:
    blobs, dataset, spec, manifest, chain, *_ = world
    late = new_enclave_key()
    session = _session(blobs, spec, chain, late)
    with pytest.raises(SealedShardUnavailable, match="has not installed a sealed manifest"):
        session.open(0, dataset.blobs[0])
    chain.install(blobs, manifest)
    with pytest.raises(SealedShardUnavailable, match="no envelope"):
        session.open(0, dataset.blobs[0])
    chain.install(blobs, with_enclaves(manifest, dataset.data_keys, [Enclave(late.pubkey, MEASUREMENT)], created_at=2))
    assert session.open(0, dataset.blobs[0]) == SHARDS[0]  # the session re-reads version 2


def test_a_manifest_of_another_spec_is_refused(world) -> None:
    blobs, dataset, spec, manifest, chain, trainer, _ = world
    chain.install(blobs, manifest)
    other = spec.with_updates(rounds=spec.rounds + 1)  # another spec hash, same dataset
    with pytest.raises(SealedShardUnavailable, match="names spec"):
        _session(blobs, other, chain, trainer).open(0, dataset.blobs[0])
    chain.slot = (b"\x99" * 32, "", 3)  # a hash no blob has: unavailable, not evidence
    with pytest.raises(Exception, match="0x9999"):
        _session(blobs, spec, chain, trainer).open(0, dataset.blobs[0])
