"""Eager-checkpoint tasks: committed checkpoints withheld past the availability deadline.

In an eager task (``verification.checkpoints: eager``) a trainer uploads every checkpoint of a round
with its commitment. A checkpoint the auditor cannot fetch is never evidence by itself (the
auditor's own store or network may be out, :class:`~syncline.court.referee.Undecided`), but a
trainer that commits checkpoints and never uploads them must not be paid like an honest one for
ever. So, as for a drawn segment of an on-demand task (:mod:`syncline.protocol.spot_checks`):

* every audit of a submission whose checkpoints are not in hand records one *try* per item (the
  manifest and each checkpoint ``c_0 .. c_S``, fetched by digest and checked against its committed
  hash) at the chain's time; an item fetched once is never tried again;
* :func:`withheld_segments` (pure): the segments whose data failed on every try and still failed
  on a try after the availability deadline ``closedAt + floor(challengeWindow / 2)``
  (:func:`~syncline.protocol.spot_checks.spot_check_deadline`); a failure before the deadline is
  never evidence;
* once that is not empty, the auditor escalates to exactly one training claim per submission (per
  trainer and round) on the chain's existing claim mechanism (``challengeTraining``), on the
  segment :func:`withheld_claim_segment` picks deterministically (every witness that sees the same
  withheld set picks the same segment, so racing duplicates revert ``SynclineDuplicateChallenge``);
  it files nothing when any training claim on that submission is already on chain, and never
  escalates the same submission twice;
* the accused answers by publishing the segment (``answerTraining``) and the committee referees it;
  only silence past the response window convicts (``expireChallenge`` upholds, ``SegmentWithheld``).

The draw of the segment (normative, ``docs/protocol.md`` §14)::

    h       = keccak256(b"syncline-withheld-v1" ‖ uint256(task) ‖ uint256(round) ‖ uint256(fragment) ‖ R ‖ B)
    segment = W[uint256(h) mod len(W)]      (W: the withheld segments, ascending)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from syncline.chain.calls import ZERO_ADDRESS
from syncline.court.audit import TrainingCheck
from syncline.court.referee import (
    PRIVATE_UNREVEALED,
    Unanswered,
    Undecided,
    blob_fetcher,
    submission_manifest,
)
from syncline.errors import SynclineError
from syncline.observability import get_logger
from syncline.protocol.checkpoints import checkpoint_hash
from syncline.protocol.enums import ChallengeKind
from syncline.protocol.spot_checks import checkpoints_for_segment, draw_hash, spot_check_deadline
from syncline.run.context import TaskContext
from syncline.run.loop import pending_time

log = get_logger("syncline.court")

WITHHELD_DOMAIN = b"syncline-withheld-v1"
MANIFEST = -1
"""The item index of the checkpoint manifest in a :class:`FetchTry` (checkpoints are ``0 .. S``)."""


@dataclass(frozen=True)
class FetchTry:
    """One attempt of ours to fetch an item of a submission: ``item`` is a checkpoint index or
    :data:`MANIFEST`, ``at`` the chain time of the attempt, ``ok`` whether the committed bytes (the
    manifest that opens the committed root, a checkpoint whose hash is the committed one) came."""

    item: int
    at: int
    ok: bool


def withheld_segments(tries: Iterable[FetchTry], *, segments: int, deadline: int) -> tuple[int, ...]:
    """The segments (``0 .. segments``; ``segments`` = S is the derivation one) whose committed
    data stayed unavailable past ``deadline``, ascending.

    An item is withheld iff no try fetched it and a try *after* ``deadline`` failed: a failure
    before the deadline is never evidence, an item fetched once is available, an item never tried
    is not withheld. A withheld manifest withholds every segment (no checkpoint can be located or
    checked without it); a segment is withheld iff the checkpoint it starts from is (``c_s``; the
    derivation segment's ``c_S``). Its end checkpoint's bytes are not needed by a referee that
    replays exactly (it compares the committed hash), so a segment whose start is published can be
    judged innocent although its end is withheld: claiming it would cost the claimant its bond.
    Every withheld ``c_k`` starts segment ``k``, so the set is never empty when a checkpoint is."""
    fetched: set[int] = set()
    failed_late: set[int] = set()
    for t in tries:
        if t.ok:
            fetched.add(t.item)
        elif t.at > deadline:
            failed_late.add(t.item)
    withheld = failed_late - fetched
    if MANIFEST in withheld:
        return tuple(range(segments + 1))
    return tuple(s for s in range(segments + 1) if checkpoints_for_segment(s, segments)[0] in withheld)


def withheld_claim_segment(
    task_id: int, round_: int, fragment: int, state_root: bytes, block_hash: bytes, withheld: Sequence[int]
) -> int:
    """The one segment a withheld submission is claimed on: ``W[keccak256(domain ‖ uint256 task ‖
    uint256 round ‖ uint256 fragment ‖ R ‖ B) mod len(W)]`` with ``W`` the withheld segments in
    ascending order, ``R`` the round's finalized state root and ``B`` the hash of the block of its
    ``RoundFinalized`` event (as the spot-check draw)."""
    if not withheld:
        raise ValueError("no withheld segment to claim")
    ordered = sorted(set(withheld))
    h = draw_hash(WITHHELD_DOMAIN, task_id, round_, fragment, state_root, block_hash)
    return ordered[int.from_bytes(h, "big") % len(ordered)]


def training_claimed(ctx: TaskContext, round_: int, fragment: int) -> int | None:
    """The id of a training claim already on chain against submission ``(round_, fragment)``
    (any segment, anyone's), or None."""
    for ev in ctx.market.get_logs("ChallengeOpened", taskId=ctx.task_id, round=round_):
        a = ev["args"]
        if int(a["kind"]) == ChallengeKind.TRAINING_FRAUD and int(a["fragment"]) == fragment:
            return int(a["challengeId"])
    return None


@dataclass
class WithheldWatch:
    """One auditor's memory of the items it failed to fetch, per submission, and of the
    submissions it escalated (or found claimed on chain): each is claimed at most once."""

    tries: dict[tuple[int, int], list[FetchTry]] = field(default_factory=dict)
    settled: set[tuple[int, int]] = field(default_factory=set)

    def check(self, ctx: TaskContext, round_: int, fragment: int, outcome: TrainingCheck) -> TrainingCheck:
        """``outcome`` (an eager task's training check of ``(round_, fragment)``), or, when it is
        :class:`Undecided` for want of data and that data stayed withheld past the availability
        deadline, :class:`Unanswered` on the segment to claim; None once the submission is claimed."""
        key = (round_, fragment)
        if key in self.settled:
            return None
        if not isinstance(outcome, Undecided) or outcome.reason.startswith(PRIVATE_UNREVEALED):
            return outcome
        spec = ctx.spec
        rr = ctx.market.round(ctx.task_id, round_)
        if rr.closed_at == 0:
            return outcome
        tries = self.tries.setdefault(key, [])
        try:
            self._probe(ctx, round_, fragment, tries)
        except SynclineError as exc:  # the chain or our store is out: no try recorded
            log.info("challenger.withheld_probe_deferred", round=round_, fragment=fragment, reason=str(exc)[:160])
            return outcome
        deadline = spot_check_deadline(rr.closed_at, spec.challenge_window_s)
        withheld = withheld_segments(tries, segments=spec.checkpoint_segments, deadline=deadline)
        if not withheld:
            return outcome
        existing = training_claimed(ctx, round_, fragment)
        if existing is not None:
            log.info("challenger.withheld_already_claimed", round=round_, fragment=fragment, challenge=existing)
            self.settled.add(key)
            return None
        block_hash = ctx.market.finalization_block_hash(ctx.task_id, round_)
        if block_hash is None:
            return outcome
        segment = withheld_claim_segment(
            ctx.task_id, round_, fragment, bytes.fromhex(rr.state_root[2:]), block_hash, withheld
        )
        self.settled.add(key)
        return Unanswered(
            segment,
            spec.checkpoint_segments,
            f"checkpoints of segments {list(withheld)} withheld past the availability deadline {deadline}",
        )

    def _probe(self, ctx: TaskContext, round_: int, fragment: int, tries: list[FetchTry]) -> None:
        """One try of every item not fetched yet: the manifest, then each committed checkpoint."""
        fetched = {t.item for t in tries if t.ok}
        sub = ctx.market.submission(ctx.task_id, round_, fragment)
        if sub.trainer == ZERO_ADDRESS:
            return
        now = pending_time(ctx.market.w3)
        manifest = submission_manifest(ctx, round_, fragment, sub)
        tries.append(FetchTry(MANIFEST, now, manifest is not None))
        if manifest is None:
            return
        fetch = blob_fetcher(ctx.blobs, ctx.layout)
        for index in range(len(manifest.hashes)):
            if index in fetched:
                continue
            try:
                ok = checkpoint_hash(fetch(manifest, index)) == manifest.hashes[index]
            except SynclineError:
                ok = False
            tries.append(FetchTry(index, now, ok))
