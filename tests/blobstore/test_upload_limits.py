"""Slow uploads from one client cannot starve the blob service's other clients.

Issue 10 finding 8: eight slow uploads filled the service's eight upload slots, so honest
uploads got 503. Real sockets: the slow client connects from 127.0.0.3, the honest one from
127.0.0.2 (Linux routes all of 127.0.0.0/8 to loopback).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncline.blobstore import BlobService, LocalBlobStore, digest_of

SLOW = "127.0.0.3"
HONEST = "127.0.0.2"
TIMEOUT_S = 1.5


@pytest.fixture
def service(tmp_path: Path) -> Iterator[BlobService]:
    with BlobService(LocalBlobStore(tmp_path), request_timeout_s=TIMEOUT_S, max_concurrent_uploads=8) as svc:
        yield svc


class SlowUpload(threading.Thread):
    """Announces a 1 MB upload and sends one byte per 0.2 s (each well within the socket timeout)."""

    def __init__(self, port: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.port, self.stop = port, stop
        self.answer = b""

    def run(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), source_address=(SLOW, 0)) as sock:
            sock.sendall(b"PUT /blobs HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
            sock.settimeout(0.2)
            try:
                while not self.stop.is_set():
                    sock.sendall(b"x")
                    try:
                        self.answer = sock.recv(4096)
                        return
                    except TimeoutError:
                        continue
            except OSError:
                return


def honest_put(port: int, data: bytes) -> tuple[int, dict[str, object]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(HONEST, 0))
    try:
        conn.request("PUT", "/blobs", body=data, headers={"Content-Length": str(len(data))})
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        conn.close()


def test_eight_slow_uploads_from_one_client_do_not_fail_an_honest_upload(service: BlobService) -> None:
    """Before the fix the honest upload waited for a slot and got 503 after the request timeout."""
    stop = threading.Event()
    slow = [SlowUpload(service.port, stop) for _ in range(8)]
    for s in slow:
        s.start()
    try:
        time.sleep(0.5)  # every slow upload is in and trickling
        data = b"honest bytes" * 1000
        started = time.monotonic()
        status, body = honest_put(service.port, data)
        assert status == 200, body
        assert body["digest"] == digest_of(data)
        assert time.monotonic() - started < 1.0  # it got a free slot at once
        # The slow uploads are cut once they fall below the rate floor after the grace period.
        for s in slow:
            s.join(TIMEOUT_S + 4)
        answers = [s.answer.split(b"\r\n", 1)[0] for s in slow]
        assert all(a.startswith(b"HTTP/1.1 408") or a.startswith(b"HTTP/1.1 503") for a in answers), answers
        assert sum(a.startswith(b"HTTP/1.1 408") for a in answers) >= service.max_uploads_per_client
    finally:
        stop.set()
        for s in slow:
            s.join(5)
