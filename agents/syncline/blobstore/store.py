"""The blob store's vocabulary: a blob's identity, its reference, the errors and the store protocol.

A blob is an immutable byte string. Its identity is ``digest_of(data)``, the keccak256 of its
bytes as ``"0x"`` + 64 lowercase hex characters; that is what goes on chain. A URI is only a
locator: whoever reads a blob from anywhere checks the bytes against the digest it expected.

Backends (the local directory, the HTTP client, later IPFS or an object store) need only
:class:`BlobBackend`'s methods; subclassing :class:`BlobStoreBase` adds the verified
:meth:`~BlobStoreBase.fetch` by URI from :mod:`syncline.blobstore.fetch`.

Aliases
-------
An alias (a state root, ``checkpoints:0x<root>``, a gossip slot) names a *set of candidate
digests*, never one trusted blob. Writing an alias only ever adds a candidate:

* an **owner-signed** candidate (EIP-191 signature over :func:`alias_message`) fills the signer's
  own slot of that alias; only that signer can replace it, so no one else can push it out;
* the first candidate of a new alias, when anonymous, keeps a slot for good (a sponsor publishes
  the initial state before anyone else knows its root);
* a later **anonymous** candidate joins a ring of the :data:`MAX_ANONYMOUS_CANDIDATES` newest
  anonymous ones (the oldest falls out).

:meth:`BlobBackend.candidates` lists the slots of the signers a reader names first (the owner it
expects: the trainer of a submission, the witnesses of a task), then the other candidates newest
first (at most :data:`MAX_LISTED_CANDIDATES`), then the pinned first anonymous candidate. A
reader takes every candidate as a hint and keeps the first whose bytes open what is bound on chain
(:func:`find_verified`); an alias is never evidence against anyone.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol, TypeVar, runtime_checkable

from eth_account import Account
from eth_account.messages import encode_defunct
from eth_account.signers.local import LocalAccount

from syncline.errors import SynclineError, candidate_failure
from syncline.protocol.hashing import Keccak256, keccak
from syncline.protocol.spec import MAX_PARAM_COUNT

DIGEST_HEX_CHARS = 64
"""Hex characters of a keccak256 digest (without the ``0x`` prefix)."""

STATE_BYTES_PER_PARAM = 16
"""A training state's bytes per parameter (int64 weights and int64 momentum, docs/protocol.md §6)."""

BLOB_HEADER_ALLOWANCE = 2 << 20
"""Room for a blob's own header on top of its tensor bytes (a safetensors header is at most 1 MiB)."""

DEFAULT_MAX_BLOB_BYTES = STATE_BYTES_PER_PARAM * MAX_PARAM_COUNT + BLOB_HEADER_ALLOWANCE
"""Default cap on one blob: the state of the largest model the tooling admits
(:data:`~syncline.protocol.spec.MAX_PARAM_COUNT` parameters at 16 B each, about 32 GB). Readers that
know what they expect (a task's payload, a task's state) pass their own, much smaller cap."""

CHUNK_BYTES = 1 << 20
"""Bytes moved per read or write when a blob is streamed (to and from disk and the network)."""

MAX_ANONYMOUS_CANDIDATES = 16
"""Anonymous candidates an alias keeps (the newest); owner-signed ones have their own slots."""

MAX_LISTED_CANDIDATES = 32
"""Candidates :meth:`BlobBackend.candidates` lists besides the slots of the signers asked for."""

MAX_ALIAS_SIGNERS = 32
"""Signers one :meth:`BlobBackend.candidates` call may name."""

MAX_SIGNER_SLOTS = 256
"""Owner-signed slots one alias holds at most (a new signer beyond them is refused with
:class:`AliasFull`; a signer that has a slot can always replace its own candidate). The readers of
an alias name at most :data:`MAX_ALIAS_SIGNERS` owners; the bound keeps every lookup cheap."""

_DIGEST_RE = re.compile(r"0x[0-9a-fA-F]{64}")
_ALIAS_RE = re.compile(r"[0-9A-Za-z_.:-]{1,128}")
_ADDRESS_RE = re.compile(r"0x[0-9a-fA-F]{40}")
T = TypeVar("T")


# ---------------------------------------------------------------------- errors


class BlobStoreError(SynclineError):
    """Base class of the blob store's errors; ``str(err)`` is a one-line explanation."""


class BlobNotFound(BlobStoreError):
    """No blob with the requested digest (or at the requested URI) exists."""


class BlobIntegrityError(BlobStoreError):
    """Bytes read for a digest do not hash to that digest."""


class BlobTooLarge(BlobStoreError):
    """A blob is larger than the size cap of the operation."""


class BlobUnavailable(BlobStoreError):
    """A remote store could not be reached or answered outside the protocol."""


class InvalidBlobName(BlobStoreError, ValueError):
    """A digest or an alias is malformed."""


class AliasFull(BlobStoreError):
    """An alias already holds its :data:`MAX_SIGNER_SLOTS` owner-signed slots and the signer has none."""


# ---------------------------------------------------------------------- names


def _clip(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, for error messages about untrusted input."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def digest_of(data: bytes) -> str:
    """The identity of a blob.

    Parameters
    ----------
    data : bytes
        The blob's bytes.

    Returns
    -------
    str
        ``"0x"`` + 64 lowercase hex characters of ``keccak256(data)``.
    """
    return "0x" + keccak(data).hex()


def digest_of_file(path: Path | str) -> tuple[str, int]:
    """The digest and size of the file at ``path``, read in :data:`CHUNK_BYTES` pieces (bounded memory)."""
    hasher = Keccak256()
    size = 0
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK_BYTES), b""):
            hasher.update(chunk)
            size += len(chunk)
    return "0x" + hasher.hexdigest(), size


def max_state_bytes(param_count: int) -> int:
    """Size cap of the state blob of a ``param_count``-parameter model (tensors plus a header)."""
    return STATE_BYTES_PER_PARAM * param_count + BLOB_HEADER_ALLOWANCE


def write_file_atomic(
    dest: Path | Callable[[int], Path | None],
    chunks: Iterable[bytes],
    *,
    fsync: bool = True,
    tmp_dir: Path | None = None,
) -> int:
    """Write ``chunks`` to a fresh temporary file (in ``tmp_dir``, default next to ``dest``; mode
    0644) and rename it over ``dest``; returns the size. A crash or an exception from ``chunks``
    leaves ``dest`` as it was and no temporary file.

    ``dest`` may be a function of the size written, called once the bytes are on disk (a blob
    named by the digest of its bytes); when it returns None the temporary file is dropped."""
    directory = tmp_dir if tmp_dir is not None else Path(dest).parent  # type: ignore[arg-type]
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".staged.", suffix=".tmp")
    size = 0
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o644)  # mkstemp creates 0600; blobs are public content
            for chunk in chunks:
                fh.write(chunk)
                size += len(chunk)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        target = dest(size) if callable(dest) else dest
        if target is None:
            os.unlink(tmp)
        else:
            os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return size


class HashingSink:
    """Bytes written to a binary file (or an ``io.BytesIO``) and hashed on the way; :attr:`size`
    bytes so far. What ``fh`` already holds is hashed first and kept (the prefix of a transfer to
    resume) when it is at most ``keep_up_to`` bytes, else dropped."""

    def __init__(self, fh: BinaryIO, *, keep_up_to: int = -1) -> None:
        self.fh = fh
        self._hasher = Keccak256()
        self.size = 0
        fh.seek(0, os.SEEK_END)
        if 0 < fh.tell() <= keep_up_to:
            fh.seek(0)
            for chunk in read_chunks(fh):
                self._hasher.update(chunk)
                self.size += len(chunk)
        else:
            self.reset()

    def reset(self) -> None:
        """Drop every byte written so far."""
        self.fh.seek(0)
        self.fh.truncate()
        self._hasher = Keccak256()
        self.size = 0

    def write(self, chunk: bytes) -> None:
        self.fh.write(chunk)
        self._hasher.update(chunk)
        self.size += len(chunk)

    def digest(self) -> str:
        """``"0x"`` + the keccak256 of the bytes held, in lowercase hex."""
        return "0x" + str(self._hasher.hexdigest())


def read_chunks(fh: BinaryIO, *, limit: int | None = None) -> Iterator[bytes]:
    """The rest of ``fh`` (or its next ``limit`` bytes) in pieces of at most :data:`CHUNK_BYTES`."""
    left = limit
    while left is None or left > 0:
        chunk = fh.read(CHUNK_BYTES if left is None else min(CHUNK_BYTES, left))
        if not chunk:
            return
        if left is not None:
            left -= len(chunk)
        yield chunk


def normalize_digest(digest: str) -> str:
    """Validate a digest and return its canonical (lowercase) form.

    Parameters
    ----------
    digest : str
        ``"0x"`` + 64 hex characters, in any case.

    Returns
    -------
    str
        The same digest in lowercase.

    Raises
    ------
    InvalidBlobName
        If ``digest`` is not ``"0x"`` + 64 hex characters.
    """
    if not isinstance(digest, str) or _DIGEST_RE.fullmatch(digest) is None:
        raise InvalidBlobName(f"malformed blob digest {_clip(digest)}: expected '0x' followed by 64 hex characters")
    return "0x" + digest[2:].lower()


def is_digest(value: str) -> bool:
    """Whether ``value`` is a well-formed digest (``"0x"`` + 64 hex characters)."""
    return isinstance(value, str) and _DIGEST_RE.fullmatch(value) is not None


def validate_alias(alias: str) -> str:
    """Check that an alias is a safe locator name and return it unchanged.

    Parameters
    ----------
    alias : str
        1 to 128 characters from ``[0-9a-zA-Z_.:-]``, and neither ``"."`` nor ``".."``
        (aliases are file names in :class:`~syncline.blobstore.local.LocalBlobStore`).

    Returns
    -------
    str
        ``alias``.

    Raises
    ------
    InvalidBlobName
        If the alias does not match the rule.
    """
    if not isinstance(alias, str) or _ALIAS_RE.fullmatch(alias) is None or alias in (".", ".."):
        raise InvalidBlobName(f"malformed alias {_clip(alias)}: expected 1-128 characters from [0-9a-zA-Z_.:-]")
    return alias


def normalize_address(address: str) -> str:
    """A signer's address in lowercase; raises InvalidBlobName unless ``0x`` + 40 hex characters."""
    if not isinstance(address, str) or _ADDRESS_RE.fullmatch(address) is None:
        raise InvalidBlobName(f"malformed signer address {_clip(address)}: expected '0x' followed by 40 hex characters")
    return address.lower()


def alias_message(alias: str, digest: str) -> bytes:
    """What the owner of an alias signs (EIP-191) to add ``digest`` as its candidate."""
    return f"syncline-alias\n{validate_alias(alias)}\n{normalize_digest(digest)}".encode("ascii")


def sign_alias(account: LocalAccount, alias: str, digest: str) -> bytes:
    """The 65-byte EIP-191 signature by ``account`` over :func:`alias_message`."""
    signed = account.sign_message(encode_defunct(primitive=alias_message(alias, digest)))
    return bytes(signed.signature)


def alias_signer(alias: str, digest: str, signature: bytes) -> str:
    """The (lowercase) address that signed ``digest`` as a candidate of ``alias``.

    Raises
    ------
    InvalidBlobName
        The signature is not 65 bytes or does not recover.
    """
    if not isinstance(signature, bytes) or len(signature) != 65:
        raise InvalidBlobName("an alias signature must be 65 bytes (EIP-191 r, s, v)")
    try:
        signer = Account.recover_message(encode_defunct(primitive=alias_message(alias, digest)), signature=signature)
    except Exception:  # eth_account raises several types for malformed signatures
        raise InvalidBlobName(f"the alias signature for {alias!r} does not recover a signer") from None
    return str(signer).lower()


def verify(data: bytes, expected_digest: str, *, source: str = "blob") -> bytes:
    """Return ``data`` if it hashes to ``expected_digest``.

    Parameters
    ----------
    data : bytes
        Bytes read from an untrusted place.
    expected_digest : str
        The digest the caller trusts (e.g. read from chain).
    source : str, optional
        Where the bytes came from, for the error message.

    Returns
    -------
    bytes
        ``data``, unchanged.

    Raises
    ------
    BlobIntegrityError
        If ``digest_of(data) != expected_digest``.
    InvalidBlobName
        If ``expected_digest`` is malformed.
    """
    expected = normalize_digest(expected_digest)
    actual = digest_of(data)
    if actual != expected:
        raise BlobIntegrityError(
            f"integrity check failed for {source}: expected keccak256 {expected}, got {actual} ({len(data)} bytes)"
        )
    return data


# ---------------------------------------------------------------------- reference


@dataclass(frozen=True)
class BlobRef:
    """Where a blob is and what it is.

    Attributes
    ----------
    digest : str
        ``"0x"`` + 64 lowercase hex of keccak256 of the bytes: the blob's identity.
    size : int
        Length of the blob in bytes.
    uri : str
        A locator (``http://…/blobs/<digest>``, ``file://…``); untrusted, check the digest.
    """

    digest: str
    size: int
    uri: str

    def to_json(self) -> dict[str, Any]:
        """The reference as a JSON-ready dict with keys ``digest``, ``size`` and ``uri``."""
        return {"digest": self.digest, "size": self.size, "uri": self.uri}

    @classmethod
    def from_json(cls, obj: object) -> BlobRef:
        """Parse a reference from its JSON dict.

        Raises
        ------
        InvalidBlobName
            If ``obj`` is not a dict with a valid digest, a non-negative int size and a str uri.
        """
        if not isinstance(obj, dict):
            raise InvalidBlobName(f"blob reference must be a JSON object, got {type(obj).__name__}")
        digest, size, uri = obj.get("digest"), obj.get("size"), obj.get("uri")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise InvalidBlobName(f"blob reference has an invalid size {size!r}")
        if not isinstance(uri, str):
            raise InvalidBlobName(f"blob reference has an invalid uri {uri!r}")
        return cls(digest=normalize_digest(str(digest)), size=size, uri=uri)


# ---------------------------------------------------------------------- protocols


@runtime_checkable
class BlobBackend(Protocol):
    """What a storage backend must provide: content-addressed put/get plus untrusted aliases."""

    def put(self, data: bytes, *, alias: str | None = None, alias_signature: bytes | None = None) -> BlobRef:
        """Store ``data`` (idempotent) and optionally add it as a candidate of ``alias``
        (owner-signed when ``alias_signature`` is :func:`sign_alias` over the alias and the digest)."""
        ...

    def get(self, digest: str, *, max_bytes: int | None = None) -> bytes:
        """The verified bytes of ``digest`` (at most ``max_bytes``, else BlobTooLarge); raises
        BlobNotFound or BlobIntegrityError."""
        ...

    def has(self, digest: str) -> bool:
        """Whether the backend holds ``digest`` (not verified)."""
        ...

    def candidates(self, alias: str, *, signers: Sequence[str] = ()) -> tuple[str, ...]:
        """The digests ``alias`` names: the slots of ``signers`` first, then the rest newest first."""
        ...

    def resolve(self, alias: str) -> str | None:
        """The first of :meth:`candidates`, or None; the caller verifies what it then fetches."""
        ...


@runtime_checkable
class BlobStore(BlobBackend, Protocol):
    """A backend plus verified, size-capped fetches from any supported URI."""

    def fetch(self, uri: str, *, expected_digest: str, max_bytes: int) -> bytes:
        """Read at most ``max_bytes`` from ``uri`` and return them if they hash to ``expected_digest``."""
        ...


class BlobStoreBase(ABC):
    """Convenience base for backends: implement put, get, has and candidates; get ``resolve`` and ``fetch``.

    Parameters
    ----------
    fetch_timeout_s : float, optional
        Timeout of each network operation in :meth:`fetch` (which also has a total deadline).
    """

    def __init__(self, *, fetch_timeout_s: float = 30.0) -> None:
        self.fetch_timeout_s = fetch_timeout_s

    @abstractmethod
    def put(self, data: bytes, *, alias: str | None = None, alias_signature: bytes | None = None) -> BlobRef:
        """Store ``data`` (idempotent) and optionally add it as a candidate of ``alias``."""

    @abstractmethod
    def get(self, digest: str, *, max_bytes: int | None = None) -> bytes:
        """The verified bytes of ``digest`` (at most ``max_bytes``, else BlobTooLarge); raises
        BlobNotFound or BlobIntegrityError."""

    @abstractmethod
    def has(self, digest: str) -> bool:
        """Whether the backend holds ``digest`` (not verified)."""

    @abstractmethod
    def candidates(self, alias: str, *, signers: Sequence[str] = ()) -> tuple[str, ...]:
        """The digests ``alias`` names: the slots of ``signers`` first, then the rest newest first."""

    def resolve(self, alias: str) -> str | None:
        """The first of :meth:`candidates` (an untrusted hint), or None."""
        found = self.candidates(alias)
        return found[0] if found else None

    def fetch(self, uri: str, *, expected_digest: str, max_bytes: int) -> bytes:
        """Read a blob by URI with a size cap and verify it.

        Parameters
        ----------
        uri : str
            ``http://`` or ``https://`` locator (more via
            :func:`syncline.blobstore.fetch.register_fetcher`); untrusted, so ``file://`` is refused.
        expected_digest : str
            The digest the bytes must hash to.
        max_bytes : int
            Largest acceptable blob; larger ones raise :class:`BlobTooLarge` without being read in full.

        Returns
        -------
        bytes
            The verified bytes.
        """
        from syncline.blobstore.fetch import fetch_uri

        return fetch_uri(uri, expected_digest=expected_digest, max_bytes=max_bytes, timeout_s=self.fetch_timeout_s)

    # ------------------------------------------------------------------ files (bounded memory)

    def fetch_to_file(self, uri: str, dest: Path, *, expected_digest: str, max_bytes: int) -> int:
        """Like :meth:`fetch`, but stream the blob into the file ``dest`` (bounded memory; written
        atomically, so ``dest`` only ever holds verified bytes). An ``http(s)`` transfer cut off
        mid-way resumes with a Range request; an interrupted call leaves a partial file next to
        ``dest`` that the next call for the same digest resumes from. Returns the size in bytes."""
        from syncline.blobstore.fetch import fetch_uri_to_file

        return fetch_uri_to_file(
            uri, Path(dest), expected_digest=expected_digest, max_bytes=max_bytes, timeout_s=self.fetch_timeout_s
        )

    def get_to_file(self, digest: str, dest: Path, *, max_bytes: int | None = None) -> int:
        """The verified bytes of ``digest`` written to ``dest`` (atomically); returns the size.

        This default goes through :meth:`get`; the local and HTTP stores stream instead."""
        data = self.get(digest, max_bytes=max_bytes)
        return write_file_atomic(Path(dest), iter((data,)))

    def put_file(self, path: Path, *, alias: str | None = None, alias_signature: bytes | None = None) -> BlobRef:
        """Store the contents of the file at ``path`` like :meth:`put` does with bytes.

        This default reads the file into memory; the local and HTTP stores stream it."""
        return self.put(Path(path).read_bytes(), alias=alias, alias_signature=alias_signature)


# ---------------------------------------------------------------------- locating by what the chain binds


class Putter(Protocol):
    """Anything that stores a blob under an alias: a backend, or a trainer's outbox."""

    def put(self, data: bytes, *, alias: str | None = None, alias_signature: bytes | None = None) -> BlobRef: ...


def put_signed(store: Putter, data: bytes, alias: str, account: LocalAccount) -> BlobRef:
    """Store ``data`` as ``account``'s own candidate of ``alias`` (no one else can displace it)."""
    return store.put(data, alias=alias, alias_signature=sign_alias(account, alias, digest_of(data)))


def put_signed_file(store: BlobStoreBase, path: Path, alias: str, account: LocalAccount) -> BlobRef:
    """:func:`put_signed` for the contents of a file, streamed (the digest is computed from disk first)."""
    digest, _ = digest_of_file(path)
    return store.put_file(path, alias=alias, alias_signature=sign_alias(account, alias, digest))


def find_verified(
    store: BlobBackend,
    aliases: Sequence[str],
    check: Callable[[bytes], T],
    *,
    signers: Sequence[str] = (),
    what: str = "blob",
    max_bytes: int | None = None,
) -> T:
    """The first candidate of ``aliases`` whose bytes pass ``check``: aliases are hints, never evidence.

    Parameters
    ----------
    store
        Where the aliases and blobs are.
    aliases
        Tried in order; each one's candidates with the slots of ``signers`` first.
    check
        Decodes the bytes and checks them against what the chain binds (a state root, a checkpoint
        root); raises (a :class:`SynclineError` or ``ValueError``) when they do not match. Any
        other exception it raises (a type confusion in a parser) also only skips that candidate.
    signers
        The owners the reader expects (e.g. the trainer of a submission).
    what
        What is looked for, for the error message.
    max_bytes
        Largest candidate read (a larger one is skipped like one that fails its check).

    Returns
    -------
    T
        What ``check`` returned for the first candidate that passed.

    Raises
    ------
    BlobNotFound
        No candidate passed (none exists, or each failed its check or its fetch).
    BlobUnavailable
        The store could not be asked (the caller retries later; never a verdict).
    """
    tried = 0
    last = "no candidate"
    for alias in aliases:
        for digest in store.candidates(alias, signers=signers):
            tried += 1
            try:
                return check(store.get(digest, max_bytes=max_bytes))
            except Exception as exc:  # any failure of one candidate's bytes: a bad candidate, never the caller's
                last = candidate_failure(exc)
    raise BlobNotFound(f"no {what} found under {', '.join(aliases)} ({tried} candidates tried; last: {last})")
