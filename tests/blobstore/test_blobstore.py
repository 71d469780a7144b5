"""The blob store end to end: a real BlobService on 127.0.0.1, real HTTP, real files; no mocks."""

from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from eth_account import Account
from eth_utils import keccak
from structlog.testing import capture_logs

from syncline.blobstore import (
    MAX_ANONYMOUS_CANDIDATES,
    BlobIntegrityError,
    BlobNotFound,
    BlobRef,
    BlobService,
    BlobStore,
    BlobStoreError,
    BlobTooLarge,
    BlobUnavailable,
    HttpBlobStore,
    InvalidBlobName,
    LocalBlobStore,
    alias_signer,
    digest_of,
    fetch_uri,
    put_signed,
    sign_alias,
)

MAX_BYTES = 2 * 1024 * 1024
AGENTS_DIR = Path(__file__).resolve().parents[2] / "agents"


def payload(n: int, seed: int = 0) -> bytes:
    """Deterministic pseudo-random bytes."""
    return random.Random(seed).randbytes(n)


def raw(
    url: str, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One plain HTTP request; returns status, headers and body."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=5)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def raw_socket(url: str, request: bytes) -> bytes:
    """Send raw bytes and read the answer until the server closes (or 5 s pass)."""
    parts = urllib.parse.urlsplit(url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=5) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def json_error(body: bytes) -> str:
    """The ``error`` of a one-line JSON error body."""
    assert body.endswith(b"\n") and body.count(b"\n") == 1
    obj = json.loads(body)
    assert isinstance(obj["error"], str) and obj["error"]
    return str(obj["error"])


@pytest.fixture
def store(tmp_path: Path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path / "store")


@pytest.fixture
def service(store: LocalBlobStore) -> Iterator[BlobService]:
    with BlobService(store, port=0, max_bytes=MAX_BYTES, request_timeout_s=5) as svc:
        yield svc


@pytest.fixture
def client(service: BlobService) -> HttpBlobStore:
    return HttpBlobStore(service.url, timeout_s=5)


# ---------------------------------------------------------------------- round trips


def test_put_get_round_trip_over_http(client: HttpBlobStore, service: BlobService) -> None:
    data = payload(1_500_000)  # more than one read chunk
    ref = client.put(data)
    assert ref == BlobRef(digest="0x" + keccak(data).hex(), size=len(data), uri=f"{service.url}/blobs/{ref.digest}")
    assert client.get(ref.digest) == data
    assert client.get(ref.digest.upper().replace("0X", "0x")) == data
    assert client.has(ref.digest)
    assert client.fetch(ref.uri, expected_digest=ref.digest, max_bytes=len(data)) == data
    assert isinstance(client, BlobStore)
    assert isinstance(service.store, BlobStore)


def test_digest_is_keccak_and_server_answers_blob_ref(service: BlobService, store: LocalBlobStore) -> None:
    data = b"syncline outer gradient"
    status, headers, body = raw(service.url, "PUT", "/blobs", body=data)
    assert status == 200
    digest = "0x" + keccak(data).hex()
    assert json.loads(body) == {"digest": digest, "size": len(data), "uri": f"{service.url}/blobs/{digest}"}
    assert digest_of(data) == digest
    assert (store.root / "blobs" / digest[2:]).read_bytes() == data
    status, headers, body = raw(service.url, "GET", f"/blobs/{digest}")
    assert (status, body, headers["x-syncline-digest"]) == (200, data, digest)
    status, headers, body = raw(service.url, "HEAD", f"/blobs/{digest}")
    assert (status, headers["content-length"], body) == (200, str(len(data)), b"")
    assert raw(service.url, "GET", "/healthz")[:3:2] == (200, b'{"status":"ok"}\n')


def test_empty_blob(client: HttpBlobStore) -> None:
    ref = client.put(b"")
    assert ref.digest == "0x" + keccak(b"").hex() and ref.size == 0
    assert client.get(ref.digest) == b""


def test_put_is_idempotent(client: HttpBlobStore, store: LocalBlobStore) -> None:
    data = payload(10_000, seed=1)
    first = client.put(data)
    assert client.put(data) == first
    assert store.put(data).digest == first.digest
    assert [p.name for p in (store.root / "blobs").iterdir()] == [first.digest[2:]]
    assert list((store.root / "tmp").iterdir()) == []


# ---------------------------------------------------------------------- aliases


def test_alias_set_and_resolve(client: HttpBlobStore, service: BlobService, store: LocalBlobStore) -> None:
    state_root = "0x" + keccak(text="state-root").hex()
    old = client.put(b"state v1", alias=state_root)
    assert client.resolve(state_root) == old.digest
    assert store.resolve(state_root) == old.digest
    status, _, body = raw(service.url, "GET", f"/aliases/{state_root}")
    assert status == 200 and json.loads(body) == {"digest": old.digest, "candidates": [old.digest]}
    new = client.put(b"state v2", alias=state_root)  # a second candidate, listed first; the first stays
    assert client.resolve(state_root) == new.digest
    assert client.candidates(state_root) == store.candidates(state_root) == (new.digest, old.digest)
    assert client.resolve("never-set") is None
    assert store.resolve("never-set") is None
    assert client.candidates("never-set") == ()


def test_anonymous_writers_cannot_hide_a_candidate(
    client: HttpBlobStore, service: BlobService, store: LocalBlobStore
) -> None:
    """Alias poisoning: the last anonymous writer no longer wins. Two anonymous PUTs leave the
    genuine candidate listed; a flood pushes anonymous candidates out of the bounded ring, but an
    owner-signed candidate keeps its own slot, which only its signer can replace."""
    owner, attacker = Account.create(), Account.create()
    alias = "checkpoints:0x" + keccak(text="root").hex()
    genuine = client.put(b"genuine manifest", alias=alias)
    for i in range(2):
        client.put(b"poison %d" % i, alias=alias)
    assert genuine.digest in client.candidates(alias)
    signed = put_signed(client, b"genuine manifest", alias, owner)
    assert signed.digest == genuine.digest
    for i in range(3 * MAX_ANONYMOUS_CANDIDATES):
        raw(service.url, "PUT", "/blobs", body=b"flood %d" % i, headers={"X-Syncline-Alias": alias})
    put_signed(client, b"attacker's own slot", alias, attacker)
    listed = client.candidates(alias)
    assert len(listed) <= MAX_ANONYMOUS_CANDIDATES + 2 and listed[0] == digest_of(b"attacker's own slot")
    assert client.candidates(alias, signers=[owner.address])[0] == genuine.digest
    assert store.candidates(alias, signers=[owner.address.lower()])[0] == genuine.digest
    status, _, body = raw(service.url, "GET", f"/aliases/{alias}?signer={owner.address}")
    assert status == 200 and json.loads(body)["digest"] == genuine.digest
    # The owner's signature over another digest recovers another address: it fills that one's slot.
    forged = sign_alias(owner, alias, digest_of(b"something else"))
    client.put(b"poison", alias=alias, alias_signature=forged)
    assert client.candidates(alias, signers=[owner.address])[0] == genuine.digest
    assert alias_signer(alias, genuine.digest, sign_alias(owner, alias, genuine.digest)) == owner.address.lower()
    status, _, body = raw(
        service.url,
        "PUT",
        "/blobs",
        body=b"x",
        headers={"X-Syncline-Alias": alias, "X-Syncline-Alias-Signature": "0x12"},
    )
    assert status == 400 and "Signature" in json_error(body)
    assert raw(service.url, "GET", f"/aliases/{alias}?signer=nobody")[0] == 400
    # The owner may replace its own candidate.
    newer = put_signed(client, b"owner's newer manifest", alias, owner)
    assert client.candidates(alias, signers=[owner.address])[0] == newer.digest


def test_the_first_anonymous_candidate_of_an_alias_is_never_pushed_out(
    client: HttpBlobStore, service: BlobService
) -> None:
    """A sponsor puts the initial state before anyone knows its root: that first candidate stays
    listed through a flood of anonymous candidates and of slots signed by throwaway keys."""
    alias = "0x" + keccak(text="initial state root").hex()
    first = client.put(b"initial state", alias=alias)
    for i in range(2 * MAX_ANONYMOUS_CANDIDATES):
        client.put(b"anonymous flood %d" % i, alias=alias)
    for i in range(40):
        put_signed(client, b"signed flood %d" % i, alias, Account.create())
    listed = client.candidates(alias)
    assert listed[-1] == first.digest and listed[0] == digest_of(b"signed flood 39")
    client.put(b"initial state", alias=alias)  # seen again: still the one pinned candidate
    assert client.candidates(alias).count(first.digest) == 1


def test_a_pre_candidates_alias_file_reads_as_one_candidate(store: LocalBlobStore) -> None:
    old = store.put(b"written by an older version")
    (store.aliases_dir / "legacy").write_text(old.digest)
    assert store.candidates("legacy") == (old.digest,)
    new = store.put(b"new", alias="legacy")
    assert store.candidates("legacy") == (new.digest, old.digest)


def test_bad_aliases_are_rejected(client: HttpBlobStore, service: BlobService, store: LocalBlobStore) -> None:
    for bad in ("a/b", "x" * 129, "sp ace", "..", "%2e%2e"):
        status, _, body = raw(service.url, "GET", f"/aliases/{urllib.parse.quote(bad, safe='%')}")
        assert status == 400, bad
        json_error(body)
    status, _, body = raw(service.url, "PUT", "/blobs", body=b"x", headers={"X-Syncline-Alias": "../escape"})
    assert status == 400 and "alias" in json_error(body)
    assert not any((store.root / "blobs").iterdir())
    for bad in ("", "a/b", ".", "é"):
        with pytest.raises(InvalidBlobName):
            client.put(b"x", alias=bad)
        with pytest.raises(InvalidBlobName):
            store.resolve(bad)


# ---------------------------------------------------------------------- errors


def test_missing_blob_is_404(client: HttpBlobStore, service: BlobService) -> None:
    missing = digest_of(b"never stored")
    with pytest.raises(BlobNotFound):
        client.get(missing)
    assert not client.has(missing)
    status, headers, body = raw(service.url, "GET", f"/blobs/{missing}")
    assert status == 404 and headers["content-type"] == "application/json" and missing in json_error(body)
    assert raw(service.url, "HEAD", f"/blobs/{missing}")[0] == 404
    assert raw(service.url, "GET", "/aliases/nope")[0] == 404
    status, _, body = raw(service.url, "GET", "/no/such/endpoint")
    assert status == 404
    json_error(body)


def test_malformed_digest_is_400(client: HttpBlobStore, service: BlobService) -> None:
    for bad in ("xyz", "0x123", "0x" + "g" * 64, "0x" + "a" * 65, keccak(b"no prefix").hex()):
        status, _, body = raw(service.url, "GET", f"/blobs/{bad}")
        assert status == 400, bad
        assert "malformed blob digest" in json_error(body)
        assert raw(service.url, "HEAD", f"/blobs/{bad}")[0] == 400
    with pytest.raises(InvalidBlobName):
        client.get("0x1234")
    with pytest.raises(InvalidBlobName):
        client.fetch(f"{service.url}/blobs/x", expected_digest="nope", max_bytes=10)


def test_oversized_upload_is_413(client: HttpBlobStore, service: BlobService, store: LocalBlobStore) -> None:
    big = payload(MAX_BYTES + 1)
    status, _, body = raw(service.url, "PUT", "/blobs", body=big)
    assert status == 413 and "exceeds" in json_error(body)
    with pytest.raises(BlobTooLarge):
        client.put(big)
    with pytest.raises(BlobTooLarge):  # the client's own cap, checked before uploading
        HttpBlobStore(service.url, max_bytes=10).put(b"x" * 11)
    assert not any((store.root / "blobs").iterdir())
    assert client.put(payload(MAX_BYTES)).size == MAX_BYTES  # exactly the limit is fine


def test_length_required_and_bad_requests(service: BlobService) -> None:
    answer = raw_socket(service.url, b"PUT /blobs HTTP/1.1\r\nHost: x\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 411 ")
    assert b"Content-Length" in answer.split(b"\r\n\r\n", 1)[1]
    answer = raw_socket(service.url, b"PUT /blobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 411 ")
    answer = raw_socket(service.url, b"PUT /blobs HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ")
    answer = raw_socket(service.url, b"PUT /blobs HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nshort")
    assert answer.startswith(b"HTTP/1.1 400 ")
    for garbage in (
        b"\x00\xff garbage\r\n\r\n",
        b"GET\r\n\r\n",
        b"BREW /pot HTTP/1.1\r\n\r\n",
        b"GET / HTTP/9.9\r\n\r\n",
    ):
        answer = raw_socket(service.url, garbage)
        assert answer.startswith(b"HTTP/1.") and json_error(answer.split(b"\r\n\r\n", 1)[1])
    status, headers, _ = raw(service.url, "POST", "/blobs", body=b"x")
    assert status == 405 and headers["allow"] == "PUT"
    assert raw(service.url, "DELETE", f"/blobs/{digest_of(b'x')}")[0] == 405
    assert raw(service.url, "GET", "/blobs")[0] == 405
    assert raw(service.url, "GET", "/healthz")[0] == 200  # still serving


def test_keep_alive_connection_survives_an_error(service: BlobService) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=5)
    try:
        conn.request("PUT", "/blobs", body=b"y" * 100, headers={"X-Syncline-Alias": "bad/alias"})
        response = conn.getresponse()
        assert response.status == 400
        response.read()
        conn.request("PUT", "/blobs", body=b"ok")
        response = conn.getresponse()
        assert response.status == 200 and json.loads(response.read())["digest"] == digest_of(b"ok")
    finally:
        conn.close()


def test_tampered_file_is_detected(client: HttpBlobStore, service: BlobService, store: LocalBlobStore) -> None:
    data = payload(4096, seed=2)
    ref = client.put(data)
    path = store.blob_path(ref.digest)
    path.write_bytes(b"X" + data[1:])  # same size, one byte flipped
    with pytest.raises(BlobIntegrityError):
        store.get(ref.digest)
    # the corrupt file was moved aside: the store no longer claims the blob, and a put repairs it
    assert not store.has(ref.digest) and any(store.quarantine_dir.iterdir())
    assert client.put(data) == ref
    assert store.get(ref.digest) == data

    path.write_bytes(data + b"appended")
    status, _, body = raw(service.url, "GET", f"/blobs/{ref.digest}")
    assert status == 500 and "integrity" in json_error(body)
    with pytest.raises(BlobNotFound):
        client.get(ref.digest)


def test_fetch_verifies_the_expected_digest(client: HttpBlobStore, store: LocalBlobStore) -> None:
    data = payload(5000, seed=3)
    ref = client.put(data)
    wrong = digest_of(b"something else")
    with pytest.raises(BlobIntegrityError):
        client.fetch(ref.uri, expected_digest=wrong, max_bytes=10_000)
    local_ref = store.put(data)
    assert local_ref.uri.startswith("file://") and local_ref.digest == ref.digest
    # A file:// locator is read only where the operator allows it (never one from the chain).
    assert fetch_uri(local_ref.uri, expected_digest=ref.digest, max_bytes=10_000, allow_local=True) == data
    assert store.fetch(ref.uri, expected_digest=ref.digest, max_bytes=10_000) == data
    with pytest.raises(BlobIntegrityError):
        fetch_uri(local_ref.uri, expected_digest=wrong, max_bytes=10_000, allow_local=True)
    with pytest.raises(BlobNotFound):
        fetch_uri(store.uri_for(wrong), expected_digest=wrong, max_bytes=10_000, allow_local=True)
    with pytest.raises(BlobStoreError, match="unsupported URI scheme"):
        store.fetch("gopher://x/y", expected_digest=ref.digest, max_bytes=10_000)


def test_fetch_size_cap(client: HttpBlobStore, store: LocalBlobStore) -> None:
    data = payload(300_000, seed=4)
    ref = client.put(data)
    for uri in (ref.uri, store.uri_for(ref.digest)):
        assert fetch_uri(uri, expected_digest=ref.digest, max_bytes=len(data), allow_local=True) == data
        with pytest.raises(BlobTooLarge, match="max_bytes"):
            fetch_uri(uri, expected_digest=ref.digest, max_bytes=len(data) - 1, allow_local=True)
    with pytest.raises(BlobTooLarge):
        HttpBlobStore(client.base_url, max_bytes=1000).get(ref.digest)


def test_unreachable_service_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = HttpBlobStore(f"http://127.0.0.1:{port}", timeout_s=2)
    with pytest.raises(BlobUnavailable, match="cannot reach"):
        dead.put(b"x")
    assert not dead.healthy()


# ---------------------------------------------------------------------- concurrency


def test_concurrent_puts_from_threads(client: HttpBlobStore, store: LocalBlobStore) -> None:
    shared = payload(200_000, seed=5)
    results: list[BlobRef] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        try:
            refs = [client.put(shared, alias="shared"), client.put(payload(1000 + i, seed=100 + i))]
            with lock:
                results.extend(refs)
        except BaseException as exc:
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    shared_digest = digest_of(shared)
    assert sum(r.digest == shared_digest for r in results) == 16
    assert len({r.digest for r in results}) == 17
    assert client.get(shared_digest) == shared and client.resolve("shared") == shared_digest
    assert len(list((store.root / "blobs").iterdir())) == 17
    assert list(store.tmp_dir.iterdir()) == []


def _put_many(root: str, data: bytes, rounds: int) -> None:
    store = LocalBlobStore(Path(root))
    for _ in range(rounds):
        store.put(data, alias="same")
        assert store.get(digest_of(data)) == data


def test_concurrent_puts_from_processes(tmp_path: Path) -> None:
    data = payload(100_000, seed=6)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_put_many, args=(str(tmp_path / "shared"), data, 25)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=30)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    store = LocalBlobStore(tmp_path / "shared")
    assert store.get(digest_of(data)) == data and store.resolve("same") == digest_of(data)
    assert list(store.tmp_dir.iterdir()) == []


# ---------------------------------------------------------------------- logging and process


def test_one_structured_log_line_per_request(client: HttpBlobStore, service: BlobService) -> None:
    with capture_logs() as logs:
        ref = client.put(b"logged", alias="logged")
        client.get(ref.digest)
        raw(service.url, "GET", "/blobs/bad")
        deadline = time.monotonic() + 2
        while sum(e["event"] == "http.request" for e in logs) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    # Each line is written after its answer, by the connection's own thread: order them by request.
    order = [("PUT", 200), ("GET", 200), ("GET", 400)]
    requests = sorted(
        (e for e in logs if e["event"] == "http.request"), key=lambda e: order.index((e["method"], e["status"]))
    )
    assert [(e["method"], e["status"]) for e in requests] == order
    assert requests[0]["digest"] == ref.digest and requests[0]["alias"] == "logged" and requests[0]["bytes_in"] == 6
    assert requests[1]["bytes_out"] == 6 and "duration_ms" in requests[1]


def test_service_as_a_process(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(AGENTS_DIR), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "syncline.blobstore", "--root", str(tmp_path / "proc"), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = json.loads(line)["url"]
        assert url.startswith("http://127.0.0.1:")
        status, _, body = raw(url, "GET", "/healthz")
        assert status == 200 and json.loads(body) == {"status": "ok"}
        remote = HttpBlobStore(url, timeout_s=5)
        ref = remote.put(b"from another process", alias="proc")
        assert remote.get(ref.digest) == b"from another process" and remote.resolve("proc") == ref.digest
        assert (tmp_path / "proc" / "blobs" / ref.digest[2:]).is_file()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
        assert not remote.healthy()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()
