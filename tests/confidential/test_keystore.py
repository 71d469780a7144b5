"""Enclave keys and the sponsor's data keys are stored encrypted, and only decrypt with the password."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from syncline.confidential import keystore
from syncline.confidential.manifest import seal_dataset
from syncline.errors import KeyConfigError


def test_enclave_keystore_round_trip_and_never_holds_the_key_in_clear(tmp_path: Path, monkeypatch) -> None:
    key = keystore.new_enclave_key()
    path = keystore.write_enclave_keystore(key, tmp_path / "enclave.json", "correct horse")
    assert path.stat().st_mode & 0o777 == 0o600
    raw = path.read_bytes()
    assert key.private_key.hex().encode() not in raw and key.private_key not in raw
    assert json.loads(raw)["enclave_pubkey"] == "0x" + key.pubkey.hex()
    assert key.private_key.hex() not in repr(key)
    monkeypatch.setenv(keystore.ENCLAVE_PASSWORD_ENV, "correct horse")
    assert keystore.load_enclave_key(path) == key
    with pytest.raises(KeyConfigError, match="wrong password"):
        keystore.load_enclave_key(path, password="wrong")
    monkeypatch.delenv(keystore.ENCLAVE_PASSWORD_ENV)
    with pytest.raises(KeyConfigError, match="SYNCLINE_ENCLAVE_PASSWORD"):
        keystore.load_enclave_key(path)


def test_enclave_keystore_refuses_other_files(tmp_path: Path) -> None:
    (tmp_path / "eth.json").write_text(json.dumps({"crypto": {}, "version": 3}))
    with pytest.raises(KeyConfigError, match="not an enclave keystore"):
        keystore.load_enclave_key(tmp_path / "eth.json", password="x")
    (tmp_path / "big.json").write_bytes(b"{" + b" " * (70 << 10) + b"}")
    with pytest.raises(KeyConfigError):
        keystore.load_enclave_key(tmp_path / "big.json", password="x")
    with pytest.raises(KeyConfigError, match="cannot read"):
        keystore.load_enclave_key(tmp_path / "missing.json", password="x")


def test_data_key_store_round_trip(tmp_path: Path) -> None:
    dataset = seal_dataset([b"a" * 40, b"b" * 50], b"v" * 30)
    path = keystore.write_data_keys(tmp_path / "keys.json", dataset, "pw")
    raw = path.read_bytes()
    assert all(k.hex().encode() not in raw for k in dataset.data_keys.values())
    loaded = keystore.load_data_keys(path, password="pw")
    assert loaded.dataset_id == dataset.dataset_id and loaded.keys == dict(dataset.data_keys)
    assert loaded.shards == dataset.shards() and loaded.validation == dataset.validation()
    with pytest.raises(KeyConfigError, match="wrong password"):
        keystore.load_data_keys(path, password="nope")


def test_data_key_store_binding_is_authenticated_and_set_once(tmp_path: Path) -> None:
    """The StoreBinding lives inside the AES-GCM ciphertext: readable only with the password, not
    swappable by editing the file (the tag fails), bound once."""
    dataset = seal_dataset([b"a" * 40], b"v" * 30)
    mine = keystore.StoreBinding.of("0x" + "AB" * 20, "0x" + "11" * 20, ["0x" + "22" * 32, b"\x01" * 32])
    assert mine.sponsor == "0x" + "ab" * 20 and mine.measurements == ("0x" + "01" * 32, "0x" + "22" * 32)
    path = keystore.write_data_keys(tmp_path / "keys.json", dataset, "pw", binding=mine)
    assert mine.sponsor.encode() not in path.read_bytes()
    assert keystore.load_data_keys(path, password="pw").binding == mine
    doc = json.loads(path.read_text())
    ct = bytearray(bytes.fromhex(doc["ciphertext"]))
    ct[-40] ^= 1  # any byte of the binding (or anything else) flipped: refused
    (tmp_path / "edited.json").write_text(json.dumps({**doc, "ciphertext": ct.hex()}))
    with pytest.raises(KeyConfigError, match="wrong password or corrupt"):
        keystore.load_data_keys(tmp_path / "edited.json", password="pw")
    # bound once: the same binding is a no-op, another is refused; an unbound store binds
    assert keystore.bind_data_keys(path, mine, password="pw").binding == mine
    theirs = keystore.StoreBinding.of("0x" + "cd" * 20, "0x" + "11" * 20, ["0x" + "22" * 32])
    with pytest.raises(KeyConfigError, match="already bound to sponsor 0xabab"):
        keystore.bind_data_keys(path, theirs, password="pw")
    unbound = keystore.write_data_keys(tmp_path / "old.json", dataset, "pw")
    assert keystore.load_data_keys(unbound, password="pw").binding is None
    assert keystore.bind_data_keys(unbound, theirs, password="pw").binding == theirs
    loaded = keystore.load_data_keys(unbound, password="pw")
    assert loaded.binding == theirs and loaded.keys == dict(dataset.data_keys)
    with pytest.raises(KeyConfigError, match="not 20 bytes"):
        keystore.StoreBinding.of("0x1234", "0x" + "11" * 20, [])


def test_agent_enclave_from_config_files(tmp_path: Path, monkeypatch) -> None:
    from syncline.confidential.enclave import AgentEnclave, write_attestation_file

    key, other = keystore.new_enclave_key(), keystore.new_enclave_key()
    store = keystore.write_enclave_keystore(key, tmp_path / "k.json", "pw", scrypt_n=1 << 12)
    measurement, report = b"\x4d" * 32, b"\x01" * 193
    good = write_attestation_file(tmp_path / "a.json", key.pubkey, measurement, report)
    monkeypatch.setenv(keystore.ENCLAVE_PASSWORD_ENV, "pw")
    enclave = AgentEnclave.from_files(store, good)
    assert (enclave.key, enclave.measurement, enclave.report) == (key, measurement, report)
    assert key.private_key.hex() not in repr(enclave)
    with pytest.raises(KeyConfigError, match="needs enclave_attestation"):
        AgentEnclave.from_files(store, None)
    wrong = write_attestation_file(tmp_path / "b.json", other.pubkey, measurement, report)
    with pytest.raises(KeyConfigError, match="not this keystore's"):
        AgentEnclave.from_files(store, wrong)
    (tmp_path / "c.json").write_text('{"enclave_pubkey": "0x00"}')
    with pytest.raises(KeyConfigError, match="is not an attestation file"):
        AgentEnclave.from_files(store, tmp_path / "c.json")
    (tmp_path / "d.json").write_bytes(b"[" * 100 + b"]" * 100)
    with pytest.raises(KeyConfigError, match="is not an attestation file"):
        AgentEnclave.from_files(store, tmp_path / "d.json")
