"""A :class:`~syncline.blobstore.store.BlobStore` that talks to a remote :class:`BlobService`.

Only the stdlib is used, every request has a socket timeout and a total deadline
(:func:`~syncline.blobstore.fetch.http_request`), and nothing the server says is trusted: uploaded
digests are recomputed locally and downloads are verified.
"""

from __future__ import annotations

import itertools
import random
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

from syncline.blobstore.fetch import Deadline, HttpAnswer, default_deadline_s, fetch_uri_to_file, http_request
from syncline.blobstore.http_service import ALIAS_HEADER, ALIAS_SIGNATURE_HEADER
from syncline.blobstore.store import (
    DEFAULT_MAX_BLOB_BYTES,
    MAX_ALIAS_SIGNERS,
    MAX_LISTED_CANDIDATES,
    AliasFull,
    BlobIntegrityError,
    BlobRef,
    BlobStoreBase,
    BlobTooLarge,
    BlobUnavailable,
    InvalidBlobName,
    digest_of,
    digest_of_file,
    is_digest,
    normalize_address,
    normalize_digest,
    validate_alias,
)
from syncline.protocol.wire import WireFormatError, load_bounded_json

_MAX_JSON_BYTES = 64 * 1024
RETRY_STATUSES = (429, 503)
"""Answers to an upload that mean "busy, try again" (an over-quota client, every slot taken)."""
UPLOAD_BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
"""The least pause before the 1st, 2nd, ... retry of a busy upload (the last one repeats); a longer
``Retry-After`` from the service wins."""
DEFAULT_MAX_RETRY_WAIT_S = 120.0


class HttpBlobStore(BlobStoreBase):
    """Client of a blob service at ``base_url``.

    Parameters
    ----------
    base_url : str
        ``http(s)://host:port`` of the service (a trailing slash is ignored).
    timeout_s : float, optional
        Timeout of each socket operation (connect, each read / write); each request also has a
        total deadline (:func:`~syncline.blobstore.fetch.default_deadline_s`).
    max_bytes : int, optional
        Largest blob :meth:`put` uploads and :meth:`get` downloads when the caller names no smaller
        cap (default :data:`~syncline.blobstore.store.DEFAULT_MAX_BLOB_BYTES`, a 2e9-parameter state).
    max_retry_wait_s : float, optional
        How long an upload the service answers 429 or 503 ("busy") keeps being retried, pausing for
        the answer's ``Retry-After`` or the growing :data:`UPLOAD_BACKOFF_S`, whichever is longer
        (with jitter); a ``Retry-After`` beyond what is left of it fails at once.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 30.0,
        max_bytes: int = DEFAULT_MAX_BLOB_BYTES,
        max_retry_wait_s: float = DEFAULT_MAX_RETRY_WAIT_S,
    ) -> None:
        super().__init__(fetch_timeout_s=timeout_s)
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"blob service URL must be http(s)://host[:port], got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.max_retry_wait_s = max_retry_wait_s

    def __repr__(self) -> str:
        return f"HttpBlobStore({self.base_url!r})"

    def uri_for(self, digest: str) -> str:
        """``<base_url>/blobs/<digest>``."""
        return f"{self.base_url}/blobs/{normalize_digest(digest)}"

    # ------------------------------------------------------------------ BlobBackend

    def put(self, data: bytes, *, alias: str | None = None, alias_signature: bytes | None = None) -> BlobRef:
        """Upload ``data`` and optionally add it as a candidate of ``alias`` (signed: the signer's slot).

        Returns
        -------
        BlobRef
            Digest (computed locally and checked against the server's), size and
            ``<base_url>/blobs/<digest>``.

        Raises
        ------
        BlobTooLarge
            ``data`` exceeds this client's ``max_bytes`` or the server's limit (HTTP 413).
        BlobIntegrityError
            The server reports a different digest or size than the bytes sent.
        BlobUnavailable
            The service cannot be reached or answered with an error.
        """
        data = bytes(data)
        return self._upload(data, digest_of(data), len(data), alias=alias, alias_signature=alias_signature)

    def put_file(self, path: Path, *, alias: str | None = None, alias_signature: bytes | None = None) -> BlobRef:
        """:meth:`put` for the contents of the file at ``path``, streamed from disk (bounded memory).

        The file is hashed first and then sent; it must not change in between (the service's
        digest is checked against the local one)."""
        digest, size = digest_of_file(path)
        with open(path, "rb") as fh:
            return self._upload(fh, digest, size, alias=alias, alias_signature=alias_signature)

    def _upload(
        self, body: bytes | BinaryIO, digest: str, size: int, *, alias: str | None, alias_signature: bytes | None
    ) -> BlobRef:
        if size > self.max_bytes:
            raise BlobTooLarge(f"blob of {size} bytes exceeds max_bytes={self.max_bytes} of {self!r}")
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        if alias is not None:
            headers[ALIAS_HEADER] = validate_alias(alias)
        if alias_signature is not None:
            headers[ALIAS_SIGNATURE_HEADER] = "0x" + bytes(alias_signature).hex()
        answer = self._put_retrying(body, size, headers)
        try:
            ref = BlobRef.from_json(answer)
        except InvalidBlobName as exc:
            raise BlobUnavailable(f"{self.base_url} answered PUT /blobs with an invalid reference: {exc}") from None
        if ref.digest != digest or ref.size != size:
            raise BlobIntegrityError(
                f"{self.base_url} stored {ref.digest} ({ref.size} bytes) for a blob of {digest} ({size} bytes)"
            )
        return BlobRef(digest=digest, size=size, uri=self.uri_for(digest))

    def get(self, digest: str, *, max_bytes: int | None = None) -> bytes:
        """Download and verify ``digest`` (at most ``max_bytes``, default this client's).

        Raises
        ------
        BlobNotFound
            The service does not hold ``digest``.
        BlobIntegrityError
            The bytes received do not hash to ``digest``.
        BlobTooLarge
            The blob exceeds ``max_bytes``.
        BlobUnavailable
            The service cannot be reached or answered with an error.
        """
        return self.fetch(self.uri_for(digest), expected_digest=digest, max_bytes=self._cap(max_bytes))

    def get_to_file(self, digest: str, dest: Path, *, max_bytes: int | None = None) -> int:
        """Download ``digest`` into the file ``dest`` in bounded memory, resuming a broken transfer
        (:func:`~syncline.blobstore.fetch.fetch_uri_to_file`); returns the size."""
        return fetch_uri_to_file(
            self.uri_for(digest),
            Path(dest),
            expected_digest=digest,
            max_bytes=self._cap(max_bytes),
            timeout_s=self.timeout_s,
        )

    def _cap(self, max_bytes: int | None) -> int:
        return self.max_bytes if max_bytes is None else min(max_bytes, self.max_bytes)

    def has(self, digest: str) -> bool:
        """Whether the service holds ``digest`` (``HEAD /blobs/<digest>``)."""
        status, _ = self._request("HEAD", f"/blobs/{normalize_digest(digest)}", ok=(200, 404))
        return status == 200

    def candidates(self, alias: str, *, signers: Sequence[str] = ()) -> tuple[str, ...]:
        """The digests ``alias`` names on the service, the slots of ``signers`` first (untrusted
        hints: verify what you fetch); ``()`` when the alias is unknown."""
        if len(signers) > MAX_ALIAS_SIGNERS:
            raise InvalidBlobName(f"{len(signers)} signers named; at most {MAX_ALIAS_SIGNERS}")
        query = urllib.parse.urlencode([("signer", normalize_address(s)) for s in signers])
        path = f"/aliases/{urllib.parse.quote(validate_alias(alias), safe='')}" + (f"?{query}" if query else "")
        status, body = self._request("GET", path, ok=(200, 404))
        if status == 404:
            return ()
        answer = _parse_json(body, f"GET {path}", self.base_url)
        listed = answer.get("candidates", [answer.get("digest")]) if isinstance(answer, dict) else None
        if not isinstance(listed, list) or not all(isinstance(d, str) and is_digest(d) for d in listed):
            raise BlobUnavailable(f"{self.base_url} answered GET {path} without valid digests")
        limit = len(signers) + MAX_LISTED_CANDIDATES + 1  # + the pinned first candidate
        return tuple(dict.fromkeys(normalize_digest(d) for d in listed[:limit]))

    def healthy(self) -> bool:
        """Whether ``GET /healthz`` answers 200."""
        try:
            self.check_health()
        except BlobUnavailable:
            return False
        return True

    def check_health(self) -> None:
        """``GET /healthz``; raises :class:`BlobUnavailable` (one line, the reason) unless it answers 200."""
        self._request("GET", "/healthz", ok=(200,))

    # ------------------------------------------------------------------ transport

    def _put_retrying(self, body: bytes | BinaryIO, size: int, headers: dict[str, str]) -> Any:
        """``PUT /blobs``, retried while the service answers busy (429 / 503), honouring ``Retry-After``."""
        start = 0 if isinstance(body, bytes) else body.tell()
        waited = 0.0
        for attempt in itertools.count():
            if not isinstance(body, bytes):
                body.seek(start)
            answer = self._send("PUT", "/blobs", data=body, size=size, headers=headers)
            if answer.status not in RETRY_STATUSES:
                break
            pause = max(
                _retry_after_s(answer.headers.get("retry-after")),
                UPLOAD_BACKOFF_S[min(attempt, len(UPLOAD_BACKOFF_S) - 1)] * random.uniform(1.0, 1.25),
            )
            if waited + pause > self.max_retry_wait_s:
                raise BlobUnavailable(
                    f"PUT {self.base_url}/blobs: the service stayed busy (HTTP {answer.status}: "
                    f"{answer.error_message()}) after {attempt + 1} tries over {waited:.1f} s; next retry in "
                    f"{pause:.0f} s is past max_retry_wait_s={self.max_retry_wait_s:g}"
                )
            time.sleep(pause)
            waited += pause
        _, body_bytes = self._check("PUT", "/blobs", answer, ok=(200, 201))
        return _parse_json(body_bytes, "PUT /blobs", self.base_url)

    def _request(
        self,
        method: str,
        path: str,
        *,
        ok: tuple[int, ...],
        data: bytes | BinaryIO | None = None,
        size: int = 0,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        answer = self._send(method, path, data=data, size=size, headers=headers)
        return self._check(method, path, answer, ok=ok)

    def _send(
        self,
        method: str,
        path: str,
        *,
        data: bytes | BinaryIO | None = None,
        size: int = 0,
        headers: dict[str, str] | None = None,
    ) -> HttpAnswer:
        url = self.base_url + path
        limit = max(size, len(data) if isinstance(data, bytes) else 0, _MAX_JSON_BYTES)
        deadline = Deadline.after(default_deadline_s(self.timeout_s, limit), timeout_s=self.timeout_s)
        return http_request(method, url, deadline=deadline, max_bytes=_MAX_JSON_BYTES, body=data, headers=headers)

    def _check(self, method: str, path: str, answer: HttpAnswer, *, ok: tuple[int, ...]) -> tuple[int, bytes]:
        url = self.base_url + path
        if answer.status not in ok:
            if answer.status == 413:
                raise BlobTooLarge(f"{method} {url} refused: {answer.error_message()}")
            if answer.status == 409:
                raise AliasFull(f"{method} {url} refused: {answer.error_message()}")
            raise BlobUnavailable(f"{method} {url} failed with HTTP {answer.status}: {answer.error_message()}")
        return answer.status, answer.body if 200 <= answer.status < 300 else b""


def _retry_after_s(value: str | None) -> float:
    """A ``Retry-After`` in seconds (delta-seconds only; an HTTP date or garbage counts as 0)."""
    text = (value or "").strip()
    return float(min(int(text), 86_400)) if text.isascii() and text.isdigit() and len(text) <= 9 else 0.0


def _parse_json(body: bytes, what: str, base_url: str) -> Any:
    try:
        return load_bounded_json(body, max_bytes=_MAX_JSON_BYTES, max_depth=2, what=f"the answer to {what}")
    except WireFormatError as exc:
        raise BlobUnavailable(f"{base_url} answered {what} with invalid JSON: {exc}") from None
