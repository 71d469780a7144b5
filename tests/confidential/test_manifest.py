"""SealedDatasetManifest: round trip, late enrollees, strict parsing of hostile bytes."""

from __future__ import annotations

import json

import pytest

from syncline.confidential import sealing
from syncline.confidential.manifest import (
    MAX_ENVELOPES,
    Enclave,
    ManifestError,
    SealedDatasetManifest,
    new_manifest,
    open_envelope,
    seal_dataset,
    with_enclaves,
)
from syncline.confidential.sealing import VALIDATION_INDEX

SPEC_HASH = b"\x5e" * 32
MEASUREMENT = b"\x4d" * 32
SHARDS = [b"shard zero: the quick brown fox", b"shard one: jumps over", b"shard two: the lazy dog"]
VALIDATION = b"validation: held out"


def _enclave(role: str) -> tuple[bytes, Enclave]:
    sk, pk = sealing.generate_enclave_keypair()
    return sk, Enclave(pk, MEASUREMENT, role)


@pytest.fixture
def sealed():
    dataset = seal_dataset(SHARDS, VALIDATION)
    (t_sk, trainer), (w_sk, witness) = _enclave("trainer"), _enclave("witness")
    manifest = with_enclaves(new_manifest(SPEC_HASH, dataset), dataset.data_keys, [trainer, witness], created_at=1700)
    return dataset, manifest, (t_sk, trainer), (w_sk, witness)


def test_round_trip_and_content_address(sealed) -> None:
    dataset, manifest, (t_sk, _), (w_sk, _) = sealed
    raw = manifest.canonical_bytes()
    again = SealedDatasetManifest.parse(raw)
    assert again == manifest and again.manifest_hash == manifest.manifest_hash
    assert manifest.manifest_hash.startswith("0x") and len(manifest.manifest_hash) == 66
    # trainers: 3 training shards; witnesses: 3 + the validation shard
    assert len(manifest.envelopes) == 3 + 4
    row = json.loads(raw)["envelopes"][0]
    assert set(row) == {
        "shard_index",
        "shard_ciphertext_hash",
        "shard_ciphertext_bytes",
        "wrapped_data_key",
        "wrap_alg",
        "enclave_pubkey",
        "enclave_measurements_hex",
        "created_at",
    }
    assert row["wrap_alg"] == "hpke-x25519-hkdf-sha256-aes-256-gcm"
    for i, plaintext in enumerate(SHARDS):
        assert open_envelope(manifest, dataset.blobs[i], i, t_sk) == plaintext
        assert open_envelope(manifest, dataset.blobs[i], i, w_sk) == plaintext
    assert open_envelope(manifest, dataset.validation_blob, VALIDATION_INDEX, w_sk) == VALIDATION
    with pytest.raises(ManifestError, match="no envelope"):  # trainers never see the validation shard
        open_envelope(manifest, dataset.validation_blob, VALIDATION_INDEX, t_sk)


def test_an_enclave_without_an_envelope_cannot_read_a_shard(sealed) -> None:
    dataset, manifest, *_ = sealed
    outsider_sk, outsider = _enclave("trainer")
    with pytest.raises(ManifestError, match="no envelope"):
        open_envelope(manifest, dataset.blobs[0], 0, outsider_sk)
    # even a forged envelope row naming the outsider's key holds a wrapped key it cannot open
    stolen = next(e for e in manifest.envelopes if e.shard_index == 0)
    from dataclasses import replace

    forged = replace(manifest, envelopes=(*manifest.envelopes, replace(stolen, enclave_pubkey=outsider.pubkey)))
    with pytest.raises(sealing.SealingError, match="cannot unwrap"):
        open_envelope(forged, dataset.blobs[0], 0, outsider_sk)


def test_a_swapped_blob_is_refused(sealed) -> None:
    dataset, manifest, (t_sk, _), _ = sealed
    with pytest.raises(ManifestError, match="not the manifest's ciphertext hash"):
        open_envelope(manifest, dataset.blobs[1], 0, t_sk)


def test_late_enrollee_gets_envelopes_without_reencrypting(sealed) -> None:
    dataset, manifest, *_ = sealed
    late_sk, late = _enclave("trainer")
    later = with_enclaves(manifest, dataset.data_keys, [late], created_at=1800)
    assert later.shards == manifest.shards and later.validation == manifest.validation
    assert {e.shard_ciphertext_hash for e in later.envelopes} == {e.shard_ciphertext_hash for e in manifest.envelopes}
    assert set(manifest.envelopes) <= set(later.envelopes)  # old envelopes unchanged
    assert len(later.envelopes) == len(manifest.envelopes) + 3
    assert later.manifest_hash != manifest.manifest_hash
    for i, plaintext in enumerate(SHARDS):  # the same ciphertext blobs open for the new enclave
        assert open_envelope(later, dataset.blobs[i], i, late_sk) == plaintext
    # adding the same enclave again adds nothing
    assert with_enclaves(later, dataset.data_keys, [late], created_at=1900) == later


def test_missing_data_key_is_one_line(sealed) -> None:
    _, manifest, *_ = sealed
    _, late = _enclave("trainer")
    with pytest.raises(ManifestError, match="no data key for shard 0"):
        with_enclaves(manifest, {}, [late], created_at=1)


def _mutated(manifest: SealedDatasetManifest, edit) -> bytes:
    data = json.loads(manifest.canonical_bytes())
    edit(data)
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


HOSTILE = [
    ("unknown field", lambda d: d.update(extra=1), "unknown field"),
    ("missing field", lambda d: d.pop("dataset_id"), "missing field"),
    ("bad version", lambda d: d.update(version=2), "version"),
    ("bool version", lambda d: d.update(version=True), "version"),
    ("short hash", lambda d: d["shard_ciphertext_hashes"].__setitem__(0, "0x12"), r"shard_ciphertext_hashes\[0\]"),
    ("upper hex", lambda d: d.update(dataset_id=d["dataset_id"].upper().replace("0X", "0x")), "dataset_id"),
    ("size mismatch", lambda d: d["shard_ciphertext_bytes"].pop(), "one entry per shard"),
    ("string size", lambda d: d["shard_ciphertext_bytes"].__setitem__(0, "12"), r"shard_ciphertext_bytes\[0\]"),
    ("wrong alg", lambda d: d["envelopes"][0].update(wrap_alg="rsa"), r"envelopes\[0\].wrap_alg"),
    ("short wrapped key", lambda d: d["envelopes"][0].update(wrapped_data_key="0x00"), "wrapped_data_key"),
    ("bad pubkey", lambda d: d["envelopes"][1].update(enclave_pubkey=7), r"envelopes\[1\].enclave_pubkey"),
    ("no measurement", lambda d: d["envelopes"][0].update(enclave_measurements_hex=[]), "at least one"),
    ("many measurements", lambda d: d["envelopes"][0].update(enclave_measurements_hex=[f"0x{0:064x}"] * 17), "limit"),
    ("shard out of range", lambda d: d["envelopes"][0].update(shard_index=300), "neither a shard"),
    ("shard not in manifest", lambda d: d["envelopes"][0].update(shard_index=9), "not a shard of this manifest"),
    ("hash differs", lambda d: d["envelopes"][0].update(shard_ciphertext_hash="0x" + "ab" * 32), "differs"),
    ("duplicate", lambda d: d["envelopes"].append(d["envelopes"][0]), "second envelope"),
    ("envelope not object", lambda d: d["envelopes"].__setitem__(0, [1]), r"envelopes\[0\]: expected an object"),
    ("too many envelopes", lambda d: d.update(envelopes=[0] * (MAX_ENVELOPES + 1)), "exceed the limit"),
]


@pytest.mark.parametrize("name,edit,message", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_manifest_is_refused_in_one_line(sealed, name, edit, message) -> None:
    _, manifest, *_ = sealed
    with pytest.raises(ManifestError, match=message) as info:
        SealedDatasetManifest.parse(_mutated(manifest, edit))
    assert "\n" not in str(info.value)


def test_size_nesting_and_canonical_form_are_bounded(sealed) -> None:
    _, manifest, *_ = sealed
    with pytest.raises(ManifestError, match=r"exceeds|too large|bytes"):
        SealedDatasetManifest.parse(b" " * (16 << 20) + b"{}")
    with pytest.raises(ManifestError, match=r"deep|nest"):
        SealedDatasetManifest.parse(b"[" * 50 + b"]" * 50)
    with pytest.raises(ManifestError):
        SealedDatasetManifest.parse(b"\xff\xfe")
    with pytest.raises(ManifestError, match="expected an object"):
        SealedDatasetManifest.parse(b"[]")
    pretty = json.dumps(json.loads(manifest.canonical_bytes()), indent=1, sort_keys=True).encode()
    with pytest.raises(ManifestError, match="canonical"):
        SealedDatasetManifest.parse(pretty)


def test_seal_dataset_bounds_shards_to_what_readers_fetch() -> None:
    with pytest.raises(ManifestError, match="shard 1: 0 bytes"):
        seal_dataset([b"x", b""], None)
    with pytest.raises(ManifestError, match=r"1\.\.256"):
        seal_dataset([], None)
