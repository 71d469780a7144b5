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
    address (503 with ``Retry-After`` when none frees up in time); an upload slower than
    ``min_upload_bytes_per_s`` after ``request_timeout_s`` is cut with 408.
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
import json
import os
import re
import shutil
import socket
import socketserver
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog

from syncline.blobstore.local import LocalBlobStore
from syncline.blobstore.store import (
    CHUNK_BYTES,
    DEFAULT_MAX_BLOB_BYTES,
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


class _HttpError(Exception):
    """Ends a request with a JSON error response."""

    def __init__(self, status: HTTPStatus, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


class _UploadGate:
    """Upload slots shared fairly: at most ``total`` uploads are buffered at once and at most
    ``per_client`` of them from one client address, so one slow or greedy client cannot take
    every slot. An upload over its client's share waits for that share (it holds no global slot
    meanwhile); waits end after ``wait_s``."""

    def __init__(self, *, total: int, per_client: int, wait_s: float) -> None:
        self.total = threading.BoundedSemaphore(total)
        self.per_client = per_client
        self.wait_s = wait_s
        self._active: dict[str, int] = {}
        self._changed = threading.Condition()

    @contextlib.contextmanager
    def slot(self, client: str) -> Iterator[None]:
        """Hold one upload slot for ``client``; raises ``_HttpError`` 503 when none frees up in time."""
        give_up = time.monotonic() + self.wait_s
        with self._changed:
            if not self._changed.wait_for(lambda: self._active.get(client, 0) < self.per_client, self.wait_s):
                raise _HttpError(
                    HTTPStatus.SERVICE_UNAVAILABLE,
                    f"this client already has {self.per_client} uploads in progress; retry later",
                    headers={"Retry-After": "1"},
                )
            self._active[client] = self._active.get(client, 0) + 1
        try:
            if not self.total.acquire(timeout=max(0.0, give_up - time.monotonic())):
                raise _HttpError(
                    HTTPStatus.SERVICE_UNAVAILABLE,
                    "too many concurrent uploads; retry later",
                    headers={"Retry-After": "1"},
                )
            try:
                yield
            finally:
                self.total.release()
        finally:
            with self._changed:
                self._active[client] -= 1
                if not self._active[client]:
                    del self._active[client]
                self._changed.notify_all()


class _UploadPace:
    """The slowest acceptable upload: after ``grace_s``, at least ``min_bytes_per_s`` on average."""

    def __init__(self, *, grace_s: float, min_bytes_per_s: int) -> None:
        self.started = time.monotonic()
        self.grace_s = grace_s
        self.min_bytes_per_s = min_bytes_per_s

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def wait_s(self, received: int) -> float:
        """Seconds the next byte may still take before the client is too slow (<= 0: cut it now)."""
        due = self.grace_s + (received + 1) / self.min_bytes_per_s
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
            wait_s=service.request_timeout_s,
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
        with self.server.upload_gate.slot(_client_key(self.client_address)):
            try:
                ref = service.store.put_stream(self._body_chunks(length), alias=alias, alias_signature=signature)
            except InvalidBlobName as exc:  # a signature that does not recover
                raise _HttpError(HTTPStatus.BAD_REQUEST, str(exc)) from None
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

    def _body_chunks(self, length: int) -> Iterator[bytes]:
        """The upload's bytes as they arrive, cutting a client slower than the service's floor."""
        service = self.server.service
        floor = _UploadPace(grace_s=service.request_timeout_s, min_bytes_per_s=service.min_upload_bytes_per_s)
        remaining = length
        try:
            while remaining > 0:
                wait = floor.wait_s(length - remaining)
                if wait <= 0:
                    self._unread = -1
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
                    raise _HttpError(
                        HTTPStatus.REQUEST_TIMEOUT,
                        f"upload too slow or stalled: {length - remaining} of {length} bytes after "
                        f"{floor.elapsed_s():.1f} s (at least {service.min_upload_bytes_per_s} bytes/s after "
                        f"{service.request_timeout_s:g} s)",
                    ) from None
                if not chunk:
                    self._unread = -1
                    raise _HttpError(
                        HTTPStatus.BAD_REQUEST,
                        f"body ended after {length - remaining} of {length} bytes (Content-Length)",
                    )
                remaining -= len(chunk)
                self._unread = remaining
                self._bytes_in += len(chunk)
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
        Of those, how many one client address may hold (default half); its further uploads wait.
    min_upload_bytes_per_s : int, optional
        After ``request_timeout_s``, an upload slower than this on average is cut with 408, so slow
        clients cannot keep the slots from others.
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
        max_concurrent_uploads: int = 8,
        max_uploads_per_client: int | None = None,
        min_upload_bytes_per_s: int = 256 * 1024,
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
        self.max_uploads_per_client = max_uploads_per_client or max(1, max_concurrent_uploads // 2)
        self.min_upload_bytes_per_s = min_upload_bytes_per_s
        self.max_connections_per_client = max_connections_per_client
        self.verify_bytes = verify_bytes
        self.min_free_bytes = min_free_bytes
        if not 1 <= self.max_uploads_per_client <= max_concurrent_uploads:
            raise ValueError(
                f"max_uploads_per_client must be in 1..{max_concurrent_uploads}, got {max_uploads_per_client}"
            )
        if min_upload_bytes_per_s < 1 or max_connections_per_client < 1:
            raise ValueError("min_upload_bytes_per_s and max_connections_per_client must be >= 1")
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
