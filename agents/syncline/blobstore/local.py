"""A blob store in a local directory.

Layout under ``root``::

    blobs/<64 hex>       the blob's bytes, named by its keccak256 digest
    aliases/<alias>      the digest (``0x`` + 64 hex) an alias points at
    tmp/                 temporary files, renamed into place with ``os.replace``
    quarantine/          blobs whose bytes no longer match their name, moved aside by ``get``

Every write goes to a fresh temporary file that is then atomically renamed over the final name,
so readers never see a partial file, and several threads or processes putting the same blob
concurrently all leave the same complete file behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

import structlog

from syncline.blobstore.store import (
    BlobIntegrityError,
    BlobNotFound,
    BlobRef,
    BlobStoreBase,
    BlobTooLarge,
    InvalidBlobName,
    digest_of,
    is_digest,
    normalize_digest,
    validate_alias,
)

log = structlog.get_logger("syncline.blobstore")


class LocalBlobStore(BlobStoreBase):
    """Content-addressed blobs and aliases as files under ``root``.

    Parameters
    ----------
    root : Path
        Directory of the store; created (with its subdirectories) if missing.
    fsync : bool, optional
        Flush each written file to disk before renaming it into place (default True).
    fetch_timeout_s : float, optional
        Timeout of network operations in :meth:`fetch`.
    """

    def __init__(self, root: Path, *, fsync: bool = True, fetch_timeout_s: float = 30.0) -> None:
        super().__init__(fetch_timeout_s=fetch_timeout_s)
        self.root = Path(root).resolve()
        self.fsync = fsync
        self.blobs_dir = self.root / "blobs"
        self.aliases_dir = self.root / "aliases"
        self.tmp_dir = self.root / "tmp"
        self.quarantine_dir = self.root / "quarantine"
        for d in (self.blobs_dir, self.aliases_dir, self.tmp_dir, self.quarantine_dir):
            d.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"LocalBlobStore({str(self.root)!r})"

    # ------------------------------------------------------------------ paths

    def blob_path(self, digest: str) -> Path:
        """The file that holds (or would hold) ``digest``."""
        return self.blobs_dir / normalize_digest(digest)[2:]

    def uri_for(self, digest: str) -> str:
        """The ``file://`` URI of ``digest``'s file."""
        return self.blob_path(digest).as_uri()

    def fetch(self, uri: str, *, expected_digest: str, max_bytes: int) -> bytes:
        """Like :meth:`BlobStoreBase.fetch`, but a ``file://`` locator that names this store's own file
        for ``expected_digest`` is read from the store (the directory its operator configured).
        Any other local locator is refused, as for every store."""
        try:
            own = uri == self.uri_for(expected_digest)
        except InvalidBlobName:
            own = False
        if own:
            size = self.size(expected_digest)
            if size is not None and size > max_bytes:
                raise BlobTooLarge(f"blob at {uri} is {size} bytes, larger than max_bytes={max_bytes}")
            return self.get(expected_digest)
        return super().fetch(uri, expected_digest=expected_digest, max_bytes=max_bytes)

    # ------------------------------------------------------------------ BlobBackend

    def put(self, data: bytes, *, alias: str | None = None) -> BlobRef:
        """Store ``data`` under its digest (idempotent) and optionally point ``alias`` at it.

        Parameters
        ----------
        data : bytes
            The blob.
        alias : str, optional
            A locator name (see :func:`~syncline.blobstore.store.validate_alias`); an existing
            alias of that name is replaced.

        Notes
        -----
        A file already present with the right size is kept as is (no rewrite); a corrupt one is
        found and moved aside by :meth:`get`, after which the next put stores the blob again.

        Returns
        -------
        BlobRef
            Digest, size and ``file://`` URI of the stored blob.
        """
        if alias is not None:
            validate_alias(alias)
        data = bytes(data)
        digest = digest_of(data)
        path = self.blob_path(digest)
        if not self._present(path, len(data)):
            self._write_atomic(path, data)
        if alias is not None:
            self._write_atomic(self.aliases_dir / alias, digest.encode("ascii"))
        return BlobRef(digest=digest, size=len(data), uri=path.as_uri())

    def get(self, digest: str) -> bytes:
        """The bytes of ``digest``, verified against it.

        A file whose bytes do not match its name is moved to ``quarantine/`` (so a later
        :meth:`put` of the true blob repairs the store) and reported.

        Raises
        ------
        BlobNotFound
            The store does not hold ``digest``.
        BlobIntegrityError
            The stored file is corrupt.
        InvalidBlobName
            ``digest`` is malformed.
        """
        digest = normalize_digest(digest)
        path = self.blob_path(digest)
        try:
            with open(path, "rb") as fh:
                inode = os.fstat(fh.fileno()).st_ino
                data = fh.read()
        except (FileNotFoundError, IsADirectoryError):
            raise BlobNotFound(f"blob {digest} not found in {self.root}") from None
        actual = digest_of(data)
        if actual != digest:
            moved = self._quarantine(path, inode)
            log.error("blob.corrupt", digest=digest, actual=actual, size=len(data), quarantined=str(moved))
            raise BlobIntegrityError(
                f"stored blob {digest} in {self.root} is corrupt (its bytes hash to {actual}); moved aside to {moved}"
            )
        return data

    def has(self, digest: str) -> bool:
        """Whether a file for ``digest`` exists (its bytes are verified on :meth:`get`)."""
        return self.blob_path(digest).is_file()

    def size(self, digest: str) -> int | None:
        """Size in bytes of the stored file for ``digest``, or None if absent."""
        try:
            return self.blob_path(digest).stat().st_size
        except FileNotFoundError:
            return None

    def resolve(self, alias: str) -> str | None:
        """The digest ``alias`` points at, or None (also when the alias file is not a digest).

        Raises
        ------
        InvalidBlobName
            ``alias`` is malformed.
        """
        path = self.aliases_dir / validate_alias(alias)
        try:
            text = path.read_text(encoding="ascii", errors="replace").strip()
        except (FileNotFoundError, IsADirectoryError):
            return None
        if not is_digest(text):
            log.warning("alias.malformed", alias=alias, path=str(path))
            return None
        return normalize_digest(text)

    # ------------------------------------------------------------------ internals

    @staticmethod
    def _present(path: Path, size: int) -> bool:
        try:
            return path.stat().st_size == size
        except FileNotFoundError:
            return False

    def _write_atomic(self, path: Path, data: bytes) -> None:
        fd, tmp_name = tempfile.mkstemp(dir=self.tmp_dir, prefix=path.name[:16] + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                os.fchmod(fh.fileno(), 0o644)  # mkstemp creates 0600; blobs are public content
                fh.write(data)
                if self.fsync:
                    fh.flush()
                    os.fsync(fh.fileno())
            os.replace(tmp_name, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_name)
            raise

    def _quarantine(self, path: Path, inode: int) -> Path:
        """Move the corrupt file aside, unless a concurrent put already replaced it."""
        target = self.quarantine_dir / f"{path.name}.{time.time_ns()}"
        try:
            if path.stat().st_ino == inode:
                os.replace(path, target)
        except FileNotFoundError:  # another reader moved it first
            pass
        return target
