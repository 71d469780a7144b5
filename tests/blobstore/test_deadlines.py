"""Fetches end by a total deadline, and locators from the chain are network locators only.

Issue 10 finding 8: fetches had only a per-socket timeout, so a server trickling one byte per
timeout held a 2 s-timeout fetch beyond 20 s; and ``file://`` URIs written on chain made witnesses
read their own files. The trickle servers here are real sockets on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from syncline.blobstore import (
    BlobService,
    BlobStoreError,
    BlobUnavailable,
    HttpBlobStore,
    LocalBlobStore,
    digest_of,
    fetch_uri,
)
from syncline.cli import _publish_spec
from syncline.errors import SpecError
from syncline.protocol.spec import TrainingTaskSpec

TRICKLE_EVERY_S = 0.2


class TrickleServer:
    """Answers every connection by sending ``head`` and then ``body`` one byte per ``TRICKLE_EVERY_S``
    (each byte well within any socket timeout)."""

    def __init__(self, *, head: bytes, body: bytes) -> None:
        self.head, self.body = head, body
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(self.head)
                for i in range(len(self.body)):
                    if self.stop.wait(TRICKLE_EVERY_S):
                        return
                    conn.sendall(self.body[i : i + 1])
            except OSError:
                return

    def __enter__(self) -> TrickleServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


BODY = b"x" * 10_000
DIGEST = digest_of(BODY)
FULL_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 10000\r\n\r\n"


@pytest.fixture
def trickling_body() -> Iterator[TrickleServer]:
    with TrickleServer(head=FULL_HEAD, body=BODY) as server:
        yield server


@pytest.fixture
def trickling_headers() -> Iterator[TrickleServer]:
    with TrickleServer(head=b"", body=FULL_HEAD + BODY) as server:
        yield server


def test_a_trickling_body_is_cut_at_the_total_deadline(trickling_body: TrickleServer) -> None:
    """Before the fix this fetch read one byte per 0.2 s for 10,000 bytes (about 33 minutes)."""
    started = time.monotonic()
    with pytest.raises(BlobUnavailable, match=r"deadline of 1\.5 s"):
        fetch_uri(
            f"{trickling_body.url}/blobs/{DIGEST}",
            expected_digest=DIGEST,
            max_bytes=20_000,
            timeout_s=1.0,
            deadline_s=1.5,
        )
    assert 1.4 <= time.monotonic() - started < 3.0


def test_trickling_headers_are_cut_at_the_default_deadline(trickling_headers: TrickleServer) -> None:
    """The default deadline is the socket timeout plus max_bytes at 1 MiB/s: here about 1 s."""
    started = time.monotonic()
    with pytest.raises(BlobUnavailable, match="deadline"):
        fetch_uri(f"{trickling_headers.url}/blobs/{DIGEST}", expected_digest=DIGEST, max_bytes=20_000, timeout_s=1.0)
    assert time.monotonic() - started < 3.0


def test_the_blob_service_client_has_a_total_deadline(trickling_headers: TrickleServer) -> None:
    client = HttpBlobStore(trickling_headers.url, timeout_s=1.0, max_bytes=20_000)
    started = time.monotonic()
    with pytest.raises(BlobUnavailable, match="deadline"):
        client.resolve("some-alias")
    with pytest.raises(BlobUnavailable, match="deadline"):
        client.get(DIGEST)
    assert not client.healthy()
    assert time.monotonic() - started < 9.0


def test_file_and_other_local_locators_are_refused(tmp_path: Path) -> None:
    """Before the fix a file:// URI written on chain made every witness read its own file."""
    store = LocalBlobStore(tmp_path / "store")
    ref = store.put(b"a local secret")
    other = LocalBlobStore(tmp_path / "other")
    client = HttpBlobStore("http://127.0.0.1:9")  # refused before any connection
    for reader in (other, client):
        for uri in (ref.uri, f"FILE://{ref.uri[7:]}", "file://localhost/etc/hostname"):
            with pytest.raises(BlobStoreError, match=r"refusing file:// locator .* must be http") as err:
                reader.fetch(uri, expected_digest=ref.digest, max_bytes=1000)
            assert "\n" not in str(err.value)
        for uri in ("ftp://127.0.0.1/x", "data:,hello", "/etc/hostname", "gopher://x/y"):
            with pytest.raises(BlobStoreError, match="unsupported URI scheme"):
                reader.fetch(uri, expected_digest=ref.digest, max_bytes=1000)
    # A store reads its own file for the digest (the directory its operator configured), nothing else.
    assert store.fetch(ref.uri, expected_digest=ref.digest, max_bytes=1000) == b"a local secret"
    with pytest.raises(BlobStoreError, match="refusing file://"):
        store.fetch(ref.uri, expected_digest=digest_of(b"another blob"), max_bytes=1000)
    # A path the operator configured is read when the caller says so.
    assert fetch_uri(ref.uri, expected_digest=ref.digest, max_bytes=1000, allow_local=True) == b"a local secret"


def test_post_task_publishes_the_spec_instead_of_writing_a_file_uri(
    tmp_path: Path, offline_spec_factory: Callable[..., TrainingTaskSpec]
) -> None:
    """Before the fix ``syncline train post-task`` without --spec-uri wrote a file:// URI on chain."""
    spec = offline_spec_factory()
    with pytest.raises(SpecError, match="pass --spec-uri http"):
        _publish_spec(argparse.Namespace(blob_store=None), spec)
    with BlobService(LocalBlobStore(tmp_path / "blobs")) as service:
        uri = _publish_spec(argparse.Namespace(blob_store=service.url), spec)
        assert uri.startswith(service.url + "/blobs/")
        fetched = HttpBlobStore(service.url).fetch(uri, expected_digest=spec.spec_hash, max_bytes=1 << 20)
        assert TrainingTaskSpec.from_artifact(fetched) == spec
