"""The trainer's outbox against a real blob service that goes down and comes back.

Issue 10 (no honest party is slashed by an outage): before the outbox, a trainer whose upload
failed raised out of its tick and never sent its commitment; a blob-store outage through the
commit window of ``maxMissedRounds + 1`` rounds evicted and slashed it. Now the upload waits on
disk and the commitment (which binds digests, not uploads) goes out on time.
"""

from __future__ import annotations

import socket
from pathlib import Path

from eth_account import Account

from syncline.blobstore import BlobService, HttpBlobStore, LocalBlobStore, digest_of
from syncline.blobstore.store import sign_alias
from syncline.trainer.outbox import Outbox


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_uploads_wait_out_an_outage_and_land_with_their_signed_aliases(tmp_path: Path) -> None:
    port = _free_port()
    backing = LocalBlobStore(tmp_path / "service")
    client = HttpBlobStore(f"http://127.0.0.1:{port}", timeout_s=2.0)
    outbox = Outbox(client, tmp_path / "outbox")
    owner = Account.create()
    payload, manifest = b"payload bytes" * 100, b'{"manifest": 1}'
    alias = "manifest:1:0:0"

    # The service is down: put still answers the reference the commitment needs.
    ref = outbox.put(payload)
    assert (ref.digest, ref.size) == (digest_of(payload), len(payload))
    assert ref.uri == client.uri_for(ref.digest)
    outbox.put(manifest, alias=alias, alias_signature=sign_alias(owner, alias, digest_of(manifest)))
    assert outbox.flush() == 2  # still down: nothing lost, nothing raised

    # A restarted outbox (the trainer was restarted meanwhile) finds the spool on disk.
    outbox = Outbox(client, tmp_path / "outbox")
    with BlobService(backing, port=port):
        assert outbox.flush() == 0
        assert client.get(ref.digest) == payload
        # the signed alias landed in its owner's slot
        assert client.candidates(alias, signers=[owner.address.lower()])[0] == digest_of(manifest)
    assert list((tmp_path / "outbox" / "pending").iterdir()) == []


def test_a_reachable_store_is_used_directly_and_own_payloads_are_kept_and_pruned(tmp_path: Path) -> None:
    with BlobService(LocalBlobStore(tmp_path / "service")) as service:
        client = HttpBlobStore(service.url, timeout_s=2.0)
        outbox = Outbox(client, tmp_path / "outbox")
        ref = outbox.put(b"x" * 10)
        assert client.get(ref.digest) == b"x" * 10
        assert outbox.flush() == 0
    for round_ in range(5):
        outbox.keep_own(round_, b"round %d" % round_)
    assert outbox.own(digest_of(b"round 3")) == b"round 3"
    outbox.prune_own(3)
    assert outbox.own(digest_of(b"round 2")) is None
    assert outbox.own(digest_of(b"round 4")) == b"round 4"


def test_a_sealed_payload_is_uploaded_only_when_revealed_and_survives_an_outage(tmp_path: Path) -> None:
    """Commit, then reveal (issue 27 item 2): a sealed payload answers the reference to commit but
    is not on the store until its round is revealed; a reveal during an outage spools it, and the
    next flush uploads it. Later rounds stay sealed."""
    port = _free_port()
    backing = LocalBlobStore(tmp_path / "service")
    client = HttpBlobStore(f"http://127.0.0.1:{port}", timeout_s=2.0)
    outbox = Outbox(client, tmp_path / "outbox")
    r0, r1 = b"round 0 payload" * 50, b"round 1 payload" * 50
    with BlobService(backing, port=port):
        ref0 = outbox.seal(0, r0)
        assert (ref0.digest, ref0.size, ref0.uri) == (digest_of(r0), len(r0), client.uri_for(digest_of(r0)))
        ref1 = outbox.seal(1, r1)
        assert not client.has(ref0.digest) and not client.has(ref1.digest)  # sealed: nothing to copy
        assert outbox.own(ref0.digest) == r0  # kept for availability demands
        assert outbox.sealed_rounds() == [0, 1]
        assert outbox.reveal(0) == 1
        assert client.get(ref0.digest) == r0 and not client.has(ref1.digest)
        assert outbox.sealed_rounds() == [1]
    # The store is down when round 1 closes: the reveal spools it; the flush after the outage sends it.
    assert outbox.reveal(1) == 1
    assert outbox.sealed_rounds() == []
    assert outbox.flush() == 1
    with BlobService(backing, port=port):
        assert outbox.flush() == 0
        assert client.get(ref1.digest) == r1
