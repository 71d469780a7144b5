"""The noise commitment bound by ``checkpointRoot`` (docs/protocol.md §12.10) and the opening blob:
a manifest without ``noise`` is exactly as before; with it, the root binds the commitment (another
commitment gives another root); an opening that is not the committed one is refused; hostile
opening bytes are refused with one line naming the field."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from eth_account import Account

from syncline.blobstore import LocalBlobStore
from syncline.blobstore.store import put_signed
from syncline.confidential.keystore import new_enclave_key
from syncline.court.referee import blob_openings
from syncline.privacy.noise import NoiseSeedError, RoundNoise
from syncline.privacy.opening import MAGIC, MAX_OPENING_BYTES, encode_opening, opening_alias, parse_opening
from syncline.privacy.sealed import MAX_SEALED_OPENING_BYTES, Binding, Recipient, seal_opening
from syncline.protocol.checkpoints import CheckpointError, CheckpointManifest, checkpoint_root

H, INTERVAL = 6, 2  # 3 segments


def noise_of(secret: bytes, round_: int = 0) -> RoundNoise:
    return RoundNoise.derive(secret, task_id=7, round_=round_, fragment=1, interval=INTERVAL, inner_steps=H)


def manifest(noise: bytes | None) -> CheckpointManifest:
    hashes = tuple(bytes([i]) * 32 for i in range(4))
    return CheckpointManifest(INTERVAL, H, hashes, ("",) * 4, noise=noise)


def test_a_manifest_without_noise_encodes_and_roots_exactly_as_before() -> None:
    plain = manifest(None)
    assert plain.root == checkpoint_root(plain.hashes)
    assert b"noise" not in plain.to_json()
    assert CheckpointManifest.from_json(plain.to_json()) == plain


def test_the_root_binds_the_noise_commitment() -> None:
    n1, n2 = noise_of(b"\x01" * 32).commitment(), noise_of(b"\x02" * 32).commitment()
    bound = manifest(n1)
    assert bound.root not in (manifest(None).root, manifest(n2).root)
    parsed = CheckpointManifest.from_json(bound.to_json())
    assert parsed.noise == n1 and parsed.root == bound.root
    parsed.verify_against(bound.root)
    with pytest.raises(CheckpointError, match="root"):  # the same hashes with another commitment
        manifest(n2).verify_against(bound.root)
    with pytest.raises(CheckpointError, match="root"):  # ... or with none
        manifest(None).verify_against(bound.root)
    for bad in (b'"0x12"', b"null", b"12"):
        text = bound.to_json().replace(b'"0x' + n1.hex().encode() + b'"', bad)
        with pytest.raises(CheckpointError, match="noise"):
            CheckpointManifest.from_json(text)


def test_an_opening_opens_only_its_own_commitment() -> None:
    noise, other = noise_of(b"\x03" * 32), noise_of(b"\x04" * 32)
    for s in range(noise.segments):
        data = encode_opening(noise, s)
        opened = parse_opening(data, interval=INTERVAL, segments=noise.segments).verify(noise.commitment())
        assert opened.segment.segment == s and opened.batch_seed == noise.batch_seed
        assert opened.segment.step_seed(s * INTERVAL) == noise.step_seed(s * INTERVAL)
        with pytest.raises(NoiseSeedError, match="commitment"):  # another round's opening
            parse_opening(data, interval=INTERVAL, segments=3).verify(other.commitment())
    # the committed hashes with a different seed (a trainer choosing its opening after the fact)
    data = encode_opening(noise, 1)
    data = data[:44] + other.segment(1).seed + data[76:]
    with pytest.raises(NoiseSeedError, match="seed of segment 1 is not the committed one"):
        parse_opening(data, interval=INTERVAL, segments=3).verify(noise.commitment())
    data = encode_opening(noise, 1)
    data = data[:12] + other.batch_key + data[44:]
    with pytest.raises(NoiseSeedError, match="batch key"):
        parse_opening(data, interval=INTERVAL, segments=3).verify(noise.commitment())
    assert opening_alias(7, 0, 1, 2) == "dp-opening:7:0:1:2"


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d[:-1], "needs"),
        (lambda d: d + b"\x00", "needs"),
        (lambda d: d[:20], "header"),
        (lambda d: b"X" * 8 + d[8:], "magic"),
        (lambda d: d[:76] + struct.pack(">I", 5) + d[80:], "count"),
        (lambda d: d[:8] + struct.pack(">I", 3) + d[12:], "segment 3"),
        (lambda d: d[:8] + struct.pack(">I", 1 << 31) + d[12:], "segment"),
        (lambda d: b"\x00" * (MAX_OPENING_BYTES + 1), "limit"),
    ],
)
def test_hostile_opening_bytes_are_refused_with_one_line(mutate, field) -> None:  # type: ignore[no-untyped-def]
    data = mutate(encode_opening(noise_of(b"\x05" * 32), 0))
    with pytest.raises(NoiseSeedError, match=field) as info:
        parse_opening(data, interval=INTERVAL, segments=3)
    assert "\n" not in str(info.value)
    assert data[:8] == MAGIC or field in ("magic", "limit")


def test_the_referee_keeps_only_a_sealed_opening_of_the_bound_commitment_it_can_read(tmp_path: Path) -> None:
    """``referee.blob_openings``: the trainer's signed slot first; a hostile candidate (another
    round's opening, garbage, an oversized blob, the opening in the clear, one sealed to other keys)
    is skipped; nothing that this committee key unseals and that opens the commitment gives None
    (the referee then cannot judge: never a verdict); no key at all gives None."""
    store = LocalBlobStore(tmp_path / "blobs")
    trainer, attacker = Account.create(), Account.create()
    mine, stranger = new_enclave_key(), new_enclave_key()
    me = Recipient.of(Account.create().address, mine.pubkey)
    noise, other = noise_of(b"\x06" * 32), noise_of(b"\x06" * 32, round_=1)
    alias = opening_alias(7, 0, 1, 2)

    def sealed(n: RoundNoise, to: list[Recipient]) -> bytes:
        return seal_opening(encode_opening(n, 2), Binding(7, 0, 1, 2, n.commitment()), to)

    args = {"trainer": trainer.address, "task_id": 7, "round_": 0, "fragment": 1, "interval": INTERVAL, "segments": 3}
    find = blob_openings(store, **args, key=mine)
    assert find(2, noise.commitment()) is None  # nothing published yet
    put_signed(store, sealed(other, [me]), alias, attacker)
    put_signed(store, b"garbage", alias, Account.create())
    store.put(b"\x00" * (MAX_SEALED_OPENING_BYTES + 1), alias=alias)
    assert find(2, noise.commitment()) is None  # none of those opens the bound commitment
    put_signed(store, encode_opening(noise, 2), alias, trainer)  # the opening in the clear: refused
    assert find(2, noise.commitment()) is None
    put_signed(store, sealed(noise, [Recipient.of(Account.create().address, stranger.pubkey)]), alias, trainer)
    assert find(2, noise.commitment()) is None  # sealed to another witness only: no envelope for me
    put_signed(store, sealed(noise, [me]), alias, trainer)  # the trainer re-seals to the committee
    opened = find(2, noise.commitment())
    assert opened is not None and opened.segment.seed == noise.segment(2).seed
    assert opened.batch_key == noise.batch_key
    assert find(2, other.commitment()) is not None  # the attacker's candidate opens only its own
    assert blob_openings(store, **args, key=None)(2, noise.commitment()) is None  # no committee key
    assert blob_openings(store, **args, key=stranger)(2, noise.commitment()) is None  # not a recipient
