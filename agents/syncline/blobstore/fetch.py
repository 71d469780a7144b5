"""Verified, size-capped reads of a blob by URI, each under a total deadline.

:func:`fetch_uri` dispatches on the URI scheme (``http`` and ``https``; more with
:func:`register_fetcher`), reads at most ``max_bytes + 1`` bytes so an oversized or endless answer
is cut off early, gives up when a total deadline passes (a peer that trickles one byte per socket
timeout cannot hold the caller), and returns the bytes only if they hash to the expected digest.
:func:`fetch_uri_to_file` does the same into a file, in bounded memory. Both hash the bytes as they
arrive, and an ``http(s)`` transfer that breaks off mid-body resumes where it stopped with a
``Range`` request (at most :data:`MAX_STALLED_ATTEMPTS` tries in a row without progress, at most
:data:`MAX_TRANSFER_ATTEMPTS` in all, every one under the same total deadline); the digest is
checked over the whole blob at the end. :func:`http_request` is the one HTTP exchange under a
deadline that the fetcher and the blob service's client share.

Locators come from the chain, from specs and from peers, so they are untrusted: local schemes
(``file://``) are refused unless the caller passes ``allow_local=True`` for a locator its operator
configured.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import os
import re
import socket
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

from syncline.blobstore.store import (
    CHUNK_BYTES,
    BlobIntegrityError,
    BlobNotFound,
    BlobStoreError,
    BlobTooLarge,
    BlobUnavailable,
    HashingSink,
    normalize_digest,
    read_chunks,
    verify,
    write_file_atomic,
)
from syncline.protocol.wire import load_bounded_json

READ_CHUNK = CHUNK_BYTES
MIN_TRANSFER_BYTES_PER_S = 1024 * 1024
"""The slowest transfer a default deadline allows for: ``timeout_s + max_bytes / this`` seconds."""
MAX_REDIRECTS = 3
MAX_ERROR_BODY = 4096
MAX_STALLED_ATTEMPTS = 4
"""Tries in a row a broken transfer gets without receiving a byte, before it is given up."""
MAX_TRANSFER_ATTEMPTS = 64
"""Tries a transfer gets in all (a resumed one counts again), whatever each of them received."""
RETRY_PAUSE_S = (0.05, 0.2, 1.0)
"""Pause before the 1st, 2nd and each later retry of a broken transfer."""
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")
_UNSATISFIED_RANGE = re.compile(r"bytes \*/(\d+)")


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


class Sink(Protocol):
    """Where a streamed blob goes: bytes are hashed as they are written, so the digest of what it
    holds is known without reading it back. It may already hold a prefix of the blob (a resumed
    transfer): :attr:`size` bytes, which a :data:`Streamer` continues from or drops with :meth:`reset`."""

    size: int

    def write(self, chunk: bytes) -> None: ...

    def reset(self) -> None: ...

    def digest(self) -> str: ...


Streamer = Callable[[str, Sink, int, Deadline], None]
"""``streamer(uri, sink, max_bytes, deadline)``: writes the blob at ``uri`` into ``sink`` (continuing
from ``sink.size`` or resetting it), never more than ``max_bytes`` in all, before ``deadline``
expires; raises like a :data:`Fetcher`. Verification is done by the caller."""


_FETCHERS: dict[str, Fetcher] = {}
_STREAMERS: dict[str, Streamer] = {}
_LOCAL_SCHEMES: set[str] = set()


def register_fetcher(
    scheme: str, fetcher: Fetcher | None = None, *, local: bool = False, streamer: Streamer | None = None
) -> None:
    """Teach :func:`fetch_uri` and :func:`fetch_uri_to_file` a new URI scheme (e.g. ``ipfs``).

    Parameters
    ----------
    scheme : str
        Lowercase URI scheme without ``://``.
    fetcher : Fetcher, optional
        Returns the raw bytes at the URI before the deadline it is given expires; must raise
        :class:`BlobTooLarge` rather than return more than ``max_bytes`` bytes, and
        :class:`BlobNotFound` / :class:`BlobUnavailable` on failure. Verification is done by
        :func:`fetch_uri`.
    local : bool, optional
        The scheme reads this machine's own resources (like ``file``): refused for untrusted
        locators unless ``fetch_uri(..., allow_local=True)``.
    streamer : Streamer, optional
        Writes the blob into a :class:`Sink` instead (bounded memory; used by both functions and
        preferred over ``fetcher``). At least one of the two is needed.
    """
    if fetcher is None and streamer is None:
        raise ValueError(f"register_fetcher({scheme!r}) needs a fetcher or a streamer")
    key = scheme.lower()
    for table, value in ((_FETCHERS, fetcher), (_STREAMERS, streamer)):
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value  # type: ignore[assignment]
    if local:
        _LOCAL_SCHEMES.add(key)
    else:
        _LOCAL_SCHEMES.discard(key)


def default_deadline_s(timeout_s: float, max_bytes: int) -> float:
    """Total seconds a fetch of up to ``max_bytes`` may take: the socket timeout plus the time to
    move ``max_bytes`` at :data:`MIN_TRANSFER_BYTES_PER_S`."""
    return timeout_s + max_bytes / MIN_TRANSFER_BYTES_PER_S


def _scheme_of(uri: str, *, allow_local: bool) -> str:
    scheme = urllib.parse.urlsplit(uri).scheme.lower()
    if scheme not in _FETCHERS and scheme not in _STREAMERS:
        known = ", ".join(sorted((set(_FETCHERS) | set(_STREAMERS)) - _LOCAL_SCHEMES))
        raise BlobStoreError(f"cannot fetch {uri[:200]!r}: unsupported URI scheme {scheme!r} (supported: {known})")
    if scheme in _LOCAL_SCHEMES and not allow_local:
        raise BlobStoreError(
            f"refusing {scheme}:// locator {uri[:200]!r}: locators from the chain, specs or peers must be http(s)"
        )
    return scheme


def _check_sink(sink: Sink, expected: str, max_bytes: int, uri: str) -> None:
    if sink.size > max_bytes:  # a registered streamer that ignored the cap
        raise BlobTooLarge(f"blob at {uri} is larger than max_bytes={max_bytes}")
    actual = sink.digest()
    if actual != expected:
        raise BlobIntegrityError(
            f"integrity check failed for {uri}: expected keccak256 {expected}, got {actual} ({sink.size} bytes)"
        )


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
        Total time the fetch may take, connecting, redirects, resumed transfers and every read
        included (default :func:`default_deadline_s`).
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
    scheme = _scheme_of(uri, allow_local=allow_local)
    total = default_deadline_s(timeout_s, max_bytes) if deadline_s is None else deadline_s
    deadline = Deadline.after(total, timeout_s=timeout_s)
    streamer = _STREAMERS.get(scheme)
    if streamer is not None:
        buffer = io.BytesIO()
        sink = HashingSink(buffer)
        streamer(uri, sink, max_bytes, deadline)
        _check_sink(sink, expected, max_bytes, uri)
        return buffer.getvalue()
    data = _FETCHERS[scheme](uri, max_bytes, deadline)
    if len(data) > max_bytes:  # a registered fetcher that ignored the cap
        raise BlobTooLarge(f"blob at {uri} is larger than max_bytes={max_bytes}")
    return verify(data, expected, source=uri)


def partial_path(dest: Path, digest: str) -> Path:
    """Where :func:`fetch_uri_to_file` keeps the bytes of ``digest`` received so far for ``dest``."""
    return dest.with_name(f".{dest.name[:64]}.{normalize_digest(digest)[2:18]}.part")


def fetch_uri_to_file(
    uri: str,
    dest: Path,
    *,
    expected_digest: str,
    max_bytes: int,
    timeout_s: float = 30.0,
    deadline_s: float | None = None,
    allow_local: bool = False,
    fsync: bool = True,
) -> int:
    """Like :func:`fetch_uri`, but stream the blob into the file ``dest`` in bounded memory.

    The bytes go to a partial file next to ``dest`` (:func:`partial_path`) and are hashed as they
    arrive; once they hash to ``expected_digest`` the partial file is renamed over ``dest``, so
    ``dest`` never holds unverified bytes. A transfer that breaks off resumes from the bytes
    received (a ``Range`` request), within this call and, when this call gives up as unavailable,
    in the next call for the same ``dest`` and digest, which hashes the partial file first. A
    source that is not there, too large or wrong leaves no partial file behind.

    Returns
    -------
    int
        The blob's size in bytes.

    Raises
    ------
    BlobNotFound, BlobTooLarge, BlobIntegrityError, BlobUnavailable, BlobStoreError
        As :func:`fetch_uri`.
    """
    expected = normalize_digest(expected_digest)
    if max_bytes < 0:
        raise BlobStoreError(f"max_bytes must be >= 0, got {max_bytes}")
    scheme = _scheme_of(uri, allow_local=allow_local)
    dest = Path(dest)
    total = default_deadline_s(timeout_s, max_bytes) if deadline_s is None else deadline_s
    deadline = Deadline.after(total, timeout_s=timeout_s)
    streamer = _STREAMERS.get(scheme)
    if streamer is None:
        data = _FETCHERS[scheme](uri, max_bytes, deadline)
        if len(data) > max_bytes:
            raise BlobTooLarge(f"blob at {uri} is larger than max_bytes={max_bytes}")
        verify(data, expected, source=uri)
        return write_file_atomic(dest, (data,), fsync=fsync)
    part = partial_path(dest, expected)
    fd = os.open(part, os.O_RDWR | os.O_CREAT, 0o644)
    keep = False
    try:
        with os.fdopen(fd, "r+b") as fh:
            sink = HashingSink(fh, keep_up_to=max_bytes)
            try:
                streamer(uri, sink, max_bytes, deadline)
            except BlobUnavailable:
                keep = sink.size > 0  # the next call resumes from here
                raise
            _check_sink(sink, expected, max_bytes, uri)
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.replace(part, dest)
        return sink.size
    finally:
        if not keep:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(part)


def _stream_file(uri: str, sink: Sink, max_bytes: int, deadline: Deadline) -> None:
    parts = urllib.parse.urlsplit(uri)
    if parts.netloc not in ("", "localhost"):
        raise BlobStoreError(f"cannot fetch {uri!r}: file URIs must name a local path (host {parts.netloc!r})")
    path = urllib.request.url2pathname(parts.path)
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > max_bytes:
                raise BlobTooLarge(f"blob at {uri} is {size} bytes, larger than max_bytes={max_bytes}")
            if sink.size > size:
                sink.reset()
            fh.seek(sink.size)
            for chunk in read_chunks(fh, limit=max_bytes + 1 - sink.size):
                deadline.socket_timeout(f"reading {uri}")  # the monotonic clock, checked between reads
                sink.write(chunk)
            if sink.size > max_bytes:
                raise BlobTooLarge(f"blob at {uri} is larger than max_bytes={max_bytes}")
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


class TransferBroken(BlobUnavailable):
    """A body stopped arriving part-way (the peer hung up or the connection broke): resumable."""


SinkFor = Callable[[int, Mapping[str, str]], "tuple[Sink, int]"]
"""``sink_for(status, headers) -> (sink, limit)`` for a 2xx answer: stream its body into ``sink``,
which may hold at most ``limit`` bytes in all (raises to refuse the answer)."""


def http_request(
    method: str,
    url: str,
    *,
    deadline: Deadline,
    max_bytes: int,
    body: bytes | BinaryIO | None = None,
    headers: Mapping[str, str] | None = None,
    sink_for: SinkFor | None = None,
) -> HttpAnswer:
    """One HTTP exchange that ends before ``deadline`` expires, whatever the peer does.

    The socket timeout bounds each operation, the monotonic clock is checked between reads, and a
    watchdog shuts the socket down at the deadline (a peer trickling header bytes is cut too).
    Redirects to ``http(s)`` are followed (at most :data:`MAX_REDIRECTS`, same deadline).

    Parameters
    ----------
    body : bytes or binary file, optional
        The request body; a file is streamed from its current position (send ``Content-Length``)
        and rewound for each redirect.
    sink_for : SinkFor, optional
        Stream a 2xx body into the sink it returns instead of reading it into memory.

    Returns
    -------
    HttpAnswer
        Any status; the body is read in full (at most ``max_bytes``) for 2xx answers (empty when it
        went to a sink) and up to :data:`MAX_ERROR_BODY` bytes otherwise.

    Raises
    ------
    BlobTooLarge
        A 2xx body larger than ``max_bytes``.
    TransferBroken
        A body streamed into a sink stopped part-way (what arrived stays in the sink).
    BlobUnavailable
        The peer cannot be reached, breaks the protocol, or the deadline expires.
    """
    start = body.tell() if body is not None and not isinstance(body, bytes) else 0
    for _ in range(MAX_REDIRECTS + 1):
        if body is not None and not isinstance(body, bytes):
            body.seek(start)
        answer = _exchange(
            method, url, deadline=deadline, max_bytes=max_bytes, body=body, headers=headers, sink_for=sink_for
        )
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
    body: bytes | BinaryIO | None,
    headers: Mapping[str, str] | None,
    sink_for: SinkFor | None = None,
) -> HttpAnswer:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise BlobStoreError(f"cannot request {url[:200]!r}: only http(s)://host URLs are supported")
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    connection = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    conn = connection(
        parts.hostname, parts.port, timeout=deadline.socket_timeout(f"{method} {url}"), blocksize=READ_CHUNK
    )
    watchdog = _Watchdog(conn, deadline)
    try:
        with watchdog:
            try:
                conn.connect()
            except OSError as exc:
                if watchdog.fired or deadline.remaining() <= 0:
                    raise
                where = f"{scheme}://{parts.netloc}"  # the reason first: a one-line log keeps it
                raise BlobUnavailable(
                    f"cannot reach {where}: {exc.strerror or exc} ({method} {target[:120]})"
                ) from None
            conn.request(method, target, body=body, headers=dict(headers or {}))
            if conn.sock is not None:
                conn.sock.settimeout(deadline.socket_timeout(f"{method} {url}"))
            response = conn.getresponse()
            answer_headers = {k.lower(): v for k, v in response.getheaders()}
            if method == "HEAD":
                data = b""
            elif 200 <= response.status < 300 and sink_for is not None:
                sink, limit = sink_for(int(response.status), answer_headers)
                _stream_body(response, conn, sink, limit, url, deadline)
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
    except (BlobTooLarge, BlobIntegrityError):
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
    buffer = io.BytesIO()
    _stream_body(response, conn, HashingSink(buffer), max_bytes, url, deadline)
    return buffer.getvalue()


def _stream_body(
    response: http.client.HTTPResponse,
    conn: http.client.HTTPConnection,
    sink: Sink,
    limit: int,
    url: str,
    deadline: Deadline,
) -> None:
    """Copy the answer's body into ``sink`` (which may hold at most ``limit`` bytes in all)."""
    received = 0
    while True:
        timeout = deadline.socket_timeout(f"reading {url}")  # checked between reads
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        try:
            chunk = response.read1(min(READ_CHUNK, limit + 1 - sink.size))
        except (OSError, http.client.HTTPException) as exc:
            if deadline.remaining() <= 0:
                raise
            raise TransferBroken(
                f"reading {url}: the connection broke after {received} bytes ({type(exc).__name__})"
            ) from None
        if not chunk:
            if response.length:  # Content-Length promised more: the peer hung up or was cut off
                raise TransferBroken(f"reading {url}: the answer ended after {received} bytes")
            return
        sink.write(chunk)
        received += len(chunk)
        if sink.size > limit:
            raise BlobTooLarge(f"blob at {url} is larger than max_bytes={limit}")


def _stream_http(uri: str, sink: Sink, max_bytes: int, deadline: Deadline) -> None:
    """GET ``uri`` into ``sink``; a transfer that breaks off resumes with ``Range: bytes=<have>-``."""
    stalled = attempts = 0
    while True:
        attempts += 1
        before = sink.size
        try:
            if _get_range(uri, sink, max_bytes, deadline):
                return
        except BlobUnavailable as exc:
            # A body cut off part-way is retried; so is any failure (a refused or dropped
            # connection) once some bytes are in, so a service restart does not lose them. A source
            # that fails before its first byte is reported at once, and the deadline is final.
            if deadline.remaining() <= 0 or not (isinstance(exc, TransferBroken) or sink.size):
                raise
            stalled = 0 if sink.size > before else stalled + 1
            if stalled >= MAX_STALLED_ATTEMPTS or attempts >= MAX_TRANSFER_ATTEMPTS:
                raise BlobUnavailable(
                    f"{_one_line(exc)}; gave up after {attempts} attempts ({sink.size} bytes received)"
                ) from None
        time.sleep(max(0.0, min(RETRY_PAUSE_S[min(attempts, len(RETRY_PAUSE_S)) - 1], deadline.remaining())))


def _one_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:300]


def _get_range(uri: str, sink: Sink, max_bytes: int, deadline: Deadline) -> bool:
    """One GET of what ``sink`` lacks; True once it holds the whole blob, False to ask again."""
    have = sink.size
    headers = {"Accept": "application/octet-stream"}
    if have:
        headers["Range"] = f"bytes={have}-"

    def sink_for(status: int, answer: Mapping[str, str]) -> tuple[Sink, int]:
        length = answer.get("content-length", "")
        if status == 206 and have:
            match = _CONTENT_RANGE.fullmatch(answer.get("content-range", "").strip())
            if match is None:
                raise BlobUnavailable(f"{uri} answered a Range request without a valid Content-Range")
            first, last, total = (int(g) for g in match.groups())
            if total > max_bytes:
                raise BlobTooLarge(f"blob at {uri} is {total} bytes, larger than max_bytes={max_bytes}")
            if first != have or last != total - 1 or (length.isdigit() and int(length) != total - have):
                raise BlobUnavailable(f"{uri} answered bytes={have}- with another range ({match.group(0)})")
            return sink, total
        if status != 200:
            raise BlobUnavailable(f"fetching {uri} failed: unexpected HTTP {status}")
        if length.isdigit() and int(length) > max_bytes:
            raise BlobTooLarge(f"blob at {uri} is {int(length)} bytes, larger than max_bytes={max_bytes}")
        if have:
            sink.reset()  # the server ignored the Range: the whole blob again
        return sink, max_bytes

    answer = http_request("GET", uri, deadline=deadline, max_bytes=max_bytes, headers=headers, sink_for=sink_for)
    if answer.status in (200, 206):
        return True
    if answer.status == 416 and have:
        match = _UNSATISFIED_RANGE.fullmatch(answer.headers.get("content-range", "").strip())
        if match is not None and int(match.group(1)) == have:
            return True  # the sink already holds every byte
        sink.reset()
        return False
    if answer.status == 404:
        raise BlobNotFound(f"no blob at {uri}: {answer.error_message()}")
    raise BlobUnavailable(f"fetching {uri} failed with HTTP {answer.status}: {answer.error_message()}")


register_fetcher("file", local=True, streamer=_stream_file)
register_fetcher("http", streamer=_stream_http)
register_fetcher("https", streamer=_stream_http)
