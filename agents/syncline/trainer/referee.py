"""Refereed re-execution of one segment of a trainer's inner loop (training-fraud proofs).

A submission commits ``payloadHash``, ``chunkRoot`` and ``checkpointRoot`` (the Merkle root over
the hashes of checkpoints ``c_0 .. c_S``, see :mod:`syncline.protocol.checkpoints`). Segment ``s``:

* ``s < S`` (training): fetch ``c_s``, check it against the manifest (itself checked against the
  committed root), re-run steps ``[s * interval, min((s + 1) * interval, H))`` on the trainer's
  shards with the trainer's batches, and compare the hash of the result with ``hash(c_{s+1})``.
  Segment 0 also checks that ``c_0`` holds the round's start weights.
* ``s == S`` (derivation): fetch ``c_S`` and check that the committed payload hash and chunk root
  are those of the payload derived from ``c_S`` and the round's start state.

Guilty on any mismatch, and when something the trainer had to publish (the manifest, a needed
checkpoint) is missing, fails its hash, is malformed or does not open the committed root.

:func:`check_segment` and :func:`find_faulty` take explicit inputs (no chain, no blob store);
:func:`referee_segment` and :func:`find_faulty_segment` read them from a :class:`TaskContext`.
Re-execution is bit-exact on CPU; a GPU trainer would need a tolerance, which is not implemented.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from eth_utils import keccak

from syncline.blobstore import BlobStore
from syncline.errors import SynclineError
from syncline.modality.language import LanguageAdapter
from syncline.observability import get_logger
from syncline.protocol.checkpoints import (
    MAX_HEADER_BYTES,
    MAX_RNG_BYTES,
    Checkpoint,
    CheckpointError,
    CheckpointManifest,
    checkpoint_hash,
    interval_of,
    manifest_alias,
    manifest_root_alias,
    segment_bounds,
    segment_count,
)
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.spec import TrainingTaskSpec
from syncline.protocol.state import TrainingState
from syncline.run.context import StateUnavailable, TaskContext
from syncline.trainer.agent import ZERO_ADDRESS, round_seed
from syncline.trainer.segments import derive_payload, holds_start_state, replay_segment

log = get_logger("syncline.referee")
ZERO32 = "0x" + "00" * 32


class RefereeError(SynclineError):
    """The referee cannot judge (no such submission, segment out of range, start state unknown)."""


@dataclass(frozen=True)
class Verdict:
    """The outcome of refereeing one segment: ``segment == segments`` is the derivation segment."""

    segment: int
    segments: int
    guilty: bool
    reason: str

    @property
    def derivation(self) -> bool:
        return self.segment == self.segments


@dataclass(frozen=True)
class Claim:
    """What the trainer committed on chain for one (task, round, fragment)."""

    payload_hash: bytes
    chunk_root: bytes
    checkpoint_root: bytes


@dataclass(frozen=True)
class ReplayInputs:
    """Everything public a referee needs to redo a trainer's round."""

    adapter: LanguageAdapter
    build_model: Callable[[], torch.nn.Module]
    layout: ParameterLayout
    shards: Sequence[bytes]
    seed: int
    inner_steps: int
    interval: int
    gradient_bits: int
    start_state: TrainingState

    @property
    def segments(self) -> int:
        return segment_count(self.inner_steps, self.interval)


CheckpointFetcher = Callable[[CheckpointManifest, int], bytes]
"""``(manifest, i) -> bytes of c_i``; raises a SynclineError when the blob cannot be had."""


def max_checkpoint_bytes(layout: ParameterLayout) -> int:
    return 16 + MAX_HEADER_BYTES + 12 * layout.numel + MAX_RNG_BYTES


def blob_fetcher(blobs: BlobStore, layout: ParameterLayout) -> CheckpointFetcher:
    """Fetch checkpoints by digest from ``blobs``, falling back to the manifest's (untrusted) uri."""
    limit = max_checkpoint_bytes(layout)

    def fetch(manifest: CheckpointManifest, index: int) -> bytes:
        digest = manifest.digest(index)
        try:
            return blobs.get(digest)
        except SynclineError:
            if not manifest.uris[index]:
                raise
            return blobs.fetch(manifest.uris[index], expected_digest=digest, max_bytes=limit)

    return fetch


# ---------------------------------------------------------------------- the pure core


def _guilty(segment: int, segments: int, reason: str) -> Verdict:
    return Verdict(segment, segments, True, reason)


def _one_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]


def _load(
    manifest: CheckpointManifest, index: int, fetch: CheckpointFetcher, layout: ParameterLayout
) -> Checkpoint | str:
    """Checkpoint ``index`` verified against its committed hash, or why it cannot be had."""
    try:
        data = fetch(manifest, index)
    except SynclineError as exc:
        return f"checkpoint {index} is unavailable: {_one_line(exc)}"
    if checkpoint_hash(data) != manifest.hashes[index]:
        return f"checkpoint {index} does not match its committed hash"
    try:
        return Checkpoint.from_bytes(data, layout=layout, max_bytes=max_checkpoint_bytes(layout))
    except CheckpointError as exc:
        return f"checkpoint {index} is malformed: {_one_line(exc)}"


def parse_manifest(
    manifest: bytes | CheckpointManifest | None, claim: Claim, inputs: ReplayInputs
) -> CheckpointManifest:
    """The manifest, checked against the task and the committed root (CheckpointError otherwise)."""
    if manifest is None:
        raise CheckpointError("the checkpoint manifest is unavailable")
    parsed = manifest if isinstance(manifest, CheckpointManifest) else CheckpointManifest.from_json(manifest)
    parsed.check_task(inputs.inner_steps, inputs.interval)
    parsed.verify_against(claim.checkpoint_root)
    return parsed


def check_segment(
    segment: int,
    claim: Claim,
    manifest: bytes | CheckpointManifest | None,
    fetch: CheckpointFetcher,
    inputs: ReplayInputs,
) -> Verdict:
    """Referee segment ``segment`` (``0 .. S``; ``S`` is the derivation segment) of a submission.

    Raises RefereeError only for a segment out of range; everything the trainer is answerable
    for ends in a verdict.
    """
    total = inputs.segments
    if isinstance(segment, bool) or not isinstance(segment, int) or not 0 <= segment <= total:
        raise RefereeError(f"segment {segment!r} out of range 0..{total} ({total} is the derivation segment)")
    try:
        parsed = parse_manifest(manifest, claim, inputs)
    except CheckpointError as exc:
        return _guilty(segment, total, f"manifest: {_one_line(exc)}")
    if segment == total:
        return _check_derivation(parsed, claim, fetch, inputs)
    return _check_training(segment, parsed, fetch, inputs)


def _check_derivation(
    manifest: CheckpointManifest, claim: Claim, fetch: CheckpointFetcher, inputs: ReplayInputs
) -> Verdict:
    total = inputs.segments
    last = _load(manifest, total, fetch, inputs.layout)
    if isinstance(last, str):
        return _guilty(total, total, last)
    if last.step != inputs.inner_steps:
        return _guilty(total, total, f"checkpoint {total} claims step {last.step}, the round has {inputs.inner_steps}")
    try:
        payload, chunk_root = derive_payload(inputs.start_state, last, inputs.gradient_bits)
    except CheckpointError as exc:
        return _guilty(total, total, _one_line(exc))
    if keccak(payload) != claim.payload_hash:
        return _guilty(total, total, "the committed payload is not the one derived from the last checkpoint")
    if chunk_root != claim.chunk_root:
        return _guilty(total, total, "the committed chunk root is not the derived payload's")
    return Verdict(total, total, False, "the payload is derived from the last checkpoint")


def _check_training(
    segment: int, manifest: CheckpointManifest, fetch: CheckpointFetcher, inputs: ReplayInputs
) -> Verdict:
    total = inputs.segments
    start, stop = segment_bounds(segment, inputs.inner_steps, inputs.interval)
    ckpt = _load(manifest, segment, fetch, inputs.layout)
    if isinstance(ckpt, str):
        return _guilty(segment, total, ckpt)
    if ckpt.step != start:
        return _guilty(segment, total, f"checkpoint {segment} claims step {ckpt.step}, expected {start}")
    if segment == 0 and not holds_start_state(ckpt, inputs.start_state):
        return _guilty(segment, total, "checkpoint 0 does not hold the round's start weights")
    try:
        replayed = replay_segment(
            inputs.adapter,
            inputs.build_model(),
            inputs.layout,
            ckpt,
            inputs.shards,
            seed=inputs.seed,
            segment=segment,
            inner_steps=inputs.inner_steps,
            interval=inputs.interval,
        )
    except CheckpointError as exc:  # e.g. a generator state torch refuses
        return _guilty(segment, total, f"checkpoint {segment} cannot be replayed: {_one_line(exc)}")
    if checkpoint_hash(replayed) != manifest.hashes[segment + 1]:
        return _guilty(
            segment,
            total,
            f"re-running steps {start}..{stop - 1} from checkpoint {segment} does not give checkpoint {segment + 1}",
        )
    return Verdict(segment, total, False, f"steps {start}..{stop - 1} re-run bit-exactly")


def find_faulty(
    claim: Claim, manifest: bytes | CheckpointManifest | None, fetch: CheckpointFetcher, inputs: ReplayInputs
) -> Verdict | None:
    """What a challenger runs: the derivation segment first (cheap), then training segments
    ``0 .. S-1`` in order; the first guilty verdict, or None when every segment passes."""
    total = inputs.segments
    for segment in (total, *range(total)):
        verdict = check_segment(segment, claim, manifest, fetch, inputs)
        if verdict.guilty:
            return verdict
    return None


# ---------------------------------------------------------------------- reading a submission from the chain


@dataclass(frozen=True)
class RefereeCase:
    """One submission with everything needed to referee it."""

    claim: Claim
    manifest: bytes | None
    fetch: CheckpointFetcher
    inputs: ReplayInputs


def _b32(value: object, what: str) -> bytes:
    if isinstance(value, bytes | bytearray) and len(value) == 32:
        return bytes(value)
    if isinstance(value, str):
        text = value[2:] if value.startswith("0x") else value
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            raw = b""
        if len(raw) == 32:
            return raw
    raise RefereeError(f"{what} is not a 32-byte value: {value!r}")


def submission_checkpoint_root(sub: object) -> bytes:
    """The ``checkpointRoot`` of a chain submission view (the one place that reads the field)."""
    value = getattr(sub, "checkpoint_root", None)
    if value is None:
        raise RefereeError("the chain client's submission has no checkpoint_root (contract without checkpointRoot?)")
    return _b32(value, "checkpoint root")


def _interval(spec: TrainingTaskSpec) -> int:
    return interval_of(spec)


def _round_start_roots(ctx: TaskContext, round_: int) -> list[str]:
    """The state roots round ``round_`` may legitimately have trained from, most likely first.

    Normally one root: the root round ``round_ - 1`` closed with (the initial root for round 0),
    which the contract records as the round's ``prevStateRoot`` when it finalizes. A proven fault
    that rolls the state back *while* the round is open changes the task's root under the
    trainers' feet: trainers that started before the rollback trained from the root round
    ``round_ - 1`` recorded, the witnesses finalize on the restored one. Both are honest.
    """
    roots: list[str] = []
    rr = ctx.market.round(ctx.task_id, round_)
    prev = str(getattr(rr, "prev_state_root", "") or "").lower()
    if prev and prev != ZERO32:
        roots.append(prev)
    if round_ == 0:
        roots.append(ctx.spec.initial_state_root.lower())
    else:
        before = ctx.market.round(ctx.task_id, round_ - 1)
        if before.closed_at != 0 and before.state_root.lower() != ZERO32:
            roots.append(before.state_root.lower())
    if not roots:
        raise RefereeError(f"round {round_ - 1} has not closed: round {round_} has no start state yet")
    return list(dict.fromkeys(roots))


def _round_start_state(
    ctx: TaskContext, round_: int, manifest: bytes | None, fetch: CheckpointFetcher
) -> TrainingState:
    """The start state whose weights checkpoint 0 holds, among the legitimate ones; the first
    legitimate one when none matches (segment 0 then reports the mismatch)."""
    states: list[TrainingState] = []
    missing: StateUnavailable | None = None
    for root in _round_start_roots(ctx, round_):
        try:
            states.append(ctx.fetch_state(root))
        except StateUnavailable as exc:  # judged on the roots whose state is available
            missing = exc
    if not states:
        assert missing is not None
        raise missing
    if len(states) == 1 or manifest is None:
        return states[0]
    try:
        first = Checkpoint.from_bytes(fetch(CheckpointManifest.from_json(manifest), 0), layout=ctx.layout)
    except (SynclineError, ValueError):
        return states[0]
    for state in states:
        if holds_start_state(first, state):
            return state
    return states[0]


def _assigned_shards(ctx: TaskContext, round_: int, fragment: int, trainer: str) -> list[int]:
    """The shards ``trainer`` held when it committed (the last ``ShardsAssigned`` before its
    ``SubmissionCommitted``); the current assignment when the logs cannot tell."""
    current = ctx.market.trainer(ctx.task_id, trainer).shards
    try:
        commits = ctx.market.get_logs("SubmissionCommitted", taskId=ctx.task_id, round=round_, fragment=fragment)
        assigned = ctx.market.get_logs("ShardsAssigned", taskId=ctx.task_id, trainer=trainer)
    except Exception as exc:  # an ABI without these events, or a node that prunes logs
        log.info("referee.shards_from_current_assignment", reason=_one_line(exc))
        return current
    if not commits:
        return current
    at = (commits[-1]["blockNumber"], commits[-1]["logIndex"])
    masks = [int(e["args"]["shardMask"]) for e in assigned if (e["blockNumber"], e["logIndex"]) < at]
    if not masks:
        return current
    return [i for i in range(256) if masks[-1] >> i & 1]


def _fetch_manifest(blobs: BlobStore, root: bytes, aliases: Sequence[str]) -> bytes | None:
    """The first manifest found under ``aliases`` that opens ``root``; else the first one found
    (the referee then reports why it fails); None when no alias resolves to a readable blob."""
    found: list[bytes] = []
    for alias in aliases:
        try:
            digest = blobs.resolve(alias)
            data = blobs.get(digest) if digest else None
        except SynclineError:
            continue
        if data is None:
            continue
        try:
            CheckpointManifest.from_json(data).verify_against(root)
            return data
        except CheckpointError:
            found.append(data)
    return found[0] if found else None


def load_case(
    ctx: TaskContext,
    round_: int,
    fragment: int,
    *,
    shards: Sequence[int] | None = None,
    start_state: TrainingState | None = None,
) -> RefereeCase:
    """Read a submission's commitments from the chain and its public inputs from the blob store.

    ``shards`` (the trainer's shard indices that round) and ``start_state`` override what is
    read from the chain. Raises RefereeError / StateUnavailable when the referee cannot judge.
    """
    sub = ctx.market.submission(ctx.task_id, round_, fragment)
    if sub.trainer == ZERO_ADDRESS:
        raise RefereeError(f"task {ctx.task_id} round {round_} fragment {fragment}: no submission")
    claim = Claim(
        payload_hash=_b32(sub.payload_hash, "payload hash"),
        chunk_root=_b32(sub.chunk_root, "chunk root"),
        checkpoint_root=submission_checkpoint_root(sub),
    )
    aliases = (manifest_root_alias(claim.checkpoint_root), manifest_alias(ctx.task_id, round_, fragment))
    manifest = _fetch_manifest(ctx.blobs, claim.checkpoint_root, aliases)
    fetch = blob_fetcher(ctx.blobs, ctx.layout)
    if start_state is None:
        start_state = _round_start_state(ctx, round_, manifest, fetch)
    indices = list(shards) if shards is not None else _assigned_shards(ctx, round_, fragment, sub.trainer)
    inputs = ReplayInputs(
        adapter=ctx.adapter,
        build_model=ctx.build_model,
        layout=ctx.layout,
        shards=[ctx.shard(i) for i in indices],
        seed=round_seed(ctx.task_id, round_, fragment),
        inner_steps=ctx.spec.inner_steps,
        interval=_interval(ctx.spec),
        gradient_bits=ctx.spec.gradient_bits,
        start_state=start_state,
    )
    return RefereeCase(claim, manifest, fetch, inputs)


def referee_segment(
    ctx: TaskContext,
    round_: int,
    fragment: int,
    segment: int,
    *,
    shards: Sequence[int] | None = None,
    start_state: TrainingState | None = None,
) -> Verdict:
    """Referee one segment of the submission ``(ctx.task_id, round_, fragment)``."""
    case = load_case(ctx, round_, fragment, shards=shards, start_state=start_state)
    verdict = check_segment(segment, case.claim, case.manifest, case.fetch, case.inputs)
    log.info(
        "referee.verdict",
        task_id=ctx.task_id,
        round=round_,
        fragment=fragment,
        segment=segment,
        guilty=verdict.guilty,
        reason=verdict.reason,
    )
    return verdict


def find_faulty_segment(
    ctx: TaskContext,
    round_: int,
    fragment: int,
    *,
    shards: Sequence[int] | None = None,
    start_state: TrainingState | None = None,
) -> Verdict | None:
    """The first guilty segment of a submission (derivation first, then training segments in
    order), or None when the whole round re-executes bit-exactly."""
    case = load_case(ctx, round_, fragment, shards=shards, start_state=start_state)
    return find_faulty(case.claim, case.manifest, case.fetch, case.inputs)


def training_checker(ctx: TaskContext, round_: int, fragment: int) -> tuple[int, str] | None:
    """:func:`find_faulty_segment` as ``(segment, reason)`` or None: the shape of the challenger's
    ``TrainingChecker``."""
    verdict = find_faulty_segment(ctx, round_, fragment)
    return None if verdict is None else (verdict.segment, verdict.reason)
