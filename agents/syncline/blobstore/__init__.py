"""Content-addressed blob store: outer gradients, model states, dataset shards, tokenizers.

A blob's identity is the keccak256 of its bytes (``"0x"`` + 64 hex), which is what the chain
records; a URI is only a locator, and every read is verified against the expected digest.

Modules
-------
store
    :class:`BlobRef`, the :class:`BlobBackend` / :class:`BlobStore` protocols, digests, errors.
fetch
    :func:`fetch_uri`: verified, size-capped reads from ``http(s)://`` URIs under a total deadline
    (``file://`` only when the caller allows a local locator).
local
    :class:`LocalBlobStore`: blobs and alias candidates as files, written atomically.
http_service
    :class:`BlobService`: a threaded stdlib HTTP server over a local store
    (``python -m syncline.blobstore --root DIR --port N``).
http_client
    :class:`HttpBlobStore`: the client of a :class:`BlobService`.
"""

from __future__ import annotations

from syncline.blobstore.fetch import Fetcher, fetch_uri, register_fetcher
from syncline.blobstore.http_client import HttpBlobStore
from syncline.blobstore.http_service import BlobService
from syncline.blobstore.local import LocalBlobStore
from syncline.blobstore.store import (
    DEFAULT_MAX_BLOB_BYTES,
    MAX_ANONYMOUS_CANDIDATES,
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
    find_verified,
    is_digest,
    normalize_digest,
    put_signed,
    sign_alias,
    validate_alias,
    verify,
)

__all__ = [
    "DEFAULT_MAX_BLOB_BYTES",
    "MAX_ANONYMOUS_CANDIDATES",
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
    "alias_signer",
    "digest_of",
    "fetch_uri",
    "find_verified",
    "is_digest",
    "normalize_digest",
    "put_signed",
    "register_fetcher",
    "sign_alias",
    "validate_alias",
    "verify",
]
