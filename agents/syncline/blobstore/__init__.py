"""Content-addressed blob store: outer gradients, model states, dataset shards, tokenizers.

A blob's identity is the keccak256 of its bytes (``"0x"`` + 64 hex), which is what the chain
records; a URI is only a locator, and every read is verified against the expected digest.

Modules
-------
store
    :class:`BlobRef`, the :class:`BlobBackend` / :class:`BlobStore` protocols, digests, errors.
fetch
    :func:`fetch_uri` / :func:`fetch_uri_to_file`: verified, size-capped reads from ``http(s)://``
    URIs under a total deadline, hashed as they stream, resumed with ``Range`` requests when a
    transfer breaks off (``file://`` only when the caller allows a local locator).
local
    :class:`LocalBlobStore`: blobs and alias candidates as files, written atomically.
http_service
    :class:`BlobService`: a threaded stdlib HTTP server over a local store
    (``python -m syncline.blobstore --root DIR --port N``).
http_client
    :class:`HttpBlobStore`: the client of a :class:`BlobService`.
"""

from __future__ import annotations

from syncline.blobstore.fetch import Fetcher, Sink, Streamer, fetch_uri, fetch_uri_to_file, register_fetcher
from syncline.blobstore.http_client import HttpBlobStore
from syncline.blobstore.http_service import BlobService
from syncline.blobstore.local import LocalBlobStore
from syncline.blobstore.store import (
    DEFAULT_MAX_BLOB_BYTES,
    MAX_ANONYMOUS_CANDIDATES,
    AliasFull,
    BlobBackend,
    BlobIntegrityError,
    BlobNotFound,
    BlobRef,
    BlobStore,
    BlobStoreBase,
    BlobStoreError,
    BlobTooLarge,
    BlobUnavailable,
    InvalidBlobName,
    alias_signer,
    digest_of,
    digest_of_file,
    find_verified,
    is_digest,
    max_state_bytes,
    normalize_digest,
    put_signed,
    put_signed_file,
    sign_alias,
    validate_alias,
    verify,
)

__all__ = [
    "DEFAULT_MAX_BLOB_BYTES",
    "MAX_ANONYMOUS_CANDIDATES",
    "AliasFull",
    "BlobBackend",
    "BlobIntegrityError",
    "BlobNotFound",
    "BlobRef",
    "BlobService",
    "BlobStore",
    "BlobStoreBase",
    "BlobStoreError",
    "BlobTooLarge",
    "BlobUnavailable",
    "Fetcher",
    "HttpBlobStore",
    "InvalidBlobName",
    "LocalBlobStore",
    "Sink",
    "Streamer",
    "alias_signer",
    "digest_of",
    "digest_of_file",
    "fetch_uri",
    "fetch_uri_to_file",
    "find_verified",
    "is_digest",
    "max_state_bytes",
    "normalize_digest",
    "put_signed",
    "put_signed_file",
    "register_fetcher",
    "sign_alias",
    "validate_alias",
    "verify",
]
