"""Verified, size-capped reads of a blob by URI.

:func:`fetch_uri` dispatches on the URI scheme (``http``, ``https``, ``file``; more with
:func:`register_fetcher`), reads at most ``max_bytes + 1`` bytes so an oversized or endless
answer is cut off early, and returns the bytes only if they hash to the expected digest.
"""

from __future__ import annotations

import http.client
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
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

Fetcher = Callable[[str, int, float], bytes]
"""``fetcher(uri, max_bytes, timeout_s) -> bytes``: raw bytes, at most ``max_bytes``, not verified."""

_FETCHERS: dict[str, Fetcher] = {}


def register_fetcher(scheme: str, fetcher: Fetcher) -> None:
    """Teach :func:`fetch_uri` a new URI scheme (e.g. ``ipfs``).

    Parameters
    ----------
    scheme : str
        Lowercase URI scheme without ``://``.
    fetcher : Fetcher
        Returns the raw bytes at the URI; must raise :class:`BlobTooLarge` rather than return more
        than ``max_bytes`` bytes, and :class:`BlobNotFound` / :class:`BlobUnavailable` on failure.
        Verification is done by :func:`fetch_uri`.
    """
    _FETCHERS[scheme.lower()] = fetcher


def fetch_uri(uri: str, *, expected_digest: str, max_bytes: int, timeout_s: float = 30.0) -> bytes:
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
        The source could not be reached or answered with an error.
    BlobStoreError
        Unsupported URI scheme or invalid arguments.
    """
    expected = normalize_digest(expected_digest)
    if max_bytes < 0:
        raise BlobStoreError(f"max_bytes must be >= 0, got {max_bytes}")
    scheme = urllib.parse.urlsplit(uri).scheme.lower()
    fetcher = _FETCHERS.get(scheme)
    if fetcher is None:
        known = ", ".join(sorted(_FETCHERS))
        raise BlobStoreError(f"cannot fetch {uri!r}: unsupported URI scheme {scheme!r} (supported: {known})")
    data = fetcher(uri, max_bytes, timeout_s)
    if len(data) > max_bytes:  # a registered fetcher that ignored the cap
        raise BlobTooLarge(f"blob at {uri} is larger than max_bytes={max_bytes}")
    return verify(data, expected, source=uri)


def read_capped(stream: BinaryIO | http.client.HTTPResponse, max_bytes: int, *, source: str) -> bytes:
    """Read a stream to its end, but never more than ``max_bytes + 1`` bytes.

    Raises
    ------
    BlobTooLarge
        If the stream holds more than ``max_bytes`` bytes.
    """
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = stream.read(min(READ_CHUNK, max_bytes + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise BlobTooLarge(f"blob at {source} is larger than max_bytes={max_bytes}")
    return b"".join(chunks)


def _fetch_file(uri: str, max_bytes: int, timeout_s: float) -> bytes:
    parts = urllib.parse.urlsplit(uri)
    if parts.netloc not in ("", "localhost"):
        raise BlobStoreError(f"cannot fetch {uri!r}: file URIs must name a local path (host {parts.netloc!r})")
    path = urllib.request.url2pathname(parts.path)
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > max_bytes:
                raise BlobTooLarge(f"blob at {uri} is {size} bytes, larger than max_bytes={max_bytes}")
            return read_capped(fh, max_bytes, source=uri)
    except FileNotFoundError:
        raise BlobNotFound(f"no blob at {uri}: file does not exist") from None
    except IsADirectoryError:
        raise BlobNotFound(f"no blob at {uri}: path is a directory") from None
    except PermissionError as exc:
        raise BlobUnavailable(f"cannot read {uri}: {exc.strerror}") from None


def http_error_message(exc: urllib.error.HTTPError) -> str:
    """The ``error`` field of a JSON error body from the service, else the HTTP reason."""
    try:
        body = exc.read(4096)
        obj = load_bounded_json(body, max_bytes=4096, max_depth=2, what="error body")
        if isinstance(obj, dict) and isinstance(obj.get("error"), str):
            return str(obj["error"])
    except Exception:  # the body is informative only
        pass
    return str(exc.reason)


def _fetch_http(uri: str, max_bytes: int, timeout_s: float) -> bytes:
    request = urllib.request.Request(uri, method="GET", headers={"Accept": "application/octet-stream"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            length = response.headers.get("Content-Length")
            if length is not None and length.isdigit() and int(length) > max_bytes:
                raise BlobTooLarge(f"blob at {uri} is {int(length)} bytes, larger than max_bytes={max_bytes}")
            return read_capped(response, max_bytes, source=uri)
    except urllib.error.HTTPError as exc:
        with exc:
            message = http_error_message(exc)
            if exc.code == 404:
                raise BlobNotFound(f"no blob at {uri}: {message}") from None
            raise BlobUnavailable(f"fetching {uri} failed with HTTP {exc.code}: {message}") from None
    except urllib.error.URLError as exc:
        raise BlobUnavailable(f"cannot reach {uri}: {exc.reason}") from None
    except (OSError, http.client.HTTPException) as exc:
        raise BlobUnavailable(f"fetching {uri} failed: {exc!r}") from None


register_fetcher("file", _fetch_file)
register_fetcher("http", _fetch_http)
register_fetcher("https", _fetch_http)
