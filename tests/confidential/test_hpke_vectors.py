"""HPKE through pyhpke against RFC 9180 Appendix A base-mode vectors, and Syncline's suite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyhpke import AEADId, CipherSuite, KDFId, KEMId

from syncline.confidential import sealing

VECTORS = json.loads((Path(__file__).parent / "vectors" / "rfc9180_base.json").read_text())["vectors"]


@pytest.mark.parametrize("v", VECTORS, ids=[v["section"] for v in VECTORS])
def test_rfc9180_base_mode_vector(v: dict) -> None:
    suite = CipherSuite.new(KEMId(v["kem_id"]), KDFId(v["kdf_id"]), AEADId(v["aead_id"]))
    eph = suite.kem.derive_key_pair(bytes.fromhex(v["ikmE"]))
    rcp = suite.kem.derive_key_pair(bytes.fromhex(v["ikmR"]))
    # compared as integers: pyhpke pads a P-521 scalar wider than the RFC's 66 bytes
    assert int.from_bytes(eph.private_key.to_private_bytes(), "big") == int(v["skEm"], 16)
    assert eph.public_key.to_public_bytes().hex() == v["pkEm"]
    assert int.from_bytes(rcp.private_key.to_private_bytes(), "big") == int(v["skRm"], 16)
    assert rcp.public_key.to_public_bytes().hex() == v["pkRm"]
    info = bytes.fromhex(v["info"])
    enc, sender = suite.create_sender_context(rcp.public_key, info=info, eks=eph)
    assert enc.hex() == v["enc"]
    recipient = suite.create_recipient_context(enc, rcp.private_key, info=info)
    for e in v["encryptions"]:  # sequence numbers 0, 1, 2: one seal/open each, in order
        ct = sender.seal(bytes.fromhex(e["pt"]), aad=bytes.fromhex(e["aad"]))
        assert ct.hex() == e["ct"], f"seq {e['seq']}"
        assert recipient.open(ct, aad=bytes.fromhex(e["aad"])).hex() == e["pt"]


def test_rfc9180_x25519_vector_opens_through_syncline_key_handling() -> None:
    """A.1.1's recipient key, loaded the way :mod:`sealing` loads enclave keys, derives the vector's
    public key and opens the vector's first ciphertext."""
    v = VECTORS[0]
    sk = bytes.fromhex(v["skRm"])
    assert sealing.enclave_public_key(sk).hex() == v["pkRm"]
    suite = CipherSuite.new(KEMId.DHKEM_X25519_HKDF_SHA256, KDFId.HKDF_SHA256, AEADId.AES128_GCM)
    ctx = suite.create_recipient_context(
        bytes.fromhex(v["enc"]), suite.kem.deserialize_private_key(sk), info=bytes.fromhex(v["info"])
    )
    e = v["encryptions"][0]
    assert ctx.open(bytes.fromhex(e["ct"]), aad=bytes.fromhex(e["aad"])).hex() == e["pt"]


def test_syncline_suite_is_x25519_hkdf_sha256_aes256gcm() -> None:
    assert sealing.WRAP_ALG == "hpke-x25519-hkdf-sha256-aes-256-gcm"
    assert (sealing.SUITE.kem.id, sealing.SUITE.kdf.id, sealing.SUITE.aead.id) == (
        KEMId.DHKEM_X25519_HKDF_SHA256,
        KDFId.HKDF_SHA256,
        AEADId.AES256_GCM,
    )


def test_wrap_unwrap_round_trip_and_binding() -> None:
    sk, pk = sealing.generate_enclave_keypair()
    dataset_id, ct_hash, key = b"\x11" * 32, b"\x22" * 32, sealing.new_data_key()
    wrapped = sealing.wrap_data_key(key, pk, dataset_id, 5, ct_hash)
    assert len(wrapped) == sealing.WRAPPED_KEY_BYTES
    assert sealing.unwrap_data_key(wrapped, sk, dataset_id, 5, ct_hash) == key
    # the HPKE info binds the dataset, the shard index and the ciphertext hash
    for args in ((b"\x12" * 32, 5, ct_hash), (dataset_id, 6, ct_hash), (dataset_id, 5, b"\x23" * 32)):
        with pytest.raises(sealing.SealingError, match="cannot unwrap"):
            sealing.unwrap_data_key(wrapped, sk, *args)
    other_sk, _ = sealing.generate_enclave_keypair()
    with pytest.raises(sealing.SealingError, match="cannot unwrap"):
        sealing.unwrap_data_key(wrapped, other_sk, dataset_id, 5, ct_hash)
    with pytest.raises(sealing.SealingError, match="80 bytes"):
        sealing.unwrap_data_key(wrapped[:-1], sk, dataset_id, 5, ct_hash)


def test_shard_seal_open_binds_dataset_and_index() -> None:
    key, dataset_id = sealing.new_data_key(), b"\x33" * 32
    blob = sealing.seal_shard(b"secret tokens", key, dataset_id, 2)
    assert blob.startswith(sealing.MAGIC) and b"secret tokens" not in blob
    assert sealing.open_shard(blob, key, dataset_id, 2) == b"secret tokens"
    with pytest.raises(sealing.SealingError, match="does not authenticate"):
        sealing.open_shard(blob, key, dataset_id, 3)
    with pytest.raises(sealing.SealingError, match="does not authenticate"):
        sealing.open_shard(blob, key, b"\x34" * 32, 2)
    tampered = blob[:-1] + bytes([blob[-1] ^ 1])
    with pytest.raises(sealing.SealingError, match="does not authenticate"):
        sealing.open_shard(tampered, key, dataset_id, 2)
    with pytest.raises(sealing.SealingError, match="bad magic"):
        sealing.open_shard(b"XXXXXXXX" + blob[8:], key, dataset_id, 2)
    # a fresh nonce per seal: two seals of one plaintext differ
    assert sealing.seal_shard(b"secret tokens", key, dataset_id, 2) != blob
