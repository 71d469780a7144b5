"""A blob store in a local directory.

Layout under ``root``::

    blobs/<64 hex>                  the blob's bytes, named by its keccak256 digest
    aliases/<alias>/signed-<addr>   the candidate ``<addr>`` signed: digest and signature, one per signer
    aliases/<alias>/first-<64 hex>  the alias's first candidate when it was anonymous (kept for good)
    aliases/<alias>/anon-<64 hex>   a later anonymous candidate (the newest ``MAX_ANONYMOUS_CANDIDATES`` kept)
    tmp/                 temporary files, renamed into place with ``os.replace``
    quarantine/          blobs whose bytes no longer match their name, moved aside by ``get``

Every write goes to a fresh temporary file that is then atomically renamed over the final name
(a blob streamed in, :meth:`LocalBlobStore.put_stream`, is hashed as it is written and named once
its digest is known), so readers never see a partial file, and several threads or processes putting the same blob
concurrently all leave the same complete file behind. Candidates are ordered by their file's
modification time (newest first). A store written before aliases held candidates has a plain file
``aliases/<alias>`` holding one digest: it reads as one anonymous candidate and becomes a directory
on the next write.

Lookups go through an in-memory index of each alias directory (its signers' slots by address and
its other candidates newest first), so naming a signer is a dictionary lookup and listing the
others reads at most :data:`~syncline.blobstore.store.MAX_LISTED_CANDIDATES` entries, whatever the
alias holds. The index is shared by every store object of the process, dropped on each write, and
reloaded when the directory's modification time changes (a write by another process) or was too
recent to tell two writes apart. An alias holds at most ``max_signer_slots`` signers' slots
(:data:`~syncline.blobstore.store.MAX_SIGNER_SLOTS`); a further signer is refused with
:class:`~syncline.blobstore.store.AliasFull`.
"""

from __future__ import annotations

import contextlib
import heapq
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import structlog

from syncline.blobstore.store import (
    CHUNK_BYTES,
    MAX_ALIAS_SIGNERS,
    MAX_ANONYMOUS_CANDIDATES,
    MAX_LISTED_CANDIDATES,
    MAX_SIGNER_SLOTS,
    AliasFull,
    BlobIntegrityError,
    BlobNotFound,
    BlobRef,
    BlobStoreBase,
    BlobTooLarge,
    InvalidBlobName,
    alias_signer,
    digest_of,
    is_digest,
    normalize_address,
    normalize_digest,
    read_chunks,
    validate_alias,
    write_file_atomic,
)
from syncline.protocol.hashing import Keccak256

log = structlog.get_logger("syncline.blobstore")

_RACY_NS = 20_000_000
"""A directory modified less than this long before it was indexed is indexed again on the next
lookup: a write in the same tick of the file system's clock would not change its stamp."""
_MAX_INDEXED_ALIASES = 4096


@dataclass(frozen=True)
class _AliasIndex:
    """What an alias directory held when it was read: the stamp it had, its signers' slots
    (address to digest), its other candidates newest first (entry name, digest) and the digests of
    its pinned first candidates."""

    stamp: tuple[int, int]
    racy: bool
    signed: dict[str, str]
    newest: tuple[tuple[str, str], ...]
    pinned: tuple[str, ...]


_index_lock = threading.Lock()
_indexes: OrderedDict[str, _AliasIndex] = OrderedDict()
_write_locks = tuple(threading.Lock() for _ in range(64))


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
    max_signer_slots : int, optional
        Owner-signed slots one alias holds at most (:data:`~syncline.blobstore.store.MAX_SIGNER_SLOTS`).
    """

    def __init__(
        self,
        root: Path,
        *,
        fsync: bool = True,
        fetch_timeout_s: float = 30.0,
        max_signer_slots: int = MAX_SIGNER_SLOTS,
    ) -> None:
        super().__init__(fetch_timeout_s=fetch_timeout_s)
        if max_signer_slots < 1:
            raise ValueError(f"max_signer_slots must be >= 1, got {max_signer_slots}")
        self.root = Path(root).resolve()
        self.fsync = fsync
        self.max_signer_slots = max_signer_slots
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

    def fetch_to_file(self, uri: str, dest: Path, *, expected_digest: str, max_bytes: int) -> int:
        """Like :meth:`fetch`, into a file (:meth:`BlobStoreBase.fetch_to_file`); this store's own
        ``file://`` locator is copied from the store."""
        try:
            own = uri == self.uri_for(expected_digest)
        except InvalidBlobName:
            own = False
        if own:
            return self.get_to_file(expected_digest, dest, max_bytes=max_bytes)
        return super().fetch_to_file(uri, dest, expected_digest=expected_digest, max_bytes=max_bytes)

    # ------------------------------------------------------------------ BlobBackend

    def put(self, data: bytes, *, alias: str | None = None, alias_signature: bytes | None = None) -> BlobRef:
        """Store ``data`` under its digest (idempotent) and optionally add it as a candidate of ``alias``.

        Parameters
        ----------
        data : bytes
            The blob.
        alias : str, optional
            A locator name (see :func:`~syncline.blobstore.store.validate_alias`). The blob joins
            the alias's candidates; no earlier candidate is replaced, except the signer's own one.
        alias_signature : bytes, optional
            :func:`~syncline.blobstore.store.sign_alias` over ``alias`` and the blob's digest: the
            candidate then fills its signer's slot. Without it, the anonymous ring.

        Notes
        -----
        A file already present with the right size is kept as is (no rewrite); a corrupt one is
        found and moved aside by :meth:`get`, after which the next put stores the blob again.

        Returns
        -------
        BlobRef
            Digest, size and ``file://`` URI of the stored blob.

        Raises
        ------
        InvalidBlobName
            A malformed alias, a signature without an alias, or one that does not recover.
        """
        if alias is not None:
            validate_alias(alias)
        elif alias_signature is not None:
            raise InvalidBlobName("an alias signature needs an alias")
        data = bytes(data)
        digest = digest_of(data)
        signer = alias_signer(alias, digest, alias_signature) if alias and alias_signature is not None else None
        path = self.blob_path(digest)
        if not self._present(path, len(data)):
            self._write_atomic(path, data)
        if alias is not None:
            self._add_candidate(alias, digest, signer, alias_signature)
        return BlobRef(digest=digest, size=len(data), uri=path.as_uri())

    def get(self, digest: str, *, max_bytes: int | None = None) -> bytes:
        """The bytes of ``digest``, verified against it (BlobTooLarge above ``max_bytes``).

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
                size = os.fstat(fh.fileno()).st_size
                if max_bytes is not None and size > max_bytes:
                    raise BlobTooLarge(f"blob {digest} is {size} bytes, larger than max_bytes={max_bytes}")
                data = fh.read()
        except (FileNotFoundError, IsADirectoryError):
            raise BlobNotFound(f"blob {digest} not found in {self.root}") from None
        self.check_file(digest, digest_of(data), len(data), inode)
        return data

    def verify_file(self, digest: str) -> Path:
        """The file of ``digest`` after hashing it in bounded memory (a corrupt one is quarantined
        and reported as by :meth:`get`). Read it, never write it: it is the store's own copy.

        Raises
        ------
        BlobNotFound, BlobIntegrityError, InvalidBlobName
            As :meth:`get`.
        """
        digest = normalize_digest(digest)
        path = self.blob_path(digest)
        hasher = Keccak256()
        size = 0
        try:
            with open(path, "rb") as fh:
                inode = os.fstat(fh.fileno()).st_ino
                for chunk in read_chunks(fh):
                    hasher.update(chunk)
                    size += len(chunk)
        except (FileNotFoundError, IsADirectoryError):
            raise BlobNotFound(f"blob {digest} not found in {self.root}") from None
        self.check_file(digest, "0x" + hasher.hexdigest(), size, inode)
        return path

    def get_to_file(self, digest: str, dest: Path, *, max_bytes: int | None = None) -> int:
        """Copy the verified bytes of ``digest`` to ``dest`` (atomically, bounded memory); returns the size."""
        digest = normalize_digest(digest)
        size = self.size(digest)
        if size is None:
            raise BlobNotFound(f"blob {digest} not found in {self.root}")
        if max_bytes is not None and size > max_bytes:
            raise BlobTooLarge(f"blob {digest} is {size} bytes, larger than max_bytes={max_bytes}")
        hasher = Keccak256()

        def hashed(fh: BinaryIO) -> Iterator[bytes]:
            for chunk in read_chunks(fh):
                hasher.update(chunk)
                yield chunk

        path = self.blob_path(digest)
        try:
            with open(path, "rb") as fh:
                inode = os.fstat(fh.fileno()).st_ino
                copied = write_file_atomic(Path(dest), hashed(fh), fsync=self.fsync)
        except (FileNotFoundError, IsADirectoryError):
            raise BlobNotFound(f"blob {digest} not found in {self.root}") from None
        try:
            self.check_file(digest, "0x" + hasher.hexdigest(), copied, inode)
        except BlobIntegrityError:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(dest)
            raise
        return copied

    def check_file(self, digest: str, actual: str, size: int, inode: int) -> None:
        """Report a stored file (inode ``inode``) whose ``size`` bytes hashed to ``actual`` rather than
        to its name ``digest``: quarantine it (unless already replaced), log it and raise
        :class:`BlobIntegrityError`. Nothing happens when the digests agree."""
        path = self.blob_path(digest)
        if actual != digest:
            moved = self._quarantine(path, inode)
            log.error("blob.corrupt", digest=digest, actual=actual, size=size, quarantined=str(moved))
            raise BlobIntegrityError(
                f"stored blob {digest} in {self.root} is corrupt (its bytes hash to {actual}); moved aside to {moved}"
            )

    def put_stream(
        self, chunks: Iterable[bytes], *, alias: str | None = None, alias_signature: bytes | None = None
    ) -> BlobRef:
        """:meth:`put` for a blob that arrives in pieces (an upload, a file): each piece is hashed and
        written to a temporary file as it comes, which is renamed to its digest at the end, so the
        blob is never held in memory. An exception from ``chunks`` leaves nothing behind.

        Raises
        ------
        InvalidBlobName
            As :meth:`put`.
        """
        if alias is not None:
            validate_alias(alias)
        elif alias_signature is not None:
            raise InvalidBlobName("an alias signature needs an alias")
        hasher = Keccak256()
        named: dict[str, str | None] = {}

        def hashed() -> Iterator[bytes]:
            for chunk in chunks:
                hasher.update(chunk)
                yield chunk

        def destination(size: int) -> Path | None:
            named["digest"] = digest = "0x" + hasher.hexdigest()
            named["signer"] = (
                alias_signer(alias, digest, alias_signature) if alias and alias_signature is not None else None
            )
            path = self.blob_path(digest)
            return None if self._present(path, size) else path

        size = write_file_atomic(destination, hashed(), fsync=self.fsync, tmp_dir=self.tmp_dir)
        digest, signer = str(named["digest"]), named["signer"]
        path = self.blob_path(digest)
        if alias is not None:
            self._add_candidate(alias, digest, signer, alias_signature)
        return BlobRef(digest=digest, size=size, uri=path.as_uri())

    def put_file(self, path: Path, *, alias: str | None = None, alias_signature: bytes | None = None) -> BlobRef:
        """:meth:`put` for the contents of the file at ``path`` (copied in bounded memory)."""
        with open(path, "rb") as fh:
            return self.put_stream(
                iter(lambda: fh.read(CHUNK_BYTES), b""), alias=alias, alias_signature=alias_signature
            )

    def has(self, digest: str) -> bool:
        """Whether a file for ``digest`` exists (its bytes are verified on :meth:`get`)."""
        return self.blob_path(digest).is_file()

    def size(self, digest: str) -> int | None:
        """Size in bytes of the stored file for ``digest``, or None if absent."""
        try:
            return self.blob_path(digest).stat().st_size
        except FileNotFoundError:
            return None

    def candidates(self, alias: str, *, signers: Sequence[str] = ()) -> tuple[str, ...]:
        """The digests ``alias`` names (untrusted hints; verify what you fetch).

        The slots of ``signers`` come first, in the order given; then up to
        :data:`~syncline.blobstore.store.MAX_LISTED_CANDIDATES` other candidates, newest first;
        last the alias's first candidate if it was anonymous (e.g. a sponsor's initial state,
        published before anyone knew its root), which is always listed. Each digest appears once.

        Raises
        ------
        InvalidBlobName
            ``alias`` or a signer is malformed, or more than ``MAX_ALIAS_SIGNERS`` signers are named.
        """
        directory = self.aliases_dir / validate_alias(alias)
        if len(signers) > MAX_ALIAS_SIGNERS:
            raise InvalidBlobName(f"{len(signers)} signers named; at most {MAX_ALIAS_SIGNERS}")
        owners = [normalize_address(s) for s in signers]
        if directory.is_file():  # a store written before aliases held candidates
            legacy = self._read_digest(directory)
            return (legacy,) if legacy else ()
        index = self._index(directory)
        if index is None:
            return ()
        found = [index.signed[owner] for owner in owners if owner in index.signed]
        skip = {f"signed-{owner}" for owner in owners}
        listed = 0
        for name, digest in index.newest:
            if listed >= MAX_LISTED_CANDIDATES:
                break
            if name not in skip:
                found.append(digest)
                listed += 1
        found.extend(index.pinned)
        return tuple(dict.fromkeys(found))

    def signer_slots(self, alias: str) -> int:
        """How many owner-signed slots ``alias`` holds."""
        index = self._index(self.aliases_dir / validate_alias(alias))
        return 0 if index is None else len(index.signed)

    # ------------------------------------------------------------------ internals

    def _index(self, directory: Path) -> _AliasIndex | None:
        """The index of an alias directory (None when there is none), read again only when the
        directory changed since (or changed too recently to tell)."""
        try:
            st = os.stat(directory)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat.S_ISDIR(st.st_mode):
            return None
        key, stamp = str(directory), (st.st_mtime_ns, st.st_ino)
        with _index_lock:
            index = _indexes.get(key)
            if index is not None and index.stamp == stamp and not index.racy:
                _indexes.move_to_end(key)
                return index
        index = self._load_index(directory, stamp)
        with _index_lock:
            _indexes[key] = index
            _indexes.move_to_end(key)
            while len(_indexes) > _MAX_INDEXED_ALIASES:
                _indexes.popitem(last=False)
        return index

    def _load_index(self, directory: Path, stamp: tuple[int, int]) -> _AliasIndex:
        racy = time.time_ns() - stamp[0] < _RACY_NS
        signed: dict[str, str] = {}
        dated: list[tuple[int, str, str]] = []
        pinned: list[str] = []
        try:
            entries = [e for e in os.scandir(directory) if e.is_file()]
        except (FileNotFoundError, NotADirectoryError):
            entries = []
        for entry in entries:
            digest = self._read_digest(Path(entry.path))
            if not digest:
                continue
            if entry.name.startswith("first-"):
                pinned.append(digest)
                continue
            if entry.name.startswith("signed-"):
                signed[entry.name[len("signed-") :]] = digest
            dated.append((_mtime(entry), entry.name, digest))
        dated.sort(key=lambda item: (item[0], item[1]), reverse=True)
        newest = tuple((name, digest) for _, name, digest in dated)
        return _AliasIndex(stamp=stamp, racy=racy, signed=signed, newest=newest, pinned=tuple(sorted(pinned)))

    @staticmethod
    def _forget_index(directory: Path) -> None:
        with _index_lock:
            _indexes.pop(str(directory), None)

    def _add_candidate(self, alias: str, digest: str, signer: str | None, signature: bytes | None) -> None:
        """Add ``digest`` to the alias: the signer's slot, or the anonymous ring (oldest evicted).

        Raises
        ------
        AliasFull
            ``signer`` has no slot and the alias already holds ``max_signer_slots`` of them.
        """
        directory = self.aliases_dir / alias
        with _write_locks[hash(str(directory)) % len(_write_locks)]:
            try:
                self._add_candidate_locked(directory, alias, digest, signer, signature)
            finally:
                self._forget_index(directory)

    def _add_candidate_locked(
        self, directory: Path, alias: str, digest: str, signer: str | None, signature: bytes | None
    ) -> None:
        if directory.is_file():  # convert a pre-candidates alias file, keeping its digest as a candidate
            legacy = self._read_digest(directory)
            with contextlib.suppress(FileNotFoundError):
                directory.unlink()
            directory.mkdir(exist_ok=True)
            if legacy:
                self._write_atomic(directory / f"anon-{legacy[2:]}", legacy.encode("ascii"))
        directory.mkdir(exist_ok=True)
        if signer is None and not any(os.scandir(directory)):  # a new alias: its first writer keeps a slot
            self._write_atomic(directory / f"first-{digest[2:]}", digest.encode("ascii"))
            _touch(directory / f"first-{digest[2:]}")
            return
        if signer is not None and signature is not None:
            if not (directory / f"signed-{signer}").exists():
                index = self._index(directory)
                held = 0 if index is None else len(index.signed)
                if held >= self.max_signer_slots:
                    raise AliasFull(
                        f"alias {alias!r} already holds {held} signers' slots (at most {self.max_signer_slots}); "
                        f"no slot for a new signer {signer}"
                    )
            body = f"{digest}\n0x{signature.hex()}\n".encode("ascii")
            self._write_atomic(directory / f"signed-{signer}", body)
            _touch(directory / f"signed-{signer}")
            return
        if (directory / f"first-{digest[2:]}").exists():
            return
        path = directory / f"anon-{digest[2:]}"
        self._write_atomic(path, digest.encode("ascii"))  # (seen again:) rewritten, so the directory's stamp moves
        _touch(path)  # the newest
        anonymous = [e for e in os.scandir(directory) if e.name.startswith("anon-")]
        if len(anonymous) > MAX_ANONYMOUS_CANDIDATES:
            for old in heapq.nsmallest(len(anonymous) - MAX_ANONYMOUS_CANDIDATES, anonymous, key=_mtime):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(old.path)

    @staticmethod
    def _read_digest(path: Path) -> str | None:
        """The digest on the first line of a candidate file, or None (absent or malformed)."""
        try:
            text = path.read_text(encoding="ascii", errors="replace").split("\n", 1)[0].strip()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        if not is_digest(text):
            log.warning("alias.malformed", path=str(path))
            return None
        return normalize_digest(text)

    @staticmethod
    def _present(path: Path, size: int) -> bool:
        try:
            return path.stat().st_size == size
        except FileNotFoundError:
            return False

    def _write_atomic(self, path: Path, data: bytes) -> None:
        write_file_atomic(path, (data,), fsync=self.fsync, tmp_dir=self.tmp_dir)

    def _quarantine(self, path: Path, inode: int) -> Path:
        """Move the corrupt file aside, unless a concurrent put already replaced it."""
        target = self.quarantine_dir / f"{path.name}.{time.time_ns()}"
        try:
            if path.stat().st_ino == inode:
                os.replace(path, target)
        except FileNotFoundError:  # another reader moved it first
            pass
        return target


def _mtime(entry: os.DirEntry[str]) -> int:
    try:
        return entry.stat().st_mtime_ns
    except FileNotFoundError:
        return 0


def _touch(path: Path) -> None:
    """Stamp ``path`` with the current time at nanosecond resolution (file systems stamp writes
    with a coarse clock, which would leave two quick candidates unordered)."""
    now = time.time_ns()
    with contextlib.suppress(FileNotFoundError):
        os.utime(path, ns=(now, now))
