"""Answered training claims whose segment the accused never published (issue 27 item 1).

An accused trainer answers a training claim (``answerTraining``) to say the segment's checkpoints
are in the task's blob store. A referee that cannot obtain them votes ``Unavailable``
(``refereeUnavailable``) only on evidence that they are absent, never on its own failure:

* the claim is answered on chain (the contract refuses the verdict otherwise);
* the task's blob store is reachable: it answers its health check (``GET /healthz``); a local
  directory store always is;
* and the data bound on chain is definitely not there: no candidate under the submission's
  manifest aliases (in the trainer's signed slot first) opens the committed ``checkpointRoot``
  (every candidate fetched: 404, or bytes that are not a manifest of that root), or a checkpoint
  the segment needs (:func:`~syncline.protocol.spot_checks.checkpoints_for_segment`) is absent
  (``HEAD /blobs/<digest>`` answers 404; the store is content-addressed by the committed hash, so
  bytes it holds under that digest are the committed bytes).

A timeout, a refused connection, a 5xx or any other error anywhere on the way is "cannot tell"
(``None``): the referee retries later and never votes on it. It keeps trying to replay, and replaces
its ``Unavailable`` verdict with a replay verdict (``refereeVote``) once the data shows up.
"""

from __future__ import annotations

from syncline.blobstore import BlobStore
from syncline.blobstore.store import BlobNotFound
from syncline.chain.market import SubmissionView
from syncline.court.referee import Claim, manifest_aliases, opened_manifest
from syncline.errors import SynclineError
from syncline.observability import get_logger
from syncline.protocol.checkpoints import MAX_MANIFEST_BYTES, CheckpointManifest
from syncline.protocol.spot_checks import checkpoints_for_segment
from syncline.run.context import TaskContext

log = get_logger("syncline.court")


def store_reachable(blobs: BlobStore) -> bool:
    """Whether the store answers its health check (a store without one, a local directory: yes)."""
    healthy = getattr(blobs, "healthy", None)
    return bool(healthy()) if callable(healthy) else True


def _published_manifest(
    blobs: BlobStore, sub: SubmissionView, aliases: tuple[str, ...], *, inner_steps: int, interval: int
) -> CheckpointManifest | None:
    """The manifest opening ``sub``'s committed root; None when definitely none is published (every
    candidate absent or not such a manifest); a store error raises (we cannot tell)."""
    root = Claim.of(sub).checkpoint_root
    for alias in aliases:
        for digest in blobs.candidates(alias, signers=(sub.trainer,)):
            try:
                data = blobs.get(digest, max_bytes=MAX_MANIFEST_BYTES)
            except BlobNotFound:
                continue
            try:
                return opened_manifest(data, root, inner_steps=inner_steps, interval=interval)
            except Exception:  # not the manifest of this root: someone else's candidate
                continue
    return None


def segment_unavailable(ctx: TaskContext, round_: int, fragment: int, segment: int) -> str | None:
    """Why the claimed segment's committed data is definitely absent from the task's reachable
    store, or None when it is there or we cannot tell (never evidence then)."""
    sub = ctx.market.submission(ctx.task_id, round_, fragment)
    try:
        if not store_reachable(ctx.blobs):
            return None
        root = Claim.of(sub).checkpoint_root
        aliases = manifest_aliases(ctx.task_id, round_, fragment, root)
        manifest = _published_manifest(
            ctx.blobs,
            sub,
            aliases,
            inner_steps=ctx.spec.inner_steps,
            interval=ctx.spec.checkpoint_interval_steps,
        )
        if manifest is None:
            return "no checkpoint manifest that opens the committed root is in the store"
        for index in checkpoints_for_segment(segment, ctx.spec.checkpoint_segments):
            digest = manifest.digest(index)
            if not ctx.blobs.has(digest):
                return f"checkpoint {index} ({digest}) is not in the store"
    except SynclineError as exc:  # our fetch failed (timeout, refused, 5xx): cannot tell
        log.info("referee.availability_unknown", round=round_, fragment=fragment, reason=str(exc)[:160])
        return None
    return None
