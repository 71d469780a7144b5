"""Announced signed messages: round trip through a real blob store, and every bad input refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from eth_account import Account

from syncline.blobstore import LocalBlobStore
from syncline.protocol.signed_messages import Commitment, Domain, Vote, sign
from syncline.run.gossip import (
    GossipError,
    announce_commitment,
    announce_vote,
    decode_commitment,
    decode_vote,
    encode_commitment,
    read_commitment,
    read_vote,
)

DOMAIN = Domain(31337, "0x" + "ab" * 20)
KEY = Account.from_key("0x" + "42" * 32)
COMMITMENT = Commitment(7, 3, 1, b"\x01" * 32, b"\x02" * 32, b"\x03" * 32, "http://blobs.example/0x01")
VOTE = Vote(7, 3, b"\x06" * 32, b"\x04" * 32, b"\x05" * 32, 0b101, 2_345_678)


def test_round_trip_through_the_blob_store(tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path)
    announce_commitment(blobs, COMMITMENT, sign(KEY, DOMAIN, COMMITMENT))
    announce_vote(blobs, VOTE, sign(KEY, DOMAIN, VOTE), KEY.address)
    got = read_commitment(blobs, DOMAIN, 7, 3, 1)
    assert got is not None and got.message == COMMITMENT and got.signer == KEY.address
    vote = read_vote(blobs, DOMAIN, 7, 3, KEY.address)
    assert vote is not None and vote.message == VOTE and vote.signer == KEY.address
    assert read_commitment(blobs, DOMAIN, 7, 3, 2) is None
    assert read_vote(blobs, DOMAIN, 7, 4, KEY.address) is None


def test_a_signature_from_another_domain_recovers_someone_else() -> None:
    other = Domain(1, DOMAIN.verifying_contract)
    data = encode_commitment(COMMITMENT, sign(KEY, other, COMMITMENT))
    assert decode_commitment(data, DOMAIN).signer != KEY.address


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(type="Vote"), "not a Commitment"),
        (lambda d: d.update(round=-1), "round must be a non-negative integer"),
        (lambda d: d.update(fragment=True), "fragment must be a non-negative integer"),
        (lambda d: d.update(chunkRoot="0x1234"), "chunkRoot must be 32 bytes"),
        (lambda d: d.update(payloadHash="nothex"), "payloadHash must be a 0x-hex string"),
        (lambda d: d.update(uri=5), "uri must be a string"),
        (lambda d: d.update(uri="http://dead.invalid/x"), None),
        (lambda d: d.update(signature="0x" + "00" * 65), "signature does not recover"),
    ],
)
def test_malformed_commitments_are_one_line_errors(mutate: object, message: str | None) -> None:
    obj = json.loads(encode_commitment(COMMITMENT, sign(KEY, DOMAIN, COMMITMENT)))
    mutate(obj)  # type: ignore[operator]
    if message is None:  # well formed, but the signed uri was swapped: it is someone else's message
        assert decode_commitment(json.dumps(obj).encode(), DOMAIN).signer != KEY.address
        return
    with pytest.raises(GossipError, match=message) as err:
        decode_commitment(json.dumps(obj).encode(), DOMAIN)
    assert "\n" not in str(err.value)


def test_oversized_and_non_json_messages_are_refused() -> None:
    with pytest.raises(GossipError, match="exceeds"):
        decode_vote(b"{" + b" " * 5000 + b"}", DOMAIN)
    with pytest.raises(GossipError, match="not JSON"):
        decode_vote(b"\xff\xfe", DOMAIN)


def test_a_garbage_announcement_reads_as_absent(tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path)
    blobs.put(b"not a message", alias="gossip:commitment:7:3:1")
    assert read_commitment(blobs, DOMAIN, 7, 3, 1) is None


def test_a_later_garbage_announcement_does_not_hide_the_signed_one(tmp_path: Path) -> None:
    """Anyone may add a candidate under a gossip alias; the announced, validly signed message is
    still read (it used to be hidden by the last writer: an equivocation then went unproven)."""
    blobs = LocalBlobStore(tmp_path)
    announce_commitment(blobs, COMMITMENT, sign(KEY, DOMAIN, COMMITMENT))
    blobs.put(b"not a message", alias="gossip:commitment:7:3:1")
    blobs.put(b'{"type": "Commitment"}', alias="gossip:commitment:7:3:1")
    got = read_commitment(blobs, DOMAIN, 7, 3, 1)
    assert got is not None and got.message == COMMITMENT


def test_a_vote_signs_its_previous_root_and_metric() -> None:
    from syncline.run.gossip import encode_vote

    obj = json.loads(encode_vote(VOTE, sign(KEY, DOMAIN, VOTE)))
    assert decode_vote(json.dumps(obj).encode(), DOMAIN).signer == KEY.address
    for field, value in (("metric", 1), ("prevStateRoot", "0x" + "07" * 32)):
        changed = {**obj, field: value}
        assert decode_vote(json.dumps(changed).encode(), DOMAIN).signer != KEY.address, field
    with pytest.raises(GossipError, match="metric must be a non-negative integer"):
        decode_vote(json.dumps({**obj, "metric": -1}).encode(), DOMAIN)
