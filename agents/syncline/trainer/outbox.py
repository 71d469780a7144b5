"""A trainer's outbox: blobs it owes the blob store, kept on disk until the store takes them.

A commitment binds digests (payload hash, chunk root, checkpoint root), never the upload itself.
When the blob store is down at commit time the trainer still commits on chain, so the round
counts as done rather than missed (a missed-round streak ends in eviction and a slash), and it
uploads the spooled blobs on a later tick. Until then the data is unavailable: the witnesses leave
the submission out, which costs the trainer that round's reward and nobody anything else.

The outbox also keeps the trainer's own payloads for the rounds a censorship claim can still name,
so it answers an availability demand from disk even while the blob store is down.

Commit, then reveal (docs/protocol.md §10.6, :mod:`syncline.run.reveal`): a payload is *sealed*
when staged (kept, never uploaded) and *revealed* (uploaded, through the spool on an outage) only
once its round's commit phase has closed on chain, so no trainer of the open round can copy it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from syncline.blobstore import BlobRef, BlobStore
from syncline.blobstore.store import BlobStoreBase, BlobUnavailable, digest_of, digest_of_file
from syncline.errors import SynclineError
from syncline.observability import get_logger
from syncline.run.local_store import write_atomic

log = get_logger("syncline.trainer")
_OWN = re.compile(r"^(\d+)-(0x[0-9a-f]{64})\.bin$")


@dataclass
class Outbox:
    """Uploads through ``blobs``; what the store cannot take now waits in ``directory``."""

    blobs: BlobStore
    directory: Path

    def __post_init__(self) -> None:
        (self.directory / "pending").mkdir(parents=True, exist_ok=True)
        (self.directory / "own").mkdir(parents=True, exist_ok=True)
        (self.directory / "sealed").mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ uploading

    def put(self, data: bytes, *, alias: str | None = None, alias_signature: bytes | None = None) -> BlobRef:
        """Upload ``data`` (under ``alias`` when given); when the store cannot be reached, spool it
        and return the reference it will have, so the caller can commit its digest now."""
        try:
            return self.blobs.put(data, alias=alias, alias_signature=alias_signature)
        except BlobUnavailable as exc:
            digest = self._spool(data, alias, alias_signature)
            log.warning("trainer.upload_deferred", digest=digest[:18], bytes=len(data), error=str(exc)[:160])
            return BlobRef(digest=digest, size=len(data), uri=self._uri_for(digest))

    def put_file(self, path: Path) -> BlobRef:
        """:meth:`put` for the contents of the file ``path``, streamed (``put_file``): a large
        payload is never read into memory. When the store cannot be reached the file is spooled
        (hard-linked, or copied) like bytes would be."""
        try:
            if isinstance(self.blobs, BlobStoreBase):
                return self.blobs.put_file(path)
            return self.blobs.put(path.read_bytes())
        except BlobUnavailable as exc:
            digest, size = digest_of_file(path)
            blob = self.directory / "pending" / f"{digest}.blob"
            if not blob.exists():
                _link_or_copy(path, blob)
            meta = blob.with_suffix(".json")
            if not meta.exists():
                write_atomic(meta, b"[]")
            log.warning("trainer.upload_deferred", digest=digest[:18], bytes=size, error=str(exc)[:160])
            return BlobRef(digest=digest, size=size, uri=self._uri_for(digest))

    def flush(self) -> int:
        """Upload what is spooled, oldest first, until the store fails again; returns how many
        blobs are still waiting. A blob the store refuses for good (not an outage) is dropped."""
        for meta in self._pending():
            blob = meta.with_suffix(".blob")
            try:
                data = blob.read_bytes()
                aliases = json.loads(meta.read_text())
            except (OSError, ValueError):
                self._drop(meta)  # a torn spool entry (crash mid-write): nothing recoverable
                continue
            try:
                for entry in aliases or [{"alias": None, "signature": None}]:
                    signature = entry.get("signature")
                    self.blobs.put(
                        data,
                        alias=entry.get("alias"),
                        alias_signature=bytes.fromhex(signature) if signature else None,
                    )
            except BlobUnavailable:
                break
            except SynclineError as exc:
                log.warning("trainer.upload_refused", digest=meta.stem[:18], error=str(exc)[:160])
            else:
                log.info("trainer.upload_completed", digest=meta.stem[:18], bytes=len(data))
            self._drop(meta)
        return sum(1 for _ in self._pending())

    # ------------------------------------------------------------------ commit, then reveal

    def seal(self, round_: int, data: bytes) -> BlobRef:
        """Keep this trainer's payload of ``round_`` (:meth:`keep_own`) sealed until
        :meth:`reveal`: nothing is uploaded; returns the reference it will have, to commit now."""
        self.keep_own(round_, data)
        digest = digest_of(data)
        _link_or_copy(self.directory / "own" / f"{round_}-{digest}.bin", self._sealed(round_, digest))
        return BlobRef(digest=digest, size=len(data), uri=self._uri_for(digest))

    def seal_blob(self, round_: int, data: bytes) -> BlobRef:
        """Seal another blob of ``round_`` the payload can be derived from (an eager task's
        checkpoints: the last one minus the start state is the payload) until :meth:`reveal`."""
        digest = digest_of(data)
        sealed = self._sealed(round_, digest)
        if not sealed.exists():
            write_atomic(sealed, data)
        return BlobRef(digest=digest, size=len(data), uri=self._uri_for(digest))

    def seal_file(self, round_: int, path: Path) -> BlobRef:
        """:meth:`seal` for a payload in the file ``path`` (hashed streaming, never read whole)."""
        digest, size = digest_of_file(path)
        self.keep_own_file(round_, path, digest)
        _link_or_copy(path, self._sealed(round_, digest))
        return BlobRef(digest=digest, size=size, uri=self._uri_for(digest))

    def sealed_rounds(self) -> list[int]:
        """The rounds with a payload still sealed, ascending."""
        return sorted({int(p.name.split("-", 1)[0]) for p in (self.directory / "sealed").glob("*.bin")})

    def reveal(self, through_round: int) -> int:
        """Upload the sealed payloads of rounds up to ``through_round`` (their commit phase closed);
        an outage spools them like any upload (:meth:`flush` sends them later). Returns how many
        were revealed (handed to the store or to the spool)."""
        revealed = 0
        for path in sorted((self.directory / "sealed").glob("*.bin")):
            match = _OWN.match(path.name)
            if match is None or int(match.group(1)) > through_round:
                continue
            ref = self.put_file(path)
            path.unlink(missing_ok=True)
            revealed += 1
            log.info("trainer.payload_revealed", round=int(match.group(1)), digest=ref.digest[:18], bytes=ref.size)
        return revealed

    def drop_sealed(self, round_: int) -> None:
        """Forget what is sealed for ``round_`` (work that was never committed)."""
        for path in (self.directory / "sealed").glob(f"{round_}-*.bin"):
            path.unlink(missing_ok=True)

    def _sealed(self, round_: int, digest: str) -> Path:
        return self.directory / "sealed" / f"{round_}-{digest.lower()}.bin"

    # ------------------------------------------------------------------ own payloads

    def keep_own(self, round_: int, data: bytes) -> None:
        """Keep this trainer's payload of ``round_`` on disk (for availability demands)."""
        write_atomic(self.directory / "own" / f"{round_}-{digest_of(data)}.bin", data)

    def keep_own_file(self, round_: int, path: Path, digest: str) -> None:
        """:meth:`keep_own` for a payload in the file ``path`` whose digest is ``digest``."""
        kept = self.directory / "own" / f"{round_}-{digest.lower()}.bin"
        if not kept.exists():
            _link_or_copy(path, kept)

    def own(self, digest: str) -> bytes | None:
        """This trainer's kept payload with ``digest`` (verified), or None."""
        for path in (self.directory / "own").glob(f"*-{digest.lower()}.bin"):
            data = path.read_bytes()
            if digest_of(data) == digest.lower():
                return data
        return None

    def prune_own(self, before_round: int) -> None:
        """Forget kept payloads of rounds before ``before_round`` (no claim can name them now)."""
        for path in (self.directory / "own").iterdir():
            match = _OWN.match(path.name)
            if match and int(match.group(1)) < before_round:
                path.unlink(missing_ok=True)

    # ------------------------------------------------------------------ internal

    def _spool(self, data: bytes, alias: str | None, alias_signature: bytes | None) -> str:
        digest = digest_of(data)
        meta = self.directory / "pending" / f"{digest}.json"
        blob = meta.with_suffix(".blob")
        if not blob.exists():
            write_atomic(blob, data)
        aliases = json.loads(meta.read_text()) if meta.exists() else []
        if alias is not None:
            aliases.append({"alias": alias, "signature": alias_signature.hex() if alias_signature else None})
        write_atomic(meta, json.dumps(aliases).encode())
        return digest

    def _pending(self) -> Iterator[Path]:
        metas = (self.directory / "pending").glob("*.json")
        yield from sorted(metas, key=lambda p: (p.stat().st_mtime_ns, p.name))

    def _uri_for(self, digest: str) -> str:
        uri_for = getattr(self.blobs, "uri_for", None)
        return str(uri_for(digest)) if callable(uri_for) else ""

    @staticmethod
    def _drop(meta: Path) -> None:
        meta.with_suffix(".blob").unlink(missing_ok=True)
        meta.unlink(missing_ok=True)


def _link_or_copy(source: Path, dest: Path) -> None:
    """``dest`` with the contents of ``source``: a hard link where the file system allows it."""
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, dest)
