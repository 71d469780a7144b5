"""Blobs stream: uploads go to disk as they arrive, downloads go to a file, and a download whose
connection breaks part-way resumes with a ``Range`` request (issue 12, item 4).

Real sockets on 127.0.0.1: a :class:`BlobService`, and in front of it a :class:`CuttingProxy` that
forwards bytes both ways but hangs up on the client after a budget of answer bytes, so the client
sees exactly what a dropped connection looks like.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import os
import random
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from syncline.blobstore import (
    BlobIntegrityError,
    BlobService,
    BlobTooLarge,
    BlobUnavailable,
    HttpBlobStore,
    LocalBlobStore,
    digest_of,
    digest_of_file,
    fetch,
    fetch_uri,
    fetch_uri_to_file,
)
from syncline.blobstore.fetch import partial_path

MiB = 1 << 20


def payload(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


class CuttingProxy:
    """A TCP proxy to ``upstream_port``. Connection number ``i`` (from 0) may pass ``budgets[i]``
    answer bytes to the client before the proxy closes both ends (``None`` or a connection past
    the list: no limit). With ``strip_range`` it drops ``Range`` headers from requests, like a
    server that does not support ranges. Every request head it forwarded is kept in ``heads``."""

    def __init__(self, upstream_port: int, budgets: list[int | None], *, strip_range: bool = False) -> None:
        self.upstream_port = upstream_port
        self.budgets = budgets
        self.strip_range = strip_range
        self.heads: list[str] = []
        self.connections = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> CuttingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.sock.close()
        self._thread.join(5)

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                client, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            index = self.connections
            self.connections += 1
            budget = self.budgets[index] if index < len(self.budgets) else None
            threading.Thread(target=self._relay, args=(client, budget), daemon=True).start()

    def _relay(self, client: socket.socket, budget: int | None) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        client.settimeout(10)
        upstream.settimeout(10)
        head = b""
        while b"\r\n\r\n" not in head:
            part = client.recv(65536)
            if not part:
                client.close()
                upstream.close()
                return
            head += part
        request, rest = head.split(b"\r\n\r\n", 1)
        lines = request.decode("latin-1").split("\r\n")
        if self.strip_range:
            lines = [line for line in lines if not line.lower().startswith(("range:", "if-range:"))]
        self.heads.append("\r\n".join(lines))
        upstream.sendall("\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + rest)
        threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
        sent = 0
        try:
            while True:
                data = upstream.recv(65536)
                if not data:
                    break
                if budget is not None and sent + len(data) > budget:
                    client.sendall(data[: budget - sent])
                    break
                client.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:
            for s in (client, upstream):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass


def eventually(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    give_up = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < give_up, "condition not met in time"
        time.sleep(0.02)


@pytest.fixture
def store(tmp_path: Path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path / "store", fsync=False)


@pytest.fixture
def service(store: LocalBlobStore) -> Iterator[BlobService]:
    with BlobService(store, request_timeout_s=5) as svc:
        yield svc


def request(
    url: str, method: str, path: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    parts = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(parts[0], int(parts[1]), timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        conn.close()


# ---------------------------------------------------------------------- resuming


def test_a_download_cut_twice_resumes_with_range_requests(service: BlobService, tmp_path: Path) -> None:
    data = payload(3 * MiB + 12345, seed=1)
    ref = HttpBlobStore(service.url).put(data)
    with CuttingProxy(service.port, [MiB, 2 * MiB]) as proxy:
        uri = f"{proxy.url}/blobs/{ref.digest}"
        dest = tmp_path / "out.bin"
        assert fetch_uri_to_file(uri, dest, expected_digest=ref.digest, max_bytes=len(data)) == len(data)
        assert dest.read_bytes() == data
        assert not partial_path(dest, ref.digest).exists()
        ranges = [line for head in proxy.heads for line in head.split("\r\n") if line.lower().startswith("range:")]
        assert len(proxy.heads) == 3 and len(ranges) == 2, proxy.heads
        # each resume asks for what is missing: it starts where the bytes received so far end
        starts = [int(r.split("=")[1].rstrip("-")) for r in ranges]
        assert 0 < starts[0] < MiB < starts[1] < len(data)

    with CuttingProxy(service.port, [MiB + 7]) as proxy:  # the bytes API resumes too
        assert fetch_uri(f"{proxy.url}/blobs/{ref.digest}", expected_digest=ref.digest, max_bytes=len(data)) == data
        assert proxy.connections == 2


def test_a_server_that_ignores_ranges_is_read_again_from_the_start(service: BlobService, tmp_path: Path) -> None:
    data = payload(2 * MiB, seed=2)
    ref = HttpBlobStore(service.url).put(data)
    with CuttingProxy(service.port, [MiB], strip_range=True) as proxy:
        dest = tmp_path / "out.bin"
        fetch_uri_to_file(f"{proxy.url}/blobs/{ref.digest}", dest, expected_digest=ref.digest, max_bytes=len(data))
        assert dest.read_bytes() == data and proxy.connections == 2


def test_a_transfer_that_keeps_breaking_gives_up_and_the_next_call_resumes(
    service: BlobService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the first megabyte every connection is cut before any answer byte: the fetch gives up
    (unavailable, never an integrity verdict) after a bounded number of tries and keeps what it
    has; the next call hashes the partial file and asks only for the rest."""
    monkeypatch.setattr(fetch, "RETRY_PAUSE_S", (0.01,))
    data = payload(3 * MiB, seed=3)
    ref = HttpBlobStore(service.url).put(data)
    dest = tmp_path / "state.bin"
    with CuttingProxy(service.port, [MiB] + [0] * 20) as proxy:
        with pytest.raises(BlobUnavailable, match="gave up after") as err:
            fetch_uri_to_file(f"{proxy.url}/blobs/{ref.digest}", dest, expected_digest=ref.digest, max_bytes=len(data))
        assert "\n" not in str(err.value)
        assert proxy.connections <= 6  # 1 + the bounded retries without progress
    part = partial_path(dest, ref.digest)
    assert not dest.exists() and 0 < part.stat().st_size <= MiB
    with CuttingProxy(service.port, []) as proxy:
        client = HttpBlobStore(proxy.url)
        assert client.get_to_file(ref.digest, dest, max_bytes=len(data)) == len(data)
        assert dest.read_bytes() == data and not part.exists()
        assert any("range: bytes=" in h.lower() for h in proxy.heads)


def test_a_partial_file_that_holds_the_whole_blob_is_checked_and_kept(service: BlobService, tmp_path: Path) -> None:
    """A resume of a partial file that already holds every byte gets 416 and is simply verified."""
    data = payload(100_000, seed=4)
    ref = HttpBlobStore(service.url).put(data)
    dest = tmp_path / "out.bin"
    partial_path(dest, ref.digest).write_bytes(data)
    assert HttpBlobStore(service.url).get_to_file(ref.digest, dest) == len(data)
    assert dest.read_bytes() == data


def test_a_stale_partial_file_with_wrong_bytes_is_refused_and_removed(service: BlobService, tmp_path: Path) -> None:
    data = payload(100_000, seed=5)
    ref = HttpBlobStore(service.url).put(data)
    dest = tmp_path / "out.bin"
    partial_path(dest, ref.digest).write_bytes(b"garbage" * 1000)  # a prefix of some other blob
    with pytest.raises(BlobIntegrityError, match="integrity check failed") as err:
        HttpBlobStore(service.url).get_to_file(ref.digest, dest)
    assert "\n" not in str(err.value)
    assert not dest.exists() and not partial_path(dest, ref.digest).exists()
    assert HttpBlobStore(service.url).get_to_file(ref.digest, dest) == len(data)  # a clean retry works


def test_oversized_and_wrong_blobs_are_refused_with_one_line_errors(service: BlobService, tmp_path: Path) -> None:
    data = payload(200_000, seed=6)
    ref = HttpBlobStore(service.url).put(data)
    dest = tmp_path / "out.bin"
    with pytest.raises(BlobTooLarge, match="larger than max_bytes=1000") as too_large:
        fetch_uri_to_file(ref.uri, dest, expected_digest=ref.digest, max_bytes=1000)
    wrong = digest_of(b"something else")
    with pytest.raises(BlobIntegrityError, match=f"expected keccak256 {wrong}") as mismatch:
        fetch_uri_to_file(ref.uri, dest, expected_digest=wrong, max_bytes=len(data))
    for err in (too_large, mismatch):
        assert "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == [tmp_path / "store"]  # no partial file, no destination
    with pytest.raises(BlobTooLarge):  # the per-call cap of get() is below the client's default
        HttpBlobStore(service.url).get(ref.digest, max_bytes=len(data) - 1)
    assert HttpBlobStore(service.url).get(ref.digest, max_bytes=len(data)) == data


# ---------------------------------------------------------------------- the service's ranges


def test_range_requests(service: BlobService) -> None:
    data = payload(10_000, seed=7)
    ref = HttpBlobStore(service.url).put(data)
    path = f"/blobs/{ref.digest}"
    status, headers, body = request(service.url, "HEAD", path)
    assert status == 200 and headers["accept-ranges"] == "bytes" and headers["content-length"] == "10000"
    for spec, first, last in [
        ("bytes=0-9", 0, 9),
        ("bytes=9990-", 9990, 9999),
        ("bytes=-25", 9975, 9999),
        ("bytes=-20000", 0, 9999),
        ("bytes=5000-999999999", 5000, 9999),
        ("bytes=9999-9999", 9999, 9999),
    ]:
        status, headers, body = request(service.url, "GET", path, {"Range": spec})
        assert status == 206, spec
        assert headers["content-range"] == f"bytes {first}-{last}/10000", spec
        assert body == data[first : last + 1] and headers["content-length"] == str(last + 1 - first)
    for spec in ["bytes=10000-", "bytes=20000-30000", "bytes=5-1", "bytes=0-1,5-6", "bytes=abc", "bytes=-0", "bytes=-"]:
        status, headers, body = request(service.url, "GET", path, {"Range": spec})
        assert status == 416, spec
        assert headers["content-range"] == "bytes */10000", spec
        assert body.count(b"\n") == 1 and json.loads(body)["status"] == 416
    # ranges in another unit, and an If-Range for another version, are ignored: the whole blob
    for extra in ({"Range": "items=0-5"}, {"Range": "bytes=0-5", "If-Range": '"0xother"'}):
        status, _, body = request(service.url, "GET", path, extra)
        assert status == 200 and body == data
    status, _, body = request(service.url, "GET", path, {"Range": "bytes=0-5", "If-Range": f'"{ref.digest}"'})
    assert status == 206 and body == data[:6]
    empty = HttpBlobStore(service.url).put(b"")
    status, _, _ = request(service.url, "GET", f"/blobs/{empty.digest}", {"Range": "bytes=0-"})
    assert status == 416


def test_a_large_corrupt_blob_is_hashed_on_the_way_out_and_quarantined(store: LocalBlobStore) -> None:
    """Above ``verify_bytes`` the service does not hash before answering; it hashes what it sends,
    and a blob that turned out corrupt is moved aside (the reader refuses it by its own check)."""
    with BlobService(store, verify_bytes=0) as service:
        data = payload(50_000, seed=8)
        ref = HttpBlobStore(service.url).put(data)
        store.blob_path(ref.digest).write_bytes(b"X" + data[1:])
        with pytest.raises(BlobIntegrityError):
            HttpBlobStore(service.url).get(ref.digest)
        eventually(lambda: not store.has(ref.digest))  # the service checks once the answer is out
        assert any(store.quarantine_dir.iterdir())
        assert HttpBlobStore(service.url).put(data) == ref  # a put repairs it
        assert HttpBlobStore(service.url).get(ref.digest) == data


# ---------------------------------------------------------------------- uploads


def test_put_file_streams_and_a_cut_upload_leaves_no_temporary_file(
    service: BlobService, store: LocalBlobStore, tmp_path: Path
) -> None:
    data = payload(3 * MiB, seed=9)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    assert digest_of_file(src) == (digest_of(data), len(data))
    ref = HttpBlobStore(service.url).put_file(src, alias="my-alias")
    assert ref.digest == digest_of(data) and store.get(ref.digest) == data
    assert store.candidates("my-alias") == (ref.digest,)
    local = store.put_file(src)
    assert local.digest == ref.digest and local.size == len(data)

    # a client that announces 1 MiB and hangs up after 100 kB: nothing is stored, nothing is left
    with socket.create_connection(("127.0.0.1", service.port)) as sock:
        sock.sendall(b"PUT /blobs HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n" + b"y" * 100_000)
    eventually(lambda: not any(store.tmp_dir.iterdir()))
    assert sorted(p.name for p in store.blobs_dir.iterdir()) == [ref.digest[2:]]


def test_an_upload_the_disk_cannot_hold_is_refused_before_its_body(store: LocalBlobStore) -> None:
    with BlobService(store, min_free_bytes=1 << 60) as service:
        with pytest.raises(BlobUnavailable, match="HTTP 507: not enough disk space for a blob of 5 bytes") as err:
            HttpBlobStore(service.url).put(b"hello")
        assert "\n" not in str(err.value)
        assert not any(store.blobs_dir.iterdir())


# ---------------------------------------------------------------------- bounded memory

_MEMORY_PROBE = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    from syncline.blobstore import BlobService, HttpBlobStore, LocalBlobStore, digest_of_file

    root, size = Path(sys.argv[1]), int(sys.argv[2])

    def peak_kib():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])

    def reset_peak():
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")

    src = root / "src.bin"
    with open(src, "wb") as fh:
        block = os.urandom(1 << 20)
        for i in range(size >> 20):
            fh.write(bytes([i % 256]) + block[1:])
    digest, _ = digest_of_file(src)
    with BlobService(LocalBlobStore(root / "store", fsync=False)) as service:
        client = HttpBlobStore(service.url)
        warm = root / "warm.bin"
        warm.write_bytes(os.urandom(3 << 20))
        warm_ref = client.put_file(warm)  # every code path once, so the figures are the transfers'
        client.get_to_file(warm_ref.digest, root / "warm-out.bin")
        reset_peak()
        base = peak_kib()
        ref = client.put_file(src)
        upload = peak_kib() - base
        reset_peak()
        base = peak_kib()
        client.get_to_file(ref.digest, root / "out.bin", max_bytes=size)
        download = peak_kib() - base
    ok = ref.digest == digest and digest_of_file(root / "out.bin")[0] == digest
    print(json.dumps({"upload_kib": upload, "download_kib": download, "ok": ok}))
    """
)


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc/self/clear_refs")
def test_streamed_upload_and_download_hold_a_small_fraction_of_the_blob(tmp_path: Path) -> None:
    """A 64 MiB blob goes up and comes back through one process (client and service) whose peak
    resident memory grows by far less than the blob: nothing holds the body in memory."""
    size = 64 * MiB
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", _MEMORY_PROBE, str(tmp_path), str(size)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    )
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["ok"], figures
    assert figures["upload_kib"] * 1024 < size // 4, figures  # measured: about 3 MiB
    assert figures["download_kib"] * 1024 < size // 4, figures  # measured: about 2 MiB


class LyingRanges(http.server.BaseHTTPRequestHandler):
    """Sends half the blob and hangs up; answers a resume with a range other than the one asked for."""

    blob = payload(200_000, seed=10)
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.headers.get("Range") is None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(self.blob)))
            self.end_headers()
            self.wfile.write(self.blob[:100_000])
        else:
            self.send_response(206)
            self.send_header("Content-Range", f"bytes 0-{len(self.blob) - 1}/{len(self.blob)}")
            self.send_header("Content-Length", str(len(self.blob)))
            self.end_headers()
            self.wfile.write(self.blob)
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_resume_answered_with_another_range_is_not_believed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fetch, "RETRY_PAUSE_S", (0.01,))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), LyingRanges)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        uri = f"http://127.0.0.1:{server.server_address[1]}/blob"
        digest = digest_of(LyingRanges.blob)
        with pytest.raises(BlobUnavailable, match=r"with another range \(bytes 0-199999/200000\); gave up after"):
            fetch_uri_to_file(uri, tmp_path / "out.bin", expected_digest=digest, max_bytes=10**6)
        assert not (tmp_path / "out.bin").exists()
        assert partial_path(tmp_path / "out.bin", digest).stat().st_size == 100_000  # kept for a later resume
    finally:
        server.shutdown()
        server.server_close()
