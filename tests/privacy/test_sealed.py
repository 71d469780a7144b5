"""A DP noise opening sealed to the witness committee (docs/protocol.md §12.10): it opens for each
recipient's key and no other; it is bound to its (task, round, fragment, segment) and to the noise
commitment the submission's root binds; every hostile form of the sealed blob is refused in one
line naming the field; the committee's keys come from the chain as they appear; a witness's
dispute key lives encrypted in its state dir."""

from __future__ import annotations

import dataclasses
import os
import stat
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from eth_account import Account

from syncline.confidential.keystore import new_enclave_key
from syncline.errors import KeyConfigError
from syncline.privacy.committee import DISPUTE_KEYSTORE, CommitteeKeys, load_or_create_dispute_key
from syncline.privacy.noise import RoundNoise
from syncline.privacy.opening import encode_opening, parse_opening
from syncline.privacy.sealed import (
    _HEADER,
    MAGIC,
    MAX_RECIPIENTS,
    MAX_SEALED_OPENING_BYTES,
    RECIPIENT_BYTES,
    Binding,
    Recipient,
    SealedOpeningError,
    parse_sealed_opening,
    seal_opening,
    unseal_opening,
)

H, INTERVAL = 6, 2  # 3 segments
NOISE = RoundNoise.derive(b"\x09" * 32, task_id=7, round_=4, fragment=1, interval=INTERVAL, inner_steps=H)
BINDING = Binding(7, 4, 1, 2, NOISE.commitment())
KEYS = [new_enclave_key() for _ in range(3)]
ADDRESSES = sorted((Account.create().address for _ in range(3)), key=str.lower)  # byte order, as sealed
COMMITTEE = [Recipient.of(a, k.pubkey) for a, k in zip(ADDRESSES, KEYS, strict=True)]
OPENING = encode_opening(NOISE, 2)


def test_every_recipient_unseals_the_opening_and_it_verifies_against_the_bound_commitment() -> None:
    sealed = seal_opening(OPENING, BINDING, COMMITTEE)
    for key in KEYS:
        plain = unseal_opening(sealed, key.private_key, BINDING)
        assert plain == OPENING
        revealed = parse_opening(plain, interval=INTERVAL, segments=3).verify(NOISE.commitment())
        assert revealed.segment.seed == NOISE.segment(2).seed and revealed.batch_key == NOISE.batch_key
    parsed = parse_sealed_opening(sealed)
    assert [r.address.hex() for r, _ in parsed.recipients] == [a[2:].lower() for a in ADDRESSES]
    assert parsed.recipient_keys() == {k.pubkey for k in KEYS}


def test_the_blob_holds_neither_the_seed_nor_the_batch_key_and_a_non_recipient_cannot_read_it() -> None:
    sealed = seal_opening(OPENING, BINDING, COMMITTEE)
    assert NOISE.segment(2).seed not in sealed and NOISE.batch_key not in sealed and OPENING[:8] not in sealed
    with pytest.raises(SealedOpeningError, match="no envelope for key"):
        unseal_opening(sealed, new_enclave_key().private_key, BINDING)
    # a non-recipient that lists itself beside the real envelopes still cannot unwrap the data key
    parsed = parse_sealed_opening(sealed)
    outsider = new_enclave_key()
    (_, wrapped) = parsed.recipients[0]
    forged = _replace_row(sealed, 0, parsed.recipients[0][0].address + outsider.pubkey + wrapped)
    with pytest.raises(SealedOpeningError, match="cannot unwrap"):
        unseal_opening(forged, outsider.private_key, BINDING)


def test_sealed_to_nobody_is_a_valid_blob_that_nobody_reads() -> None:
    sealed = seal_opening(OPENING, BINDING, [])
    assert parse_sealed_opening(sealed).recipients == ()
    with pytest.raises(SealedOpeningError, match="no envelope"):
        unseal_opening(sealed, KEYS[0].private_key, BINDING)


@pytest.mark.parametrize(
    "field, other",
    [
        ("segment", dataclasses.replace(BINDING, segment=1)),
        ("round", dataclasses.replace(BINDING, round_=5)),
        ("fragment", dataclasses.replace(BINDING, fragment=0)),
        ("task_id", dataclasses.replace(BINDING, task_id=8)),
        ("commitment", dataclasses.replace(BINDING, commitment=b"\x01" * 32)),
    ],
)
def test_an_opening_sealed_for_another_segment_round_or_submission_is_refused(field: str, other: Binding) -> None:
    """The header names the binding (refused by name); and rewriting the header to the disputed
    binding does not help: the HPKE info and the AES-GCM AAD bind it."""
    sealed = seal_opening(OPENING, other, COMMITTEE)
    with pytest.raises(SealedOpeningError, match=f"sealed opening {field}"):
        unseal_opening(sealed, KEYS[0].private_key, BINDING)
    relabelled = MAGIC + BINDING.encode() + sealed[8 + len(BINDING.encode()) :]
    with pytest.raises(SealedOpeningError, match="cannot unwrap"):
        unseal_opening(relabelled, KEYS[0].private_key, BINDING)


def test_a_ciphertext_moved_under_another_binding_does_not_authenticate() -> None:
    """Even with a data key wrapped for the disputed binding, the ciphertext of another segment's
    opening fails AES-GCM: the AAD binds it too."""
    mine = parse_sealed_opening(seal_opening(OPENING, BINDING, COMMITTEE))
    theirs = parse_sealed_opening(seal_opening(encode_opening(NOISE, 1), dataclasses.replace(BINDING, segment=1), []))
    spliced = seal_opening(OPENING, BINDING, COMMITTEE)
    at = len(spliced) - len(mine.ciphertext)
    assert len(theirs.ciphertext) == len(mine.ciphertext)
    spliced = spliced[:at] + theirs.ciphertext
    with pytest.raises(SealedOpeningError, match="does not authenticate"):
        unseal_opening(spliced, KEYS[0].private_key, BINDING)


def _replace_row(sealed: bytes, i: int, row: bytes) -> bytes:
    at = _HEADER + RECIPIENT_BYTES * i
    return sealed[:at] + row + sealed[at + RECIPIENT_BYTES :]


def _count(sealed: bytes, n: int) -> bytes:
    return sealed[: _HEADER - 2] + struct.pack(">H", n) + sealed[_HEADER:]


def _length_at(sealed: bytes) -> int:
    return _HEADER + RECIPIENT_BYTES * struct.unpack(">H", sealed[_HEADER - 2 : _HEADER])[0]


HOSTILE: list[tuple[str, Callable[[bytes], bytes], str]] = [
    ("empty", lambda b: b"", "shorter than its"),
    ("truncated header", lambda b: b[: _HEADER - 1], "shorter than its"),
    ("oversized", lambda b: b + b"\x00" * MAX_SEALED_OPENING_BYTES, "more than the limit"),
    ("magic", lambda b: b"SYNCDPO1" + b[8:], "magic"),
    ("count too large", lambda b: _count(b, MAX_RECIPIENTS + 1), "count"),
    ("count past the end", lambda b: _count(b, 30), "recipients need"),
    ("zero address", lambda b: _replace_row(b, 1, bytes(20) + b[_HEADER + RECIPIENT_BYTES + 20 :][:112]), "address"),
    (
        "zero pubkey",
        lambda b: _replace_row(b, 1, b[_HEADER + RECIPIENT_BYTES :][:20] + bytes(32) + bytes(80)),
        "pubkey",
    ),
    (
        "unsorted",
        lambda b: _replace_row(
            _replace_row(b, 0, b[_HEADER + RECIPIENT_BYTES :][:RECIPIENT_BYTES]), 1, b[_HEADER:][:RECIPIENT_BYTES]
        ),
        "ascending",
    ),
    (
        "duplicate pubkey",
        lambda b: _replace_row(b, 1, b[_HEADER + RECIPIENT_BYTES :][:20] + b[_HEADER + 20 :][:32] + bytes(80)),
        "twice",
    ),
    ("length too small", lambda b: b[: _length_at(b)] + struct.pack(">I", 3) + b[_length_at(b) + 4 :], "length 3"),
    ("length too large", lambda b: b[: _length_at(b)] + struct.pack(">I", 1 << 30) + b[_length_at(b) + 4 :], "length"),
    ("trailing byte", lambda b: b + b"\x00", "its length"),
    ("short ciphertext", lambda b: b[:-1], "its length"),
    ("tampered ciphertext", lambda b: b[:-1] + bytes([b[-1] ^ 1]), "does not authenticate"),
    ("tampered nonce", lambda b: b[:90] + bytes([b[90] ^ 1]) + b[91:], "does not authenticate"),
    (
        "tampered envelope",
        lambda b: b[: _HEADER + 60] + bytes([b[_HEADER + 60] ^ 1]) + b[_HEADER + 61 :],
        "cannot unwrap",
    ),
    ("not bytes", lambda b: "text", "must be bytes"),  # type: ignore[arg-type,return-value]
]


@pytest.mark.parametrize("name, mutate, message", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_every_hostile_sealed_opening_is_refused_in_one_line_naming_the_field(
    name: str, mutate: Callable[[bytes], bytes], message: str
) -> None:
    sealed = seal_opening(OPENING, BINDING, COMMITTEE)
    with pytest.raises(SealedOpeningError, match=message) as caught:
        unseal_opening(mutate(sealed), KEYS[0].private_key, BINDING)
    text = str(caught.value)
    assert "\n" not in text and text.startswith("sealed opening"), text


def test_the_size_bound_is_checked_before_parsing() -> None:
    """A blob over the bound is refused by its length alone: whatever follows the magic."""
    with pytest.raises(SealedOpeningError, match="more than the limit"):
        parse_sealed_opening(MAGIC + b"\xff" * MAX_SEALED_OPENING_BYTES)


def test_sealing_refuses_what_it_must_not_produce() -> None:
    with pytest.raises(SealedOpeningError, match="more than"):
        seal_opening(OPENING, BINDING, [Recipient.of(Account.create().address, new_enclave_key().pubkey)] * 33)
    with pytest.raises(SealedOpeningError, match="plaintext"):
        seal_opening(b"short", BINDING, COMMITTEE)
    with pytest.raises(SealedOpeningError, match="segment"):
        seal_opening(OPENING, dataclasses.replace(BINDING, segment=1 << 32), COMMITTEE)


def test_committee_keys_come_from_the_chain_as_they_appear_and_are_read_once() -> None:
    registered: dict[str, bytes] = {ADDRESSES[1]: KEYS[1].pubkey}
    reads: list[str] = []

    def key_of(w: str) -> bytes:
        reads.append(w)
        return registered.get(w, bytes(32))

    committee = CommitteeKeys(ADDRESSES, key_of)
    assert [r.pubkey for r in committee.recipients()] == [KEYS[1].pubkey] and not committee.complete
    registered.update({ADDRESSES[0]: KEYS[0].pubkey, ADDRESSES[2]: KEYS[2].pubkey})
    assert {r.pubkey for r in committee.recipients()} == {k.pubkey for k in KEYS} and committee.complete
    reads.clear()
    committee.recipients()
    assert reads == []  # a key once registered is final (no rotation): not read again


def test_the_dispute_key_is_generated_once_encrypted_in_the_state_dir(tmp_path: Path) -> None:
    key = load_or_create_dispute_key(tmp_path, password="devnet-password", scrypt_n=1 << 12)
    path = tmp_path / DISPUTE_KEYSTORE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    text = path.read_text()
    assert key.private_key.hex() not in text and key.pubkey.hex() in text
    assert load_or_create_dispute_key(tmp_path, password="devnet-password") == key
    with pytest.raises(KeyConfigError, match="wrong password"):
        load_or_create_dispute_key(tmp_path, password="another")
    with pytest.raises(KeyConfigError, match=r"needs a password: set \$SYNCLINE_TEST_UNSET_PASSWORD"):
        load_or_create_dispute_key(tmp_path / "fresh", password_env="SYNCLINE_TEST_UNSET_PASSWORD")
    assert not (tmp_path / "fresh").exists()
