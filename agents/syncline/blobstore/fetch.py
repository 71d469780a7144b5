"""Verified, size-capped reads of a blob by URI, each under a total deadline.

:func:`fetch_uri` dispatches on the URI scheme (``http`` and ``https``; more with
:func:`register_fetcher`), reads at most ``max_bytes + 1`` bytes so an oversized or endless answer
is cut off early, gives up when a total deadline passes (a peer that trickles one byte per socket
timeout cannot hold the caller), and returns the bytes only if they hash to the expected digest.
:func:`http_request` is the one HTTP exchange under a deadline that the fetcher and the blob
service's client share.

Locators come from the chain, from specs and from peers, so they are untrusted: local schemes
(``file://``) are refused unless the caller passes ``allow_local=True`` for a locator its operator
configured.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import BinaryIO

from syncline.blobstore.store import (
    BlobNotFound,
    BlobStoreError,
    BlobTooLarge,
    BlobUnavailable,
    normalize_digest,
    verify,
)
from syncline.protocol.wire import load_bounded_json

READ_CHUNK = 1024 * 1024
MIN_TRANSFER_BYTES_PER_S = 1024 * 1024
"""The slowest transfer a default deadline allows for: ``timeout_s + max_bytes / this`` seconds."""
MAX_REDIRECTS = 3
MAX_ERROR_BODY = 4096


@dataclass
class Deadline:
    """A total time budget: ``timeout_s`` bounds each socket operation, ``expires_at`` (monotonic
    clock) the whole exchange."""

    timeout_s: float
    expires_at: float
    total_s: float = field(default=0.0)

    @classmethod
    def after(cls, total_s: float, *, timeout_s: float) -> Deadline:
        return cls(timeout_s=timeout_s, expires_at=time.monotonic() + total_s, total_s=total_s)

    def remaining(self) -> float:
        return self.expires_at - time.monotonic()

    def socket_timeout(self, what: str) -> float:
        """The timeout for the next socket operation; raises :class:`BlobUnavailable` once expired."""
        left = self.remaining()
        if left <= 0:
            raise BlobUnavailable(f"{what} exceeded its deadline of {self.total_s:g} s")
        return min(self.timeout_s, left)


Fetcher = Callable[[str, int, Deadline], bytes]
"""``fetcher(uri, max_bytes, deadline) -> bytes``: raw bytes, at most ``max_bytes``, not verified,
read before ``deadline`` expires."""

_FETCHERS: dict[str, Fetcher] = {}
_LOCAL_SCHEMES: set[str] = set()


def register_fetcher(scheme: str, fetcher: Fetcher, *, local: bool = False) -> None:
    """Teach :func:`fetch_uri` a new URI scheme (e.g. ``ipfs``).

    Parameters
    ----------
    scheme : str
        Lowercase URI scheme without ``://``.
    fetcher : Fetcher
        Returns the raw bytes at the URI before the deadline it is given expires; must raise
        :class:`BlobTooLarge` rather than return more than ``max_bytes`` bytes, and
        :class:`BlobNotFound` / :class:`BlobUnavailable` on failure. Verification is done by
        :func:`fetch_uri`.
    local : bool, optional
        The scheme reads this machine's own resources (like ``file``): refused for untrusted
        locators unless ``fetch_uri(..., allow_local=True)``.
    """
    _FETCHERS[scheme.lower()] = fetcher
    if local:
        _LOCAL_SCHEMES.add(scheme.lower())
    else:
        _LOCAL_SCHEMES.discard(scheme.lower())


def default_deadline_s(timeout_s: float, max_bytes: int) -> float:
    """Total seconds a fetch of up to ``max_bytes`` may take: the socket timeout plus the time to
    move ``max_bytes`` at :data:`MIN_TRANSFER_BYTES_PER_S`."""
    return timeout_s + max_bytes / MIN_TRANSFER_BYTES_PER_S


def fetch_uri(
    uri: str,
    *,
    expected_digest: str,
    max_bytes: int,
    timeout_s: float = 30.0,
    deadline_s: float | None = None,
    allow_local: bool = False,
) -> bytes:
    """Read the blob at ``uri`` and return it if it hashes to ``expected_digest``.

    Parameters
    ----------
    uri : str
        Locator of the blob (untrusted).
    expected_digest : str
        ``"0x"`` + 64 hex characters: the digest the caller trusts.
    max_bytes : int
        Size cap; reading stops as soon as it is exceeded.
    timeout_s : float, optional
        Timeout of each network operation.
    deadline_s : float, optional
        Total time the fetch may take, connecting, redirects and every read included (default
        :func:`default_deadline_s`).
    allow_local : bool, optional
        Accept local schemes (``file://``): only for a locator the operator configured, never for
        one taken from the chain, a spec or a peer.

    Returns
    -------
    bytes
        The verified blob.

    Raises
    ------
    BlobNotFound
        Nothing at the URI.
    BlobTooLarge
        The blob is larger than ``max_bytes``.
    BlobIntegrityError
        The bytes do not hash to ``expected_digest``.
    BlobUnavailable
        The source could not be reached, answered with an error, or missed the deadline.
    BlobStoreError
        An unsupported or refused (local) URI scheme, or invalid arguments.
    """
    expected = normalize_digest(expected_digest)
    if max_bytes < 0:
        raise BlobStoreError(f"max_bytes must be >= 0, got {max_bytes}")
    scheme = urllib.parse.urlsplit(uri).scheme.lower()
    fetcher = _FETCHERS.get(scheme)
    if fetcher is None:
        known = ", ".join(sorted(set(_FETCHERS) - _LOCAL_SCHEMES))
        raise BlobStoreError(f"cannot fetch {uri[:200]!r}: unsupported URI scheme {scheme!r} (supported: {known})")
    if scheme in _LOCAL_SCHEMES and not allow_local:
        raise BlobStoreError(
            f"refusing {scheme}:// locator {uri[:200]!r}: locators from the chain, specs or peers must be http(s)"
        )
    total = default_deadline_s(timeout_s, max_bytes) if deadline_s is None else deadline_s
    data = fetcher(uri, max_bytes, Deadline.after(total, timeout_s=timeout_s))
    if len(data) > max_bytes:  # a registered fetcher that ignored the cap
        raise BlobTooLarge(f"blob at {uri} is larger than max_bytes={max_bytes}")
    return verify(data, expected, source=uri)


def read_capped(
    stream: BinaryIO | http.client.HTTPResponse, max_bytes: int, *, source: str, deadline: Deadline | None = None
) -> bytes:
    """Read a stream to its end, but never more than ``max_bytes + 1`` bytes (nor past ``deadline``).

    Raises
    ------
    BlobTooLarge
        If the stream holds more than ``max_bytes`` bytes.
    BlobUnavailable
        If ``deadline`` expires first.
    """
    chunks: list[bytes] = []
    total = 0
    while True:
        if deadline is not None:
            deadline.socket_timeout(f"reading {source}")  # the monotonic clock, checked between reads
        chunk = stream.read(min(READ_CHUNK, max_bytes + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise BlobTooLarge(f"blob at {source} is larger than max_bytes={max_bytes}")
    return b"".join(chunks)


def _fetch_file(uri: str, max_bytes: int, deadline: Deadline) -> bytes:
    parts = urllib.parse.urlsplit(uri)
    if parts.netloc not in ("", "localhost"):
        raise BlobStoreError(f"cannot fetch {uri!r}: file URIs must name a local path (host {parts.netloc!r})")
    path = urllib.request.url2pathname(parts.path)
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > max_bytes:
                raise BlobTooLarge(f"blob at {uri} is {size} bytes, larger than max_bytes={max_bytes}")
            return read_capped(fh, max_bytes, source=uri, deadline=deadline)
    except FileNotFoundError:
        raise BlobNotFound(f"no blob at {uri}: file does not exist") from None
    except IsADirectoryError:
        raise BlobNotFound(f"no blob at {uri}: path is a directory") from None
    except PermissionError as exc:
        raise BlobUnavailable(f"cannot read {uri}: {exc.strerror}") from None


# ---------------------------------------------------------------------- HTTP under a deadline


@dataclass(frozen=True)
class HttpAnswer:
    """One HTTP answer: the status, the headers and the body (capped; for errors, a short prefix)."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    def error_message(self) -> str:
        """The ``error`` field of a JSON error body from the service, else the HTTP reason."""
        try:
            obj = load_bounded_json(self.body, max_bytes=MAX_ERROR_BODY, max_depth=2, what="error body")
        except ValueError:  # the body is informative only
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("error"), str):
            return " ".join(str(obj["error"]).split())[:300]
        try:
            return http.HTTPStatus(self.status).phrase
        except ValueError:
            return f"HTTP {self.status}"


class _Watchdog:
    """Shuts a connection's socket down when the deadline expires, waking any blocked read or write."""

    def __init__(self, conn: http.client.HTTPConnection, deadline: Deadline) -> None:
        self.conn = conn
        self.fired = False
        self._timer = threading.Timer(max(0.0, deadline.remaining()), self._fire)
        self._timer.daemon = True

    def _fire(self) -> None:
        self.fired = True
        sock = self.conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


def http_request(
    method: str,
    url: str,
    *,
    deadline: Deadline,
    max_bytes: int,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
) -> HttpAnswer:
    """One HTTP exchange that ends before ``deadline`` expires, whatever the peer does.

    The socket timeout bounds each operation, the monotonic clock is checked between reads, and a
    watchdog shuts the socket down at the deadline (a peer trickling header bytes is cut too).
    Redirects to ``http(s)`` are followed (at most :data:`MAX_REDIRECTS`, same deadline).

    Returns
    -------
    HttpAnswer
        Any status; the body is read in full (at most ``max_bytes``) for 2xx answers and up to
        :data:`MAX_ERROR_BODY` bytes otherwise.

    Raises
    ------
    BlobTooLarge
        A 2xx body larger than ``max_bytes``.
    BlobUnavailable
        The peer cannot be reached, breaks the protocol, or the deadline expires.
    """
    for _ in range(MAX_REDIRECTS + 1):
        answer = _exchange(method, url, deadline=deadline, max_bytes=max_bytes, body=body, headers=headers)
        location = answer.headers.get("location")
        if answer.status not in (301, 302, 303, 307, 308) or not location:
            return answer
        url = urllib.parse.urljoin(url, location)
        if urllib.parse.urlsplit(url).scheme.lower() not in ("http", "https"):
            raise BlobUnavailable(f"{method} redirected to a non-http(s) locator {url[:200]!r}")
        if answer.status == 303:
            method, body = "GET", None
    raise BlobUnavailable(f"{method} {url[:200]} redirected more than {MAX_REDIRECTS} times")


def _exchange(
    method: str,
    url: str,
    *,
    deadline: Deadline,
    max_bytes: int,
    body: bytes | None,
    headers: Mapping[str, str] | None,
) -> HttpAnswer:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise BlobStoreError(f"cannot request {url[:200]!r}: only http(s)://host URLs are supported")
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    connection = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    conn = connection(parts.hostname, parts.port, timeout=deadline.socket_timeout(f"{method} {url}"))
    watchdog = _Watchdog(conn, deadline)
    try:
        with watchdog:
            try:
                conn.connect()
            except OSError as exc:
                if watchdog.fired or deadline.remaining() <= 0:
                    raise
                where = f"{scheme}://{parts.netloc}"  # the reason first: a one-line log keeps it
                raise BlobUnavailable(f"cannot reach {where}: {exc.strerror or exc} ({method} {target[:120]})") from None
            conn.request(method, target, body=body, headers=dict(headers or {}))
            if conn.sock is not None:
                conn.sock.settimeout(deadline.socket_timeout(f"{method} {url}"))
            response = conn.getresponse()
            answer_headers = {k.lower(): v for k, v in response.getheaders()}
            if method == "HEAD":
                data = b""
            elif 200 <= response.status < 300:
                length = answer_headers.get("content-length", "")
                if length.isdigit() and int(length) > max_bytes:
                    raise BlobTooLarge(f"blob at {url} is {int(length)} bytes, larger than max_bytes={max_bytes}")
                data = _read_body(response, conn, max_bytes, url, deadline)
            else:
                data = response.read(MAX_ERROR_BODY)
            if watchdog.fired:
                raise BlobUnavailable(f"{method} {url} exceeded its deadline of {deadline.total_s:g} s")
            return HttpAnswer(status=int(response.status), headers=answer_headers, body=data)
    except BlobTooLarge:
        raise
    except BlobUnavailable:
        if watchdog.fired:  # the watchdog's shutdown looks like a hang-up to the reader
            raise BlobUnavailable(f"{method} {url} exceeded its deadline of {deadline.total_s:g} s") from None
        raise
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if watchdog.fired or deadline.remaining() <= 0:
            raise BlobUnavailable(f"{method} {url} exceeded its deadline of {deadline.total_s:g} s") from None
        raise BlobUnavailable(f"{method} {url} failed: {type(exc).__name__}: {exc}") from None
    finally:
        conn.close()


def _read_body(
    response: http.client.HTTPResponse, conn: http.client.HTTPConnection, max_bytes: int, url: str, deadline: Deadline
) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        timeout = deadline.socket_timeout(f"reading {url}")  # checked between reads
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        chunk = response.read1(min(READ_CHUNK, max_bytes + 1 - total))
        if not chunk:
            if response.length:  # Content-Length promised more: the peer hung up or was cut off
                raise BlobUnavailable(f"reading {url}: the answer ended after {total} bytes")
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise BlobTooLarge(f"blob at {url} is larger than max_bytes={max_bytes}")


def _fetch_http(uri: str, max_bytes: int, deadline: Deadline) -> bytes:
    answer = http_request(
        "GET", uri, deadline=deadline, max_bytes=max_bytes, headers={"Accept": "application/octet-stream"}
    )
    if answer.status == 200:
        return answer.body
    if answer.status == 404:
        raise BlobNotFound(f"no blob at {uri}: {answer.error_message()}")
    raise BlobUnavailable(f"fetching {uri} failed with HTTP {answer.status}: {answer.error_message()}")


register_fetcher("file", _fetch_file, local=True)
register_fetcher("http", _fetch_http)
register_fetcher("https", _fetch_http)
