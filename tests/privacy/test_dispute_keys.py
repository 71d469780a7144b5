"""Hostile X25519 keys (issue 26, items 5 and 9): a witness can register any 32 bytes as its
dispute key, and a sealed opening is anyone's bytes. One shared check refuses every small-order or
non-canonical u-coordinate (RFC 7748 / libsodium's blocklist, little-endian), sealing to a committee
skips a bad recipient and still seals to the others, the trainer's path from the chain's keys to
the published blob survives one, and unsealing a tampered envelope fails with the module's error."""

from __future__ import annotations

import pytest
from eth_account import Account

from syncline.confidential.keystore import new_enclave_key
from syncline.confidential.sealing import (
    SealingError,
    X25519KeyError,
    check_x25519_public_key,
    generate_enclave_keypair,
    hpke_wrap_key,
    unwrap_data_key,
    wrap_data_key,
)
from syncline.privacy.committee import CommitteeKeys
from syncline.privacy.noise import RoundNoise
from syncline.privacy.opening import encode_opening
from syncline.privacy.sealed import (
    _HEADER,
    ADDRESS_BYTES,
    X25519_KEY_BYTES,
    Binding,
    Recipient,
    SealedOpeningError,
    parse_sealed_opening,
    seal_opening,
    unseal_opening,
)

P = 2**255 - 19
ORDER_8 = (
    325606250916557431795983626356110631294008115727848805560023387167927233504,
    39382357235489614581723060781553021112529911719440698176882885853963445705823,
)
SMALL_ORDER = (0, 1, *ORDER_8, P - 1)
NON_CANONICAL = (P, P + 1, P + 18, 2**255, 2**255 + 1, 2**256 - 1)
BAD_KEYS = [u.to_bytes(32, "little") for u in (*SMALL_ORDER, *NON_CANONICAL)]

NOISE = RoundNoise.derive(b"\x05" * 32, task_id=3, round_=2, fragment=0, interval=2, inner_steps=4)
BINDING = Binding(3, 2, 0, 1, NOISE.commitment())
OPENING = encode_opening(NOISE, 1)


def test_the_blocklist_is_little_endian_and_matches_libsodium() -> None:
    # libsodium's has_small_order table, as bytes: the order-8 points start e0 eb.. and 5f 9c..
    assert ORDER_8[0].to_bytes(32, "little").hex().startswith("e0eb7a7c3b41b8ae")
    assert ORDER_8[1].to_bytes(32, "little").hex().startswith("5f9c95bca3508c24")
    for key in BAD_KEYS:
        with pytest.raises(X25519KeyError):
            check_x25519_public_key(key)
    # Byte order: the bytes whose big-endian reading is 1 are u = 2^248, a fine u-coordinate.
    assert check_x25519_public_key((1).to_bytes(32, "big")) == (1).to_bytes(32, "big")
    assert check_x25519_public_key((P - 2).to_bytes(32, "little"))  # the largest canonical value
    _, pub = generate_enclave_keypair()
    assert check_x25519_public_key(pub) == pub
    for junk in (b"", b"\x09" * 31, b"\x09" * 33, None, "09" * 32, 9):
        with pytest.raises(X25519KeyError):
            check_x25519_public_key(junk)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", BAD_KEYS[:3])
def test_wrapping_to_a_bad_key_is_a_one_line_sealing_error(bad: bytes) -> None:
    with pytest.raises(SealingError, match="X25519"):
        hpke_wrap_key(b"\x01" * 32, bad, b"info")
    with pytest.raises(SealingError, match="X25519"):
        wrap_data_key(b"\x01" * 32, bad, b"\x02" * 32, 0, b"\x03" * 32)


def test_unwrapping_a_shard_key_whose_enc_is_low_order_is_a_one_line_sealing_error() -> None:
    priv, pub = generate_enclave_keypair()
    binding = (b"\x02" * 32, 0, b"\x03" * 32)
    wrapped = wrap_data_key(b"\x01" * 32, pub, *binding)
    assert unwrap_data_key(wrapped, priv, *binding) == b"\x01" * 32
    for bad in BAD_KEYS[:5]:
        with pytest.raises(SealingError, match="shard 0: wrapped key's enc"):
            unwrap_data_key(bad + wrapped[32:], priv, *binding)


def _addresses(n: int) -> list[str]:
    return sorted((Account.create().address for _ in range(n)), key=str.lower)


@pytest.mark.parametrize("bad", BAD_KEYS)
def test_one_low_order_recipient_among_good_ones_is_skipped_and_the_others_still_read_it(bad: bytes) -> None:
    keys = [new_enclave_key() for _ in range(3)]
    addresses = _addresses(4)
    recipients = [Recipient.of(a, k.pubkey) for a, k in zip(addresses, keys, strict=False)]
    recipients.insert(1, Recipient.of(addresses[3], bad))
    sealed = seal_opening(OPENING, BINDING, recipients)
    parsed = parse_sealed_opening(sealed)
    assert parsed.recipient_keys() == {k.pubkey for k in keys}
    for key in keys:
        assert unseal_opening(sealed, key.private_key, BINDING) == OPENING


def test_a_copied_key_is_sealed_to_once_and_only_its_holder_reads_it() -> None:
    """The chain no longer refuses a witness registering another's key (no lock-out): the copy
    gains the copier nothing, the opening is sealed once to the key and only its holder opens it."""
    holder, other = new_enclave_key(), new_enclave_key()
    a, b, c = sorted((Account.create().address for _ in range(3)), key=str.lower)
    sealed = seal_opening(
        OPENING,
        BINDING,
        [Recipient.of(a, holder.pubkey), Recipient.of(b, holder.pubkey), Recipient.of(c, other.pubkey)],
    )
    assert parse_sealed_opening(sealed).recipient_keys() == {holder.pubkey, other.pubkey}
    assert unseal_opening(sealed, holder.private_key, BINDING) == OPENING
    assert unseal_opening(sealed, other.private_key, BINDING) == OPENING


def test_the_trainers_sealing_path_from_chain_keys_survives_a_low_order_key() -> None:
    """What the trainer's spot-check service does (``_publish_opening``): read the committee's keys
    from the chain (``CommitteeKeys``) and seal to them. A witness that registered u = 1 is left
    out (logged once, read once) and every other witness reads the opening."""
    keys = [new_enclave_key() for _ in range(2)]
    addresses = _addresses(3)
    onchain = {addresses[0]: keys[0].pubkey, addresses[1]: (1).to_bytes(32, "little"), addresses[2]: keys[1].pubkey}
    reads: list[str] = []

    def key_of(w: str) -> bytes:
        reads.append(w)
        return onchain[w]

    committee = CommitteeKeys(addresses, key_of)
    recipients = committee.recipients()
    assert {r.pubkey for r in recipients} == {k.pubkey for k in keys}
    sealed = seal_opening(OPENING, BINDING, recipients)
    for key in keys:
        assert unseal_opening(sealed, key.private_key, BINDING) == OPENING
    reads.clear()
    assert committee.recipients() == recipients and committee.complete
    assert reads == []  # the bad key is final too: not read (nor logged) again


def test_unsealing_a_tampered_low_order_envelope_raises_the_modules_error() -> None:
    key = new_enclave_key()
    address = Account.create().address
    sealed = bytearray(seal_opening(OPENING, BINDING, [Recipient.of(address, key.pubkey)]))
    enc_at = _HEADER + ADDRESS_BYTES + X25519_KEY_BYTES
    for bad in BAD_KEYS[:5]:
        sealed[enc_at : enc_at + 32] = bad
        with pytest.raises(SealedOpeningError) as info:
            unseal_opening(bytes(sealed), key.private_key, BINDING)
        assert "\n" not in str(info.value)


def test_a_sealed_opening_listing_a_low_order_recipient_is_refused_when_parsed() -> None:
    key = new_enclave_key()
    address = Account.create().address
    sealed = bytearray(seal_opening(OPENING, BINDING, [Recipient.of(address, key.pubkey)]))
    at = _HEADER + ADDRESS_BYTES
    sealed[at : at + 32] = (1).to_bytes(32, "little")
    with pytest.raises(SealedOpeningError, match="recipient 0"):
        parse_sealed_opening(bytes(sealed))
