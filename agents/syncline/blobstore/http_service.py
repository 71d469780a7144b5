"""An HTTP service over a :class:`~syncline.blobstore.local.LocalBlobStore` (stdlib only).

Endpoints
---------
``PUT /blobs``
    Body = the blob; ``Content-Length`` required (411 otherwise), at most ``max_bytes`` (413);
    optional header ``X-Syncline-Alias`` adds the blob as a candidate of that alias, in the
    signer's own slot when ``X-Syncline-Alias-Signature`` (``0x`` + 130 hex, EIP-191 over
    :func:`~syncline.blobstore.store.alias_message`) is sent too, else in the anonymous ring; no
    writer can replace another's candidate. The server hashes the body itself and answers 200 with
    the JSON :class:`~syncline.blobstore.store.BlobRef` (``uri`` = ``<public url>/blobs/<digest>``).
    Uploads share ``max_concurrent_uploads`` slots, at most ``max_uploads_per_client`` per client
    address and ``max_uploads_per_network`` per /24 (IPv4) or /64 (IPv6) network; a waiting upload
    gets 503 with ``Retry-After`` when none frees up in time, and a freed slot goes to the waiting
    client that used one least recently. While one waits with every slot taken, the slowest upload
    under ``contended_min_upload_bytes_per_s`` after ``slow_upload_grace_s`` is cut with 503. An
    upload slower than ``min_upload_bytes_per_s`` after ``request_timeout_s``, or longer than
    ``max_upload_s``, is cut with 408. Each client address and network may upload
    ``client_quota_bytes`` / ``network_quota_bytes`` per ``quota_window_s`` (429 with
    ``Retry-After`` beyond; 413 for a blob larger than a quota). ``exempt_clients`` (default the
    loopback addresses) have no per-client or per-network limit. A new signer of an alias that
    already holds its ``max_signer_slots`` signers' slots gets 409.
    The body is streamed to a temporary file and hashed as it arrives (never held in memory), then
    renamed to its digest; an upload larger than the free disk space (less ``min_free_bytes``) gets
    507.
``GET /blobs/<digest>``
    200 with the blob's bytes, streamed from disk; 404 if absent, 400 for a malformed digest.
    ``Range: bytes=<first>-[<last>]`` or ``bytes=-<suffix>`` (one range) answers 206 with
    ``Content-Range: bytes <first>-<last>/<size>``; a range that starts past the end, or a
    malformed or multi-range ``bytes`` range, answers 416 with ``Content-Range: bytes */<size>``
    (a range in another unit is ignored). A blob up to ``verify_bytes`` is hashed before it is
    served and a corrupt one answers 500 (it is quarantined, so the next request answers 404); a
    larger one is hashed while a whole-blob answer streams out and quarantined afterwards if it
    was corrupt (readers verify every blob anyway; a ranged answer is not checked by the service).
``HEAD /blobs/<digest>``
    200 with ``Content-Length`` = the blob's size and ``Accept-Ranges: bytes``, or 404 / 400.
``GET /aliases/<alias>[?signer=0x...&signer=...]``
    200 ``{"digest": <first candidate>, "candidates": [...]}`` (the named signers' slots first,
    then the others newest first) or 404; 400 for an alias outside ``[0-9a-zA-Z_.:-]{1,128}`` or a
    malformed signer. Candidates are hints: readers verify what they fetch.
``GET /healthz``
    200 ``{"status": "ok"}``.

Every error is a one-line JSON object ``{"error": ..., "status": ...}``. Each request is logged
as one structured line on the ``syncline.blobstore`` logger.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import math
import os
import re
import shutil
import socket
import socketserver
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeAlias

import structlog

from syncline.blobstore.local import LocalBlobStore
from syncline.blobstore.store import (
    CHUNK_BYTES,
    DEFAULT_MAX_BLOB_BYTES,
    AliasFull,
    BlobIntegrityError,
    BlobNotFound,
    BlobRef,
    InvalidBlobName,
    normalize_digest,
    read_chunks,
    validate_alias,
)
from syncline.protocol.hashing import Keccak256

log = structlog.get_logger("syncline.blobstore")

ALIAS_HEADER = "X-Syncline-Alias"
ALIAS_SIGNATURE_HEADER = "X-Syncline-Alias-Signature"
DIGEST_HEADER = "X-Syncline-Digest"
_READ_CHUNK = CHUNK_BYTES
DEFAULT_VERIFY_BYTES = 64 * 1024 * 1024
"""Blobs up to this size are hashed before they are served (a corrupt one answers 500)."""
DEFAULT_MIN_FREE_BYTES = 128 << 20
"""Disk space an upload must leave free (507 otherwise)."""
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
_DRAIN_LIMIT = 64 * 1024 * 1024
"""An unread request body up to this size is read and dropped after an error answer, so the client
(which sends its whole body before reading) sees the answer rather than a connection reset."""
_MAX_LOGGED_PATH = 200
_MAX_TRACKED = 4096
"""Clients and networks whose recent use is remembered beyond what they hold now (the oldest
are forgotten first)."""
IPNetwork: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_MAX_CONCURRENT_UPLOADS = 8
DEFAULT_MIN_UPLOAD_BYTES_PER_S = 256 * 1024
"""Every upload averages at least this after the request timeout (408 otherwise)."""
DEFAULT_CONTENDED_MIN_BYTES_PER_S = 1 << 20
"""While an upload waits for a slot, the slowest upload under this average is cut (503)."""
DEFAULT_SLOW_UPLOAD_GRACE_S = 10.0
"""How long an upload has a slot before the contended floor applies to it."""
DEFAULT_MAX_UPLOAD_S = 3600.0
"""The longest one upload may take in all (408 after)."""
DEFAULT_QUOTA_WINDOW_S = 3600.0
MAX_DEFAULT_CLIENT_QUOTA_BYTES = 64 << 30
"""The default per-client quota is an eighth of the store's volume, at most this (the per-network
one twice that): one client cannot fill the disk within a window."""
DEFAULT_EXEMPT_CLIENTS = "127.0.0.1/32,::1/128"
"""Clients free of the per-client and per-network limits: the service's own machine (see
:class:`BlobService`)."""


class _HttpError(Exception):
    """Ends a request with a JSON error response."""

    def __init__(self, status: HTTPStatus, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def client_network(client: str) -> str:
    """The network a client address belongs to, for the per-network limits: its /24 (IPv4) or its
    /64 (IPv6); an IPv4-mapped IPv6 address counts as IPv4, anything unparsable as itself."""
    try:
        address = ipaddress.ip_address(client.split("%", 1)[0])
    except ValueError:
        return client
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    prefix = 24 if address.version == 4 else 64
    return str(ipaddress.ip_network(f"{address}/{prefix}", strict=False))


def _canonical_client(client: str) -> str:
    try:
        address = ipaddress.ip_address(client.split("%", 1)[0])
    except ValueError:
        return client
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def parse_networks(text: str | Sequence[str]) -> tuple[IPNetwork, ...]:
    """``"127.0.0.1/32,::1"`` (or a sequence of such items) as networks; empty for none.

    Raises
    ------
    ValueError
        An item is not an IP address or network.
    """
    items = text.split(",") if isinstance(text, str) else list(text)
    return tuple(ipaddress.ip_network(item.strip(), strict=False) for item in items if item.strip())


class _Upload:
    """One upload that holds, or waits for, a slot: who sends it and how far it got."""

    def __init__(self, client: str, network: str, *, exempt: bool, sock: socket.socket | None, seq: int) -> None:
        self.client, self.network, self.exempt, self.sock, self.seq = client, network, exempt, sock, seq
        self.started = time.monotonic()
        self.received = 0
        self.cut = False

    def rate(self, now: float) -> float:
        return self.received / max(now - self.started, 1e-9)


class _UploadGate:
    """The upload slots, shared so that no client or network can take them all.

    * At most ``total`` uploads at once; at most ``per_client`` of them from one client address
      and ``per_network`` from one network (:func:`client_network`); ``exempt`` clients have no
      per-client or per-network cap (they still share the ``total`` slots).
    * An upload over a cap, or with every slot taken, waits (holding nothing) at most ``wait_s``,
      then gets 503 with ``Retry-After``. When a slot frees up it goes to the waiting client that
      used a slot least recently (a new client first), so a client that keeps every slot busy
      queues behind everyone else.
    * While an upload waits only because every slot is taken, the slowest upload that has had a
      slot for ``grace_s`` and averages below ``min_rate`` bytes/s is cut (503), one at a time.
    """

    def __init__(
        self,
        *,
        total: int,
        per_client: int,
        per_network: int,
        wait_s: float,
        min_rate: int,
        grace_s: float,
        exempt: tuple[IPNetwork, ...] = (),
    ) -> None:
        self.total, self.per_client, self.per_network = total, per_client, per_network
        self.wait_s, self.min_rate, self.grace_s = wait_s, min_rate, grace_s
        self.exempt = exempt
        self.cuts = 0
        self._cond = threading.Condition()
        self._active: set[_Upload] = set()
        self._waiting: list[_Upload] = []
        self._clients: Counter[str] = Counter()
        self._networks: Counter[str] = Counter()
        self._last_use: dict[str, float] = {}
        self._seq = 0

    def is_exempt(self, client: str) -> bool:
        try:
            address = ipaddress.ip_address(client)
        except ValueError:
            return False
        return any(address.version == net.version and address in net for net in self.exempt)

    def _fits(self, upload: _Upload) -> bool:
        """Whether ``upload`` may take a slot now, leaving its place in the queue aside."""
        if len(self._active) >= self.total:
            return False
        return upload.exempt or (
            self._clients[upload.client] < self.per_client and self._networks[upload.network] < self.per_network
        )

    def _priority(self, upload: _Upload) -> tuple[float, int]:
        return (self._last_use.get(upload.client, -math.inf), upload.seq)

    def _my_turn(self, upload: _Upload) -> bool:
        if not self._fits(upload):
            return False
        mine = self._priority(upload)
        return not any(self._priority(w) < mine and self._fits(w) for w in self._waiting if w is not upload)

    def _blocked_by_total_only(self, upload: _Upload) -> bool:
        return len(self._active) >= self.total and (
            upload.exempt
            or (self._clients[upload.client] < self.per_client and self._networks[upload.network] < self.per_network)
        )

    def _cut_slowest(self) -> None:
        """Cut the slowest upload under the rate floor (none while an earlier cut is under way)."""
        if any(u.cut for u in self._active):
            return
        now = time.monotonic()
        slow = [
            u for u in self._active if not u.exempt and now - u.started >= self.grace_s and u.rate(now) < self.min_rate
        ]
        if not slow:
            return
        victim = min(slow, key=lambda u: u.rate(now))
        victim.cut = True
        self.cuts += 1
        log.info(
            "upload.cut",
            client=victim.client,
            received=victim.received,
            bytes_per_s=round(victim.rate(now)),
            reason="slowest upload under the rate floor while others wait",
        )
        if victim.sock is not None:
            with contextlib.suppress(OSError):
                victim.sock.shutdown(socket.SHUT_RD)  # wakes its reader with an end of file

    @contextlib.contextmanager
    def slot(self, client: str, sock: socket.socket | None = None) -> Iterator[_Upload]:
        """Hold one upload slot for ``client``; raises ``_HttpError`` 503 when none frees up in time."""
        client = _canonical_client(client)
        give_up = time.monotonic() + self.wait_s
        with self._cond:
            self._seq += 1
            upload = _Upload(client, client_network(client), exempt=self.is_exempt(client), sock=sock, seq=self._seq)
            self._waiting.append(upload)
            try:
                while not self._my_turn(upload):
                    left = give_up - time.monotonic()
                    if left <= 0:
                        raise _HttpError(
                            HTTPStatus.SERVICE_UNAVAILABLE,
                            self._busy_reason(upload),
                            headers={"Retry-After": "1"},
                        )
                    if self._blocked_by_total_only(upload):
                        self._cut_slowest()
                    self._cond.wait(min(left, 0.25))
            finally:
                self._waiting.remove(upload)
                self._cond.notify_all()
            upload.started = time.monotonic()
            self._active.add(upload)
            self._clients[upload.client] += 1
            self._networks[upload.network] += 1
            self._last_use[upload.client] = upload.started
            if len(self._last_use) > 4 * _MAX_TRACKED:
                oldest = sorted(self._last_use, key=self._last_use.__getitem__)
                for stale in oldest[: len(oldest) - _MAX_TRACKED]:
                    del self._last_use[stale]
        try:
            yield upload
        finally:
            with self._cond:
                self._active.discard(upload)
                self._clients[upload.client] -= 1
                self._networks[upload.network] -= 1
                if not self._clients[upload.client]:
                    del self._clients[upload.client]
                if not self._networks[upload.network]:
                    del self._networks[upload.network]
                self._last_use[upload.client] = time.monotonic()
                self._cond.notify_all()

    def _busy_reason(self, upload: _Upload) -> str:
        if not upload.exempt and self._clients[upload.client] >= self.per_client:
            return f"this client already has {self.per_client} uploads in progress; retry later"
        if not upload.exempt and self._networks[upload.network] >= self.per_network:
            return f"the network {upload.network} already has {self.per_network} uploads in progress; retry later"
        return "too many concurrent uploads; retry later"


class _ByteQuota:
    """Bytes a client, and a network, may upload per ``window_s``: token buckets that hold
    ``per_client`` (``per_network``) bytes and refill at that much per window. Uploads are charged
    by their ``Content-Length`` when they start; what never arrives is refunded. 0 disables a limit."""

    def __init__(self, *, per_client: int, per_network: int, window_s: float) -> None:
        self.per_client, self.per_network, self.window_s = per_client, per_network, window_s
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, when)

    def _level(self, key: str, capacity: int, now: float) -> float:
        tokens, when = self._buckets.get(key, (float(capacity), now))
        return min(float(capacity), tokens + (now - when) * capacity / self.window_s)

    def _limits(self, client: str, network: str) -> list[tuple[str, int, str]]:
        limits = []
        if self.per_client > 0:
            limits.append((f"c:{client}", self.per_client, "this client"))
        if self.per_network > 0:
            limits.append((f"n:{network}", self.per_network, f"the network {network}"))
        return limits

    def charge(self, client: str, network: str, size: int) -> None:
        """Take ``size`` bytes from both buckets, or raise ``_HttpError`` 429 (with ``Retry-After``:
        when they will hold enough) or 413 (more than a bucket ever holds)."""
        now = time.monotonic()
        with self._lock:
            limits = self._limits(client, network)
            for key, capacity, who in limits:
                if size > capacity:
                    raise _HttpError(
                        HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                        f"blob of {size} bytes exceeds the upload quota of {who} ({capacity} bytes per "
                        f"{self.window_s:g} s)",
                    )
                level = self._level(key, capacity, now)
                if level < size:
                    wait = math.ceil((size - level) * self.window_s / capacity)
                    raise _HttpError(
                        HTTPStatus.TOO_MANY_REQUESTS,
                        f"upload quota of {who} used up ({capacity} bytes per {self.window_s:g} s); retry in {wait} s",
                        headers={"Retry-After": str(max(1, wait))},
                    )
            for key, capacity, _ in limits:
                self._buckets[key] = (self._level(key, capacity, now) - size, now)
            if len(self._buckets) > _MAX_TRACKED:  # forget full buckets: they hold no state
                for key in [k for k in self._buckets if self._level(k, self._capacity(k), now) >= self._capacity(k)]:
                    del self._buckets[key]

    def _capacity(self, key: str) -> int:
        return self.per_client if key.startswith("c:") else self.per_network

    def refund(self, client: str, network: str, size: int) -> None:
        """Give back ``size`` bytes charged but never received."""
        if size <= 0:
            return
        now = time.monotonic()
        with self._lock:
            for key, capacity, _ in self._limits(client, network):
                if key in self._buckets:
                    self._buckets[key] = (min(float(capacity), self._level(key, capacity, now) + size), now)


class _UploadPace:
    """The slowest acceptable upload: after ``grace_s``, at least ``min_bytes_per_s`` on average,
    and done within ``max_s`` in all."""

    def __init__(self, *, grace_s: float, min_bytes_per_s: int, max_s: float) -> None:
        self.started = time.monotonic()
        self.grace_s = grace_s
        self.min_bytes_per_s = min_bytes_per_s
        self.max_s = max_s

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def wait_s(self, received: int) -> float:
        """Seconds the next byte may still take before the client is too slow (<= 0: cut it now)."""
        due = min(self.grace_s + (received + 1) / self.min_bytes_per_s, self.max_s)
        return due - self.elapsed_s()


class _ConnectionLimit:
    """At most ``per_client`` open connections per client address (more are closed unanswered)."""

    def __init__(self, per_client: int) -> None:
        self.per_client = per_client
        self._open: dict[str, int] = {}
        self._lock = threading.Lock()

    def admit(self, client: str) -> bool:
        with self._lock:
            if self._open.get(client, 0) >= self.per_client:
                return False
            self._open[client] = self._open.get(client, 0) + 1
            return True

    def release(self, client: str) -> None:
        with self._lock:
            left = self._open.get(client, 0) - 1
            if left > 0:
                self._open[client] = left
            else:
                self._open.pop(client, None)


def _client_key(client_address: Any) -> str:
    return str(client_address[0]) if isinstance(client_address, tuple) and client_address else "?"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # socketserver's default of 5 makes bursts of connects wait for SYN retries

    def __init__(self, address: tuple[str, int], service: BlobService) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.service = service
        self.upload_gate = _UploadGate(
            total=service.max_concurrent_uploads,
            per_client=service.max_uploads_per_client,
            per_network=service.max_uploads_per_network,
            wait_s=service.request_timeout_s,
            min_rate=service.contended_min_upload_bytes_per_s,
            grace_s=service.slow_upload_grace_s,
            exempt=service.exempt_clients,
        )
        self.quota = _ByteQuota(
            per_client=service.client_quota_bytes,
            per_network=service.network_quota_bytes,
            window_s=service.quota_window_s,
        )
        self.connections = _ConnectionLimit(service.max_connections_per_client)
        super().__init__(address, _Handler)

    def verify_request(self, request: Any, client_address: Any) -> bool:
        """Admit a connection only while its client holds fewer than its share of connections."""
        if self.connections.admit(_client_key(client_address)):
            return True
        log.info("http.connection_refused", client=_client_key(client_address), reason="per-client connection limit")
        return False

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request(request, client_address)  # starts process_request_thread
        except BaseException:
            self.connections.release(_client_key(client_address))
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.release(_client_key(client_address))

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the FQDN of the host, which can block on DNS.
        with contextlib.suppress(OSError):  # small answers go out at once (accepted sockets inherit it)
            self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.exception("http.unhandled_error", client=str(client_address))


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "syncline-blobstore/0.1"
    protocol_version = "HTTP/1.1"
    default_request_version = "HTTP/1.0"  # answer even malformed (HTTP/0.9-like) requests with a status line

    # ------------------------------------------------------------------ plumbing

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.service.request_timeout_s)  # a stalled client is dropped
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def handle_one_request(self) -> None:
        self._started = time.perf_counter()
        self._status: int | None = None
        self._bytes_in = 0
        self._bytes_out = 0
        self._note: dict[str, Any] = {}
        self._unread = 0
        self.command = ""
        self.path = ""
        super().handle_one_request()
        if self._status is not None:
            # Successful requests at debug level (a training run makes thousands); failures at info.
            emit = log.debug if self._status < 400 else log.info
            emit(
                "http.request",
                method=self.command or None,
                path=(self.path or self.requestline or "")[:_MAX_LOGGED_PATH],
                status=self._status,
                bytes_in=self._bytes_in,
                bytes_out=self._bytes_out,
                duration_ms=round((time.perf_counter() - self._started) * 1000, 2),
                client=self.client_address[0] if self.client_address else None,
                **self._note,
            )

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        with contextlib.suppress(ValueError, TypeError):
            self._status = int(code)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http.server_message", message=format % args)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """JSON errors for the request-parsing failures handled by the base class."""
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "error"
        self.close_connection = True
        self._send_json(code, {"error": message or phrase, "status": code})

    def _send_json(self, status: int, obj: dict[str, Any], *, headers: dict[str, str] | None = None) -> None:
        body = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        self._send_bytes(status, body, content_type="application/json", headers=headers)

    def _send_bytes(
        self,
        status: int,
        body: bytes,
        *,
        content_type: str,
        headers: dict[str, str] | None = None,
        length: int | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        if self.close_connection:
            self.send_header("Connection", "close")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)
            self._bytes_out += len(body)

    def _run(self, route: Any) -> None:
        """Call ``route`` and turn every failure into an answer; never let one escape."""
        self._unread = self._declared_body_length()
        try:
            route()
        except _HttpError as exc:
            self._note.setdefault("error", exc.message)
            if not 0 <= self._unread <= _DRAIN_LIMIT:
                self.close_connection = True
            self._send_json(exc.status, {"error": exc.message, "status": int(exc.status)}, headers=exc.headers)
        except (BrokenPipeError, ConnectionResetError, TimeoutError) as exc:
            self._unread = -1
            self.close_connection = True
            self._note["error"] = f"connection: {exc.__class__.__name__}"
            if self._status is None:
                self._status = 499  # the client went away before an answer
        except Exception as exc:
            log.exception("http.handler_error", path=self.path[:_MAX_LOGGED_PATH])
            self._unread = -1
            self.close_connection = True
            self._note["error"] = exc.__class__.__name__
            if self._status is None:
                with contextlib.suppress(OSError):
                    self._send_json(500, {"error": "internal server error", "status": 500})
        self._drain_body()

    def _declared_body_length(self) -> int:
        """Bytes of request body announced by the headers: 0 for none, -1 when unknown."""
        if self.headers.get("Transfer-Encoding") is not None:
            return -1
        raw = self.headers.get("Content-Length")
        if raw is None:
            return 0
        raw = raw.strip()
        return int(raw) if raw.isascii() and raw.isdigit() else -1

    def _drain_body(self) -> None:
        """Drop a request body the route did not read, or close the connection if that is not sensible."""
        if self._unread == 0:
            return
        if not 0 < self._unread <= _DRAIN_LIMIT:
            self.close_connection = True
            return
        try:
            while self._unread > 0:
                chunk = self.rfile.read(min(_READ_CHUNK, self._unread))
                if not chunk:
                    break
                self._unread -= len(chunk)
        except OSError:
            pass
        if self._unread:
            self.close_connection = True

    def _route_path(self) -> list[str]:
        path = urllib.parse.urlsplit(self.path).path
        return [urllib.parse.unquote(p) for p in path.split("/")[1:]]

    # ------------------------------------------------------------------ methods

    def do_GET(self) -> None:
        self._run(self._get)

    def do_HEAD(self) -> None:
        self._run(self._get)

    def do_PUT(self) -> None:
        self._run(self._put)

    def do_POST(self) -> None:
        self._run(self._not_allowed)

    def do_DELETE(self) -> None:
        self._run(self._not_allowed)

    def do_PATCH(self) -> None:
        self._run(self._not_allowed)

    def handle_expect_100(self) -> bool:
        """Refuse an oversized or length-less upload before the client sends its body."""
        if self.command == "PUT":
            try:
                self._check_upload_headers()
            except _HttpError as exc:
                self._note["error"] = exc.message
                self.close_connection = True
                self._send_json(exc.status, {"error": exc.message, "status": int(exc.status)}, headers=exc.headers)
                return False
        return super().handle_expect_100()

    # ------------------------------------------------------------------ routes

    def _not_allowed(self) -> None:
        parts = self._route_path()
        if parts and parts[0] in ("blobs", "aliases", "healthz"):
            allow = "PUT" if parts == ["blobs"] else "GET, HEAD"
            raise _HttpError(
                HTTPStatus.METHOD_NOT_ALLOWED, f"method {self.command} not allowed here", headers={"Allow": allow}
            )
        raise _HttpError(HTTPStatus.NOT_FOUND, "no such endpoint")

    def _get(self) -> None:
        parts = self._route_path()
        store = self.server.service.store
        if parts == ["healthz"]:
            self._send_json(200, {"status": "ok"})
        elif len(parts) == 2 and parts[0] == "blobs":
            digest = self._digest(parts[1])
            self._note["digest"] = digest
            self._serve_blob(digest)
        elif len(parts) == 2 and parts[0] == "aliases":
            alias = self._alias(parts[1])
            self._note["alias"] = alias
            signers = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query).get("signer", [])
            try:
                found = store.candidates(alias, signers=signers)
            except InvalidBlobName as exc:
                raise _HttpError(HTTPStatus.BAD_REQUEST, str(exc)) from None
            if not found:
                raise _HttpError(HTTPStatus.NOT_FOUND, f"alias {alias!r} not found")
            self._send_json(200, {"digest": found[0], "candidates": list(found)})
        elif parts == ["blobs"]:
            raise _HttpError(HTTPStatus.METHOD_NOT_ALLOWED, "use PUT /blobs to upload", headers={"Allow": "PUT"})
        else:
            raise _HttpError(HTTPStatus.NOT_FOUND, "no such endpoint")

    def _put(self) -> None:
        parts = self._route_path()
        if parts != ["blobs"]:
            if parts and parts[0] in ("blobs", "aliases", "healthz"):
                raise _HttpError(
                    HTTPStatus.METHOD_NOT_ALLOWED, "use PUT /blobs to upload", headers={"Allow": "GET, HEAD"}
                )
            raise _HttpError(HTTPStatus.NOT_FOUND, "no such endpoint")
        length, alias = self._check_upload_headers()
        signature = self._alias_signature(alias)
        service = self.server.service
        gate, quota = self.server.upload_gate, self.server.quota
        client = _canonical_client(_client_key(self.client_address))
        network = client_network(client)
        charged = 0 if gate.is_exempt(client) else length
        if charged:
            quota.charge(client, network, charged)
        received_before = self._bytes_in
        try:
            with gate.slot(client, self.connection) as upload:
                try:
                    ref = service.store.put_stream(
                        self._body_chunks(length, upload), alias=alias, alias_signature=signature
                    )
                except InvalidBlobName as exc:  # a signature that does not recover
                    raise _HttpError(HTTPStatus.BAD_REQUEST, str(exc)) from None
                except AliasFull as exc:
                    raise _HttpError(HTTPStatus.CONFLICT, str(exc)) from None
        finally:
            if charged:
                quota.refund(client, network, charged - (self._bytes_in - received_before))
        self._note["digest"] = ref.digest
        if alias is not None:
            self._note["alias"] = alias
        public = BlobRef(digest=ref.digest, size=ref.size, uri=f"{service.public_url}/blobs/{ref.digest}")
        self._send_json(200, public.to_json(), headers=self._blob_headers(ref.digest))

    # ------------------------------------------------------------------ helpers

    def _check_upload_headers(self) -> tuple[int, str | None]:
        max_bytes = self.server.service.max_bytes
        if self.headers.get("Transfer-Encoding") is not None:
            raise _HttpError(HTTPStatus.LENGTH_REQUIRED, "chunked uploads are not supported; send Content-Length")
        raw = self.headers.get("Content-Length")
        if raw is None:
            raise _HttpError(HTTPStatus.LENGTH_REQUIRED, "Content-Length is required")
        raw = raw.strip()
        if not raw.isdigit() or not raw.isascii():
            raise _HttpError(HTTPStatus.BAD_REQUEST, f"invalid Content-Length {raw[:40]!r}")
        length = int(raw)
        if length > max_bytes:
            raise _HttpError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"blob of {length} bytes exceeds the limit of {max_bytes} bytes"
            )
        service = self.server.service
        free = shutil.disk_usage(service.store.tmp_dir).free
        if length + service.min_free_bytes > free:
            raise _HttpError(
                HTTPStatus.INSUFFICIENT_STORAGE,
                f"not enough disk space for a blob of {length} bytes ({free} bytes free, "
                f"{service.min_free_bytes} kept in reserve)",
            )
        alias = self.headers.get(ALIAS_HEADER)
        if alias is not None:
            alias = self._alias(alias.strip())
        return length, alias

    def _alias_signature(self, alias: str | None) -> bytes | None:
        """The alias signature header as bytes (checked against the body once it is read)."""
        raw = self.headers.get(ALIAS_SIGNATURE_HEADER)
        if raw is None:
            return None
        raw = raw.strip()
        if alias is None:
            raise _HttpError(HTTPStatus.BAD_REQUEST, f"{ALIAS_SIGNATURE_HEADER} needs {ALIAS_HEADER}")
        if len(raw) != 132 or not raw.startswith("0x"):
            raise _HttpError(HTTPStatus.BAD_REQUEST, f"{ALIAS_SIGNATURE_HEADER} must be 0x + 130 hex characters")
        try:
            return bytes.fromhex(raw[2:])
        except ValueError:
            raise _HttpError(
                HTTPStatus.BAD_REQUEST, f"{ALIAS_SIGNATURE_HEADER} must be 0x + 130 hex characters"
            ) from None

    def _body_chunks(self, length: int, upload: _Upload | None = None) -> Iterator[bytes]:
        """The upload's bytes as they arrive, cutting a client slower than the service's floor, one
        past the total upload deadline, and one the upload gate cut for others (``upload.cut``)."""
        service = self.server.service
        floor = _UploadPace(
            grace_s=service.request_timeout_s,
            min_bytes_per_s=service.min_upload_bytes_per_s,
            max_s=service.max_upload_s,
        )
        remaining = length
        try:
            while remaining > 0:
                if upload is not None and upload.cut:
                    self._unread = -1
                    raise _HttpError(
                        HTTPStatus.SERVICE_UNAVAILABLE,
                        f"upload cut: {length - remaining} of {length} bytes after {floor.elapsed_s():.1f} s, "
                        f"the slowest upload under {service.contended_min_upload_bytes_per_s} bytes/s while "
                        "others waited for a slot; retry later",
                        headers={"Retry-After": "1"},
                    )
                wait = floor.wait_s(length - remaining)
                if wait <= 0:
                    self._unread = -1
                    if floor.elapsed_s() >= service.max_upload_s:
                        raise _HttpError(
                            HTTPStatus.REQUEST_TIMEOUT,
                            f"upload too long: {length - remaining} of {length} bytes after "
                            f"{floor.elapsed_s():.1f} s (an upload may take at most {service.max_upload_s:g} s)",
                        )
                    raise _HttpError(
                        HTTPStatus.REQUEST_TIMEOUT,
                        f"upload too slow: {length - remaining} of {length} bytes after {floor.elapsed_s():.1f} s "
                        f"(at least {service.min_upload_bytes_per_s} bytes/s after {service.request_timeout_s:g} s)",
                    )
                self.connection.settimeout(min(service.request_timeout_s, wait))
                try:
                    chunk = self.rfile.read1(min(_READ_CHUNK, remaining))
                except TimeoutError:
                    self._unread = -1
                    if floor.elapsed_s() >= service.max_upload_s:  # the read waited out the total deadline
                        raise _HttpError(
                            HTTPStatus.REQUEST_TIMEOUT,
                            f"upload too long: {length - remaining} of {length} bytes after "
                            f"{floor.elapsed_s():.1f} s (an upload may take at most {service.max_upload_s:g} s)",
                        ) from None
                    raise _HttpError(
                        HTTPStatus.REQUEST_TIMEOUT,
                        f"upload too slow or stalled: {length - remaining} of {length} bytes after "
                        f"{floor.elapsed_s():.1f} s (at least {service.min_upload_bytes_per_s} bytes/s after "
                        f"{service.request_timeout_s:g} s)",
                    ) from None
                if not chunk and upload is not None and upload.cut:
                    continue  # answered at the top of the loop
                if not chunk:
                    self._unread = -1
                    raise _HttpError(
                        HTTPStatus.BAD_REQUEST,
                        f"body ended after {length - remaining} of {length} bytes (Content-Length)",
                    )
                remaining -= len(chunk)
                self._unread = remaining
                self._bytes_in += len(chunk)
                if upload is not None:
                    upload.received += len(chunk)
                yield chunk
        finally:
            self.connection.settimeout(service.request_timeout_s)  # keep-alive requests get the usual timeout

    def _serve_blob(self, digest: str) -> None:
        """``GET`` / ``HEAD /blobs/<digest>``: the blob streamed from disk, whole or one byte range."""
        service = self.server.service
        store = service.store
        try:
            fh = open(store.blob_path(digest), "rb")  # noqa: SIM115 (closed below; the answer streams from it)
        except (FileNotFoundError, IsADirectoryError):
            raise _HttpError(HTTPStatus.NOT_FOUND, f"blob {digest} not found") from None
        with fh:
            stat = os.fstat(fh.fileno())
            size = stat.st_size
            span = self._byte_range(digest, size)
            headers = {**self._blob_headers(digest), "Accept-Ranges": "bytes"}
            if self.command == "HEAD":
                self._send_bytes(200, b"", content_type="application/octet-stream", length=size, headers=headers)
                return
            check = span is None and size > service.verify_bytes  # hashed on the way out
            if span is None and not check:
                try:
                    store.verify_file(digest)
                except BlobNotFound:
                    raise _HttpError(HTTPStatus.NOT_FOUND, f"blob {digest} not found") from None
                except BlobIntegrityError:
                    raise _HttpError(
                        HTTPStatus.INTERNAL_SERVER_ERROR, f"stored blob {digest} failed its integrity check"
                    ) from None
            first, last = span if span is not None else (0, size - 1)
            if span is not None:
                self._note["range"] = f"{first}-{last}"
                headers["Content-Range"] = f"bytes {first}-{last}/{size}"
            self._send_bytes(
                206 if span is not None else 200,
                b"",
                content_type="application/octet-stream",
                length=last + 1 - first,
                headers=headers,
            )
            hasher = Keccak256() if check else None
            fh.seek(first)
            for chunk in read_chunks(fh, limit=last + 1 - first):
                self.wfile.write(chunk)
                self._bytes_out += len(chunk)
                if hasher is not None:
                    hasher.update(chunk)
            if hasher is not None:
                try:
                    store.check_file(digest, "0x" + hasher.hexdigest(), size, stat.st_ino)
                except BlobIntegrityError:
                    self.close_connection = True  # already logged and quarantined; the reader verifies too

    def _byte_range(self, digest: str, size: int) -> tuple[int, int] | None:
        """The one byte range a ``Range`` header asks for (inclusive), or None for the whole blob.

        Raises ``_HttpError`` 416 for a range past the end and for a malformed or multi-range
        ``bytes`` range; a range in another unit, or one whose ``If-Range`` names another
        version, is ignored."""
        raw = self.headers.get("Range")
        if raw is None:
            return None
        raw = raw.strip()
        if raw[:6].lower() != "bytes=":
            return None
        if_range = self.headers.get("If-Range")
        if if_range is not None and if_range.strip() != f'"{digest}"':
            return None
        unsatisfiable = {"Content-Range": f"bytes */{size}"}
        match = _RANGE.fullmatch("bytes=" + raw[6:].replace(" ", ""))
        if match is None or not any(match.groups()) or any(len(g) > 20 for g in match.groups()):
            raise _HttpError(
                HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE,
                f"unsupported Range {raw[:60]!r}: send one range, bytes=<first>-[<last>] or bytes=-<suffix>",
                headers=unsatisfiable,
            )
        first_text, last_text = match.groups()
        if not first_text:
            suffix = int(last_text)
            first, last = max(0, size - suffix), size - 1
            if suffix == 0 or size == 0:
                raise _HttpError(
                    HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE,
                    f"range {raw[:60]!r} selects no byte of a {size}-byte blob",
                    headers=unsatisfiable,
                )
            return first, last
        first = int(first_text)
        last = int(last_text) if last_text else size - 1
        if last < first:
            raise _HttpError(
                HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE,
                f"invalid Range {raw[:60]!r}: the last byte precedes the first",
                headers=unsatisfiable,
            )
        if first >= size:
            raise _HttpError(
                HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE,
                f"range {raw[:60]!r} starts at or past the end of the {size}-byte blob",
                headers=unsatisfiable,
            )
        return first, min(last, size - 1)

    @staticmethod
    def _digest(text: str) -> str:
        try:
            return normalize_digest(text)
        except InvalidBlobName as exc:
            raise _HttpError(HTTPStatus.BAD_REQUEST, str(exc)) from None

    @staticmethod
    def _alias(text: str) -> str:
        try:
            return validate_alias(text)
        except InvalidBlobName as exc:
            raise _HttpError(HTTPStatus.BAD_REQUEST, str(exc)) from None

    @staticmethod
    def _blob_headers(digest: str) -> dict[str, str]:
        return {DIGEST_HEADER: digest, "ETag": f'"{digest}"', "Cache-Control": "public, max-age=31536000, immutable"}


class BlobService:
    """An HTTP server over a local store, in a background thread or in the foreground.

    Parameters
    ----------
    store : LocalBlobStore
        Where blobs and aliases are kept.
    host : str, optional
        Interface to bind (default ``127.0.0.1``; ``0.0.0.0`` to serve other machines).
    port : int, optional
        TCP port; 0 (default) picks a free one.
    max_bytes : int, optional
        Largest accepted upload; larger ones get 413 (default
        :data:`~syncline.blobstore.store.DEFAULT_MAX_BLOB_BYTES`, the state of a 2e9-parameter model).
    public_url : str, optional
        Base URL other agents reach this service at, used in returned URIs (default :attr:`url`).
    request_timeout_s : float, optional
        Socket timeout per connection (a stalled client is dropped after it).
    max_concurrent_uploads : int, optional
        Uploads in progress at once (each streams to a temporary file: memory stays bounded).
    max_uploads_per_client : int, optional
        Of those, how many one client address may hold (default a quarter); its further uploads wait.
    max_uploads_per_network : int, optional
        How many one network (/24 for IPv4, /64 for IPv6) may hold (default half).
    min_upload_bytes_per_s : int, optional
        After ``request_timeout_s``, an upload slower than this on average is cut with 408, so slow
        clients cannot keep the slots from others.
    contended_min_upload_bytes_per_s : int, optional
        While another upload waits for a slot, the slowest upload that has had its slot for
        ``slow_upload_grace_s`` and averages less than this is cut with 503 (default 1 MiB/s).
    slow_upload_grace_s : float, optional
        See ``contended_min_upload_bytes_per_s`` (default 10 s).
    max_upload_s : float, optional
        The longest one upload may take (408 after; default an hour).
    client_quota_bytes, network_quota_bytes : int, optional
        Bytes one client address (one network) may upload per ``quota_window_s``; beyond, 429 with
        ``Retry-After``. Default: an eighth (a quarter) of the store's volume, at most 64 GiB
        (128 GiB); 0 switches the limit off.
    quota_window_s : float, optional
        The quota window (default an hour).
    exempt_clients : str or sequence of str, optional
        Client addresses or networks free of the per-client and per-network limits (slots, quota,
        the contended floor); they still share the ``max_concurrent_uploads`` slots. Default the
        loopback addresses ``127.0.0.1`` and ``::1``: a process on the service's own machine can
        fill its disk without the service anyway, and every agent of a devnet connects from
        ``127.0.0.1``, so a per-client cap there would make them queue behind each other. Behind
        a reverse proxy on the same machine every client is ``127.0.0.1``: pass ``""`` and limit
        at the proxy.
    max_connections_per_client : int, optional
        Open connections one client address may hold; more are closed unanswered.
    verify_bytes : int, optional
        Blobs up to this size are hashed before each whole-blob answer (a corrupt one answers 500);
        larger ones are hashed as they stream out (:data:`DEFAULT_VERIFY_BYTES`).
    min_free_bytes : int, optional
        Disk space an upload must leave free on the store's volume (507 otherwise).

    Examples
    --------
    >>> with BlobService(LocalBlobStore(root)) as service:  # doctest: +SKIP
    ...     HttpBlobStore(service.url).put(b"bytes")
    """

    def __init__(
        self,
        store: LocalBlobStore,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_bytes: int = DEFAULT_MAX_BLOB_BYTES,
        public_url: str | None = None,
        request_timeout_s: float = 30.0,
        max_concurrent_uploads: int = DEFAULT_MAX_CONCURRENT_UPLOADS,
        max_uploads_per_client: int | None = None,
        max_uploads_per_network: int | None = None,
        min_upload_bytes_per_s: int = DEFAULT_MIN_UPLOAD_BYTES_PER_S,
        contended_min_upload_bytes_per_s: int = DEFAULT_CONTENDED_MIN_BYTES_PER_S,
        slow_upload_grace_s: float = DEFAULT_SLOW_UPLOAD_GRACE_S,
        max_upload_s: float = DEFAULT_MAX_UPLOAD_S,
        client_quota_bytes: int | None = None,
        network_quota_bytes: int | None = None,
        quota_window_s: float = DEFAULT_QUOTA_WINDOW_S,
        exempt_clients: str | Sequence[str] = DEFAULT_EXEMPT_CLIENTS,
        max_connections_per_client: int = 64,
        verify_bytes: int = DEFAULT_VERIFY_BYTES,
        min_free_bytes: int = DEFAULT_MIN_FREE_BYTES,
    ) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        if max_concurrent_uploads < 1:
            raise ValueError(f"max_concurrent_uploads must be >= 1, got {max_concurrent_uploads}")
        self.store = store
        self.host = host
        self.port = port
        self.max_bytes = max_bytes
        self.request_timeout_s = request_timeout_s
        self.max_concurrent_uploads = max_concurrent_uploads
        self.max_uploads_per_client = max_uploads_per_client or max(1, max_concurrent_uploads // 4)
        self.max_uploads_per_network = max_uploads_per_network or max(1, max_concurrent_uploads // 2)
        self.min_upload_bytes_per_s = min_upload_bytes_per_s
        self.contended_min_upload_bytes_per_s = contended_min_upload_bytes_per_s
        self.slow_upload_grace_s = slow_upload_grace_s
        self.max_upload_s = max_upload_s
        if client_quota_bytes is None or network_quota_bytes is None:
            volume = shutil.disk_usage(store.root).total
            auto = min(MAX_DEFAULT_CLIENT_QUOTA_BYTES, max(volume // 8, 1 << 30))
            client_quota_bytes = auto if client_quota_bytes is None else client_quota_bytes
            network_quota_bytes = 2 * auto if network_quota_bytes is None else network_quota_bytes
        self.client_quota_bytes = client_quota_bytes
        self.network_quota_bytes = network_quota_bytes
        self.quota_window_s = quota_window_s
        self.exempt_clients = parse_networks(exempt_clients)
        self.max_connections_per_client = max_connections_per_client
        self.verify_bytes = verify_bytes
        self.min_free_bytes = min_free_bytes
        if not 1 <= self.max_uploads_per_client <= max_concurrent_uploads:
            raise ValueError(
                f"max_uploads_per_client must be in 1..{max_concurrent_uploads}, got {max_uploads_per_client}"
            )
        if not 1 <= self.max_uploads_per_network <= max_concurrent_uploads:
            raise ValueError(
                f"max_uploads_per_network must be in 1..{max_concurrent_uploads}, got {max_uploads_per_network}"
            )
        if min(min_upload_bytes_per_s, contended_min_upload_bytes_per_s, max_connections_per_client) < 1:
            raise ValueError(
                "min_upload_bytes_per_s, contended_min_upload_bytes_per_s and max_connections_per_client must be >= 1"
            )
        if min(client_quota_bytes, network_quota_bytes) < 0 or min(quota_window_s, max_upload_s) <= 0:
            raise ValueError("quotas must be >= 0 (0: none), quota_window_s and max_upload_s > 0")
        if slow_upload_grace_s < 0:
            raise ValueError(f"slow_upload_grace_s must be >= 0, got {slow_upload_grace_s}")
        self._public_url = public_url.rstrip("/") if public_url else None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def bind(self) -> None:
        """Open the listening socket (idempotent); :attr:`url` is known from then on."""
        with self._lock:
            if self._server is None:
                self._server = _Server((self.host, self.port), self)
                self.port = int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://host:port`` of the bound socket (a wildcard host is reported as loopback)."""
        if self._server is None:
            raise RuntimeError("BlobService is not bound yet; call start() or bind() first")
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self.host, self.host)
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def public_url(self) -> str:
        """Base of the URIs handed out for stored blobs."""
        return self._public_url or self.url

    def start(self) -> BlobService:
        """Bind and serve in a daemon thread; returns ``self``."""
        self.bind()
        assert self._server is not None
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="syncline-blobstore", daemon=True
            )
            self._thread.start()
            log.info("service.started", url=self.url, root=str(self.store.root), max_bytes=self.max_bytes)
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        with self._lock:
            server, thread = self._server, self._thread
            self._server, self._thread = None, None
        if server is None:
            return
        if thread is not None:
            server.shutdown()
            thread.join(timeout=10)
        server.server_close()
        log.info("service.stopped", port=self.port)

    def __enter__(self) -> BlobService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
