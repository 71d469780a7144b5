"""Refereed re-execution of one segment of a trainer's inner loop (training-fraud proofs).

A submission commits ``payloadHash``, ``chunkRoot`` and ``checkpointRoot`` (the Merkle root over
the hashes of checkpoints ``c_0 .. c_S``, see :mod:`syncline.protocol.checkpoints`). Segment ``s``:

* ``s < S`` (training): fetch ``c_s``, check it against the manifest (itself checked against the
  committed root), re-run steps ``[s * interval, min((s + 1) * interval, H))`` on the trainer's
  shards with the trainer's batches on the referee's own device (:class:`RefereeDevice`), and
  compare the result with ``c_{s+1}`` (when its shards were reassigned while the round was open, a
  replay on any set it held counts). When ``c_s`` declares the referee's device class and
  deterministic mode the replay runs in the trainer's precision and a bit-exact match (hash
  against ``hash(c_{s+1})``) is sufficient for innocence, never necessary: the same class runs
  other kernels on another CPU instruction set (AVX-512, AVX2, scalar) or torch build. Every replay
  that does not match bit for bit -- that one, or one on another device class -- fetches
  ``c_{s+1}`` and accepts it when its distance lies inside the spec's honest-divergence envelope
  (:mod:`syncline.protocol.tolerance`). A ``c_s`` declaring a device class the spec's
  verification policy does not allow is guilty: the declaration is in the checkpoint's header,
  bound by the committed root. Segment 0 also checks that ``c_0`` holds the round's start weights.
* ``s == S`` (derivation): fetch ``c_S`` and check that the committed payload hash and chunk root
  are those of the payload derived from ``c_S`` and the round's start state.

Guilty only on evidence in hand: the data bound on chain (a manifest that opens the committed
``checkpointRoot``, checkpoints whose bytes hash to the committed hashes) was obtained and
re-execution (or decoding, or derivation) disagrees with it. Everything else is :class:`Undecided`:
a checkpoint or manifest that cannot be fetched (connection refused, timeout, 404), bytes that do
not match their committed hash, manifests (found through untrusted aliases) that do not open the
committed root. The referee's or challenger's own fetch failure is never an accusation nor a
guilty vote: a challenger audits again later, a referee retries until the claim's deadline and
abstains. (A trainer that withholds its checkpoints is therefore never convicted by re-execution:
past the availability deadline the auditor claims the submission on chain instead, and only the
trainer's silence on that claim convicts, :mod:`syncline.court.withheld`.)

A large model's referee (``state_on_disk``: ``files`` given to :func:`load_case`, see
:mod:`syncline.court.files`) holds neither the start state nor a checkpoint in memory: the start
state is a :class:`~syncline.run.state_file.StateFile`, each checkpoint is streamed into a file
(hash-checked on the way) and read range by range (:class:`~syncline.protocol.checkpoints.CheckpointFile`,
the same checks and reasons as the bytes), a training segment is replayed from it parameter by
parameter into a file that is hashed as it is written, and the derivation segment's payload is
derived and encoded range by range (:func:`~syncline.trainer.segments.derive_payload_file`). The
same verdicts as in memory; only a replay that misses the committed hash (another device class or
instruction set: the tolerant comparison) reads the three checkpoints into memory.

:func:`check_segment` and :func:`find_faulty` take explicit inputs (no chain, no blob store);
:func:`referee_segment` and :func:`find_faulty_segment` read them from a :class:`TaskContext`.
What a cheater can hide inside the tolerance is measured by ``scripts/bench/referee_tolerance.py``
(``docs/benchmarks.md``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from syncline.blobstore import BlobStore, find_verified
from syncline.blobstore.store import HashingSink
from syncline.chain.calls import ZERO_ADDRESS
from syncline.chain.market import SubmissionView
from syncline.confidential.keystore import EnclaveKey
from syncline.errors import SynclineError, candidate_failure
from syncline.modality.base import ModalityAdapter
from syncline.observability import get_logger
from syncline.privacy.accounting import PrivacyPlan
from syncline.privacy.dpsgd import DpSgd
from syncline.privacy.noise import Revealed
from syncline.privacy.opening import opening_alias, parse_opening
from syncline.privacy.sealed import MAX_SEALED_OPENING_BYTES, Binding, unseal_opening
from syncline.protocol.checkpoints import (
    MAX_HEADER_BYTES,
    MAX_MANIFEST_BYTES,
    MAX_RNG_BYTES,
    Checkpoint,
    CheckpointError,
    CheckpointFile,
    CheckpointLike,
    CheckpointManifest,
    checkpoint_hash,
    manifest_alias,
    manifest_root_alias,
    segment_bounds,
    segment_count,
)
from syncline.protocol.hashing import keccak
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.seeds import round_seed
from syncline.protocol.spec import DEFAULT_VERIFICATION, VerificationPolicy
from syncline.protocol.state import TrainingState
from syncline.protocol.tolerance import compare
from syncline.run.context import StateUnavailable, TaskContext, fetch_file_by_digest
from syncline.run.state_file import StateFile
from syncline.trainer.segments import derive_payload, derive_payload_file, holds_start_state, replay_segment

if TYPE_CHECKING:
    from syncline.court.files import CourtFiles

log = get_logger("syncline.referee")
_C = TypeVar("_C", Checkpoint, CheckpointFile)
ZERO32 = "0x" + "00" * 32
PRIVATE_UNREVEALED = "private segment:"
"""Reason prefix of the :class:`Undecided` outcome of a DP task's training segment replayed
without the trainer's noise opening (docs/privacy.md): not a fetch failure that a later audit
could cure, so auditors do not retry it and the committee's draw does not escalate it."""


class RefereeError(SynclineError):
    """The referee cannot judge (no such submission, segment out of range, start state unknown)."""


@dataclass(frozen=True)
class RefereeDevice:
    """Where and how a referee re-executes segments: its device class is ``device-dtype``."""

    device: str = "cpu"
    dtype: str = "fp32"
    deterministic: bool = True

    @property
    def device_class(self) -> str:
        return f"{self.device}-{self.dtype}"

    @property
    def kernels(self) -> str:
        """The kernels this referee's replays run: on CPU the instruction set ATen dispatches to
        (``AVX512``, ``AVX2``, ``DEFAULT`` = scalar; ``ATEN_CPU_CAPABILITY`` lowers it) and the
        torch version; logged with every tolerant comparison and named in its verdict."""
        return kernel_description(self.device)

    def replays_exactly(self, ckpt: CheckpointLike) -> bool:
        """Whether a replay here may reproduce ``ckpt``'s trainer bit for bit: same device class
        and both deterministic (CPU always is). Then a hash match is sufficient for innocence, but
        never required: the same class runs other kernels on another instruction set or torch
        build, so a replay that misses the hash is judged against the envelope like any other."""
        return ckpt.device_class == self.device_class and ckpt.deterministic and self.deterministic


def kernel_description(device: str = "cpu") -> str:
    """``cpu AVX512 kernels, torch 2.x``: what decides bit-exactness besides the device class."""
    if device == "cpu":
        return f"{torch.backends.cpu.get_cpu_capability()} kernels, torch {torch.__version__}"
    return f"{device}, torch {torch.__version__}"


CPU_FP32 = RefereeDevice()
"""The default referee: CPU, fp32 (what witnesses run)."""


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
class Undecided:
    """The referee could not judge: data bound on chain is not in hand (yet).

    The outcome of a fetch failure of the *judge's*, never of the accused: a challenger that gets
    it audits again later instead of accusing, a referee retries until the claim's deadline and
    then abstains. ``guilty`` is always False, so code that reads ``.guilty`` never convicts on it.
    """

    segment: int
    segments: int
    reason: str
    guilty: bool = False

    @property
    def derivation(self) -> bool:
        return self.segment == self.segments


Outcome = Verdict | Undecided
"""What refereeing a segment gives: a verdict on evidence in hand, or :class:`Undecided`."""


@dataclass(frozen=True)
class Unanswered:
    """An on-demand task's drawn segment that its trainer has not published by the spot-check
    deadline (:func:`~syncline.protocol.spot_checks.spot_check_deadline`), or an eager task's
    committed checkpoints still unavailable after it (:mod:`syncline.court.withheld`).

    Not a verdict: it warrants a claim on chain (``challengeTraining`` on the segment), which the
    trainer answers by publishing; only silence past that claim's response window convicts.
    ``guilty`` is always False, so code that reads ``.guilty`` never convicts on it.
    """

    segment: int
    segments: int
    reason: str
    guilty: bool = False


@dataclass(frozen=True)
class Claim:
    """What the trainer committed on chain for one (task, round, fragment)."""

    payload_hash: bytes
    chunk_root: bytes
    checkpoint_root: bytes

    @classmethod
    def of(cls, sub: SubmissionView) -> Claim:
        """The claim of a submission as the chain client reads it (``0x``-hex fields)."""
        return cls(*(bytes.fromhex(h[2:]) for h in (sub.payload_hash, sub.chunk_root, sub.checkpoint_root)))


@dataclass(frozen=True)
class ReplayInputs:
    """Everything public a referee needs to redo a trainer's round.

    ``shards`` are the trainer's shards when it committed; ``other_shards`` the other shard sets
    it held while the round was open (its shards were reassigned, e.g. after another trainer's
    eviction, between the round's opening and its commit): it may honestly have trained on any.
    """

    adapter: ModalityAdapter
    build_model: Callable[[], torch.nn.Module]
    layout: ParameterLayout
    shards: Sequence[bytes]
    seed: int
    inner_steps: int
    interval: int
    gradient_bits: int
    start_state: TrainingState | StateFile
    other_shards: Sequence[Sequence[bytes]] = ()
    policy: VerificationPolicy = DEFAULT_VERIFICATION
    referee: RefereeDevice = CPU_FP32
    # A DP task's mechanism, and where the trainer's opening of a disputed segment's noise seed
    # and batch key is found (docs/privacy.md): ``openings(segment, commitment)`` is the opening
    # verified against the noise commitment the checkpoint root binds, or None when none that
    # opens it is published (yet). Without it a private segment cannot be replayed.
    privacy: DpSgd | None = None
    openings: NoiseOpenings | None = None
    # A large model's referee (``state_on_disk``): the checkpoints a check needs are fetched into
    # this directory and read from there range by range (with a :class:`BlobCheckpoints` fetcher),
    # a replay is streamed into a file there and hashed on the way; None: everything in memory.
    scratch: Path | None = None

    @property
    def segments(self) -> int:
        return segment_count(self.inner_steps, self.interval)


NoiseOpenings = Callable[[int, bytes], Revealed | None]
"""``(segment, commitment) -> the verified opening of segment`` or None (none published yet)."""

CheckpointFetcher = Callable[[CheckpointManifest, int], bytes]
"""``(manifest, i) -> bytes of c_i``; raises a SynclineError when the blob cannot be had."""


def max_checkpoint_bytes(layout: ParameterLayout) -> int:
    return 16 + MAX_HEADER_BYTES + 12 * layout.numel + MAX_RNG_BYTES


@dataclass(frozen=True)
class BlobCheckpoints:
    """Fetch checkpoints by digest from ``blobs``, falling back to the manifest's (untrusted) uri:
    as bytes (a :data:`CheckpointFetcher`) or streamed into a file (:meth:`to_file`)."""

    blobs: BlobStore
    layout: ParameterLayout

    def __call__(self, manifest: CheckpointManifest, index: int) -> bytes:
        digest = manifest.digest(index)
        limit = max_checkpoint_bytes(self.layout)
        try:
            return self.blobs.get(digest, max_bytes=limit)
        except SynclineError:
            if not manifest.uris[index]:
                raise
            return self.blobs.fetch(manifest.uris[index], expected_digest=digest, max_bytes=limit)

    def to_file(self, manifest: CheckpointManifest, index: int, dest: Path) -> None:
        """Checkpoint ``index`` streamed into ``dest``, checked against its committed hash on the
        way (a SynclineError when no source has those bytes)."""
        hints = (manifest.uris[index],) if manifest.uris[index] else ()
        fetch_file_by_digest(
            self.blobs, manifest.digest(index), hints, dest, max_bytes=max_checkpoint_bytes(self.layout)
        )


def blob_fetcher(blobs: BlobStore, layout: ParameterLayout) -> BlobCheckpoints:
    """Fetch checkpoints by digest from ``blobs``, falling back to the manifest's (untrusted) uri."""
    return BlobCheckpoints(blobs, layout)


# ---------------------------------------------------------------------- the pure core


def _guilty(segment: int, segments: int, reason: str) -> Verdict:
    return Verdict(segment, segments, True, reason)


def _undecided(segment: int, segments: int, reason: str) -> Undecided:
    return Undecided(segment, segments, reason)


def _one_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]


def _load(
    manifest: CheckpointManifest,
    index: int,
    fetch: CheckpointFetcher,
    layout: ParameterLayout,
    total: int,
    scratch: Path | None = None,
) -> CheckpointLike | Verdict | Undecided:
    """Checkpoint ``index`` verified against its committed hash; Undecided when those bytes are not
    in hand, guilty when the committed bytes themselves are malformed. With a ``scratch``
    directory and a :class:`BlobCheckpoints` fetcher it is streamed into a file there and checked
    range by range (:class:`CheckpointFile`: the same checks and reasons), never held in memory."""
    if scratch is not None and isinstance(fetch, BlobCheckpoints):
        return _load_file(manifest, index, fetch, layout, total, scratch)
    try:
        data = fetch(manifest, index)
    except SynclineError as exc:
        return _undecided(index, total, f"checkpoint {index} is unavailable: {_one_line(exc)}")
    if checkpoint_hash(data) != manifest.hashes[index]:
        return _undecided(index, total, f"the bytes fetched for checkpoint {index} do not match its committed hash")
    return _decoded(
        lambda: Checkpoint.from_bytes(data, layout=layout, max_bytes=max_checkpoint_bytes(layout)), index, total
    )


def _load_file(
    manifest: CheckpointManifest, index: int, fetch: BlobCheckpoints, layout: ParameterLayout, total: int, scratch: Path
) -> CheckpointFile | Verdict | Undecided:
    dest = scratch / f"{manifest.digest(index)}.ckpt"
    if not dest.exists():  # fetched once per check (checkpoint 0 may have been, to pick the start state)
        try:
            fetch.to_file(manifest, index, dest)
        except SynclineError as exc:  # a store's digest check refuses bytes that are not the committed ones
            return _undecided(index, total, f"checkpoint {index} is unavailable: {_one_line(exc)}")
    return _decoded(
        lambda: CheckpointFile.open(dest, layout=layout, max_bytes=max_checkpoint_bytes(layout)), index, total
    )


def _decoded(decode: Callable[[], _C], index: int, total: int) -> _C | Verdict | Undecided:
    try:
        return decode()
    except CheckpointError as exc:
        return _guilty(index, total, f"committed checkpoint {index} is malformed: {_one_line(exc)}")
    except Exception as exc:  # a decoder failure outside its declared error: judged undecided, never a crash
        return _undecided(index, total, f"checkpoint {index} could not be decoded: {candidate_failure(exc)}")


def opened_manifest(
    manifest: bytes | CheckpointManifest, root: bytes, *, inner_steps: int, interval: int
) -> CheckpointManifest:
    """The manifest if its hashes open the committed ``root`` with one hash per checkpoint of the
    task, carrying the task's ``inner_steps`` and ``interval`` (the root binds the hashes, not the
    manifest's own geometry fields); CheckpointError otherwise (then it is not the trainer's)."""
    parsed = manifest if isinstance(manifest, CheckpointManifest) else CheckpointManifest.from_json(manifest)
    parsed.verify_against(root)
    expected = segment_count(inner_steps, interval) + 1
    if len(parsed.hashes) != expected:
        raise CheckpointError(f"manifest opens the root with {len(parsed.hashes)} hashes, the task has {expected}")
    if (parsed.inner_steps, parsed.interval) == (inner_steps, interval):
        return parsed
    return CheckpointManifest(
        interval=interval, inner_steps=inner_steps, hashes=parsed.hashes, uris=parsed.uris, noise=parsed.noise
    )


def parse_manifest(
    manifest: bytes | CheckpointManifest | None, claim: Claim, inputs: ReplayInputs
) -> CheckpointManifest:
    """The manifest, checked against the task and the committed root (CheckpointError otherwise:
    the referee then cannot judge, it does not convict)."""
    if manifest is None:
        raise CheckpointError("no checkpoint manifest that opens the committed root was found")
    return opened_manifest(manifest, claim.checkpoint_root, inner_steps=inputs.inner_steps, interval=inputs.interval)


def check_segment(
    segment: int,
    claim: Claim,
    manifest: bytes | CheckpointManifest | None,
    fetch: CheckpointFetcher,
    inputs: ReplayInputs,
) -> Outcome:
    """Referee segment ``segment`` (``0 .. S``; ``S`` is the derivation segment) of a submission.

    Raises RefereeError only for a segment out of range; everything the trainer is answerable
    for ends in a verdict, everything the referee could not obtain in :class:`Undecided`.
    """
    total = inputs.segments
    if isinstance(segment, bool) or not isinstance(segment, int) or not 0 <= segment <= total:
        raise RefereeError(f"segment {segment!r} out of range 0..{total} ({total} is the derivation segment)")
    try:
        parsed = parse_manifest(manifest, claim, inputs)
    except Exception as exc:  # CheckpointError, or any other failure decoding the trainer's bytes
        return _undecided(segment, total, f"manifest: {candidate_failure(exc)}")
    if segment == total:
        return _check_derivation(parsed, claim, fetch, inputs)
    return _check_training(segment, parsed, fetch, inputs)


def _in_memory(ckpt: CheckpointLike, layout: ParameterLayout) -> Checkpoint:
    return ckpt if isinstance(ckpt, Checkpoint) else ckpt.to_checkpoint(layout)


def _check_derivation(
    manifest: CheckpointManifest, claim: Claim, fetch: CheckpointFetcher, inputs: ReplayInputs
) -> Outcome:
    total = inputs.segments
    last = _load(manifest, total, fetch, inputs.layout, total, inputs.scratch)
    if not isinstance(last, Checkpoint | CheckpointFile):
        return last
    if last.step != inputs.inner_steps:
        return _guilty(total, total, f"checkpoint {total} claims step {last.step}, the round has {inputs.inner_steps}")
    start = inputs.start_state
    try:
        if isinstance(last, CheckpointFile) and isinstance(start, StateFile) and inputs.scratch is not None:
            derived = inputs.scratch / f"derived-{total}.bin"  # the payload, written range by range
            try:
                payload_hash, chunk_root = derive_payload_file(start, last, inputs.gradient_bits, derived)
            finally:
                derived.unlink(missing_ok=True)
        else:
            in_memory = start.to_state() if isinstance(start, StateFile) else start
            payload, chunk_root = derive_payload(in_memory, _in_memory(last, inputs.layout), inputs.gradient_bits)
            payload_hash = keccak(payload)
    except CheckpointError as exc:
        return _guilty(total, total, _one_line(exc))
    if payload_hash != claim.payload_hash:
        return _guilty(total, total, "the committed payload is not the one derived from the last checkpoint")
    if chunk_root != claim.chunk_root:
        return _guilty(total, total, "the committed chunk root is not the derived payload's")
    return Verdict(total, total, False, "the payload is derived from the last checkpoint")


def _replay(
    segment: int, ckpt: CheckpointLike, shards: Sequence[bytes], seed: int, noise: Revealed | None, inputs: ReplayInputs
) -> tuple[bytes, Callable[[], Checkpoint]]:
    """Replay ``segment`` from ``ckpt``: ``(hash of the checkpoint it ends in, that checkpoint)``,
    the checkpoint built only when asked (a tolerant comparison). A checkpoint in a file is
    replayed into a file (streamed and hashed on the way), else in memory."""
    exact = inputs.referee.replays_exactly(ckpt)
    kwargs: dict[str, Any] = {
        "seed": seed,
        "segment": segment,
        "inner_steps": inputs.inner_steps,
        "interval": inputs.interval,
        "device": None if exact else inputs.referee.device,
        "dtype": None if exact else inputs.referee.dtype,
        "privacy": inputs.privacy,
        "noise": None if noise is None else noise.segment,
    }
    model = inputs.build_model()
    if isinstance(ckpt, CheckpointFile) and inputs.scratch is not None:
        dest = inputs.scratch / f"replay-{segment + 1}.ckpt"
        with dest.open("wb") as fh:
            sink = HashingSink(fh)
            replay_segment(inputs.adapter, model, inputs.layout, ckpt, shards, out=sink.write, **kwargs)
        return bytes.fromhex(sink.digest()[2:]), lambda: CheckpointFile.open(dest).to_checkpoint()
    replayed = replay_segment(inputs.adapter, model, inputs.layout, ckpt, shards, **kwargs)
    return checkpoint_hash(replayed), lambda: Checkpoint.from_bytes(replayed)


def _check_training(
    segment: int, manifest: CheckpointManifest, fetch: CheckpointFetcher, inputs: ReplayInputs
) -> Outcome:
    total = inputs.segments
    start, stop = segment_bounds(segment, inputs.inner_steps, inputs.interval)
    ckpt = _load(manifest, segment, fetch, inputs.layout, total, inputs.scratch)
    if not isinstance(ckpt, Checkpoint | CheckpointFile):
        return dataclasses.replace(ckpt, segment=segment)
    if ckpt.step != start:
        return _guilty(segment, total, f"checkpoint {segment} claims step {ckpt.step}, expected {start}")
    if segment == 0 and not holds_start_state(ckpt, inputs.start_state):
        return _guilty(segment, total, "checkpoint 0 does not hold the round's start weights")
    if ckpt.device_class not in inputs.policy.device_classes:
        return _guilty(
            segment,
            total,
            f"checkpoint {segment} declares device class {ckpt.device_class}, "
            f"the task allows {', '.join(inputs.policy.device_classes)}",
        )
    seed = inputs.seed
    noise: Revealed | None = None
    if inputs.privacy is not None:
        if manifest.noise is None:  # the trainer's own root: a DP task's must bind its noise (§12.10)
            return _guilty(segment, total, "the checkpoint root of a DP task binds no noise commitment")
        noise = None if inputs.openings is None else inputs.openings(segment, manifest.noise)
        if noise is None or noise.segment.segment != segment:
            return _undecided(segment, total, f"{PRIVATE_UNREVEALED} the noise seed of {segment} is not revealed")
        seed = noise.batch_seed
    # Same class and deterministic: replay in the trainer's own precision, and a bit-exact match
    # is sufficient for innocence. It is never necessary: the same class on another machine runs
    # other kernels (ATen dispatches on the CPU's instruction set: AVX-512, AVX2 or scalar; other
    # torch or BLAS builds), so a replay that misses the hash falls back to the envelope, exactly
    # like a replay of another device class. (That comparison holds the checkpoints in memory.)
    exact = inputs.referee.replays_exactly(ckpt)
    claimed: Checkpoint | None = None
    closest = ""
    shard_sets = (inputs.shards, *inputs.other_shards)
    for shard_set, shards in enumerate(shard_sets):
        try:
            replayed_hash, replayed = _replay(segment, ckpt, shards, seed, noise, inputs)
        except CheckpointError as exc:  # e.g. a generator state torch refuses
            return _guilty(segment, total, f"checkpoint {segment} cannot be replayed: {_one_line(exc)}")
        if exact and replayed_hash == manifest.hashes[segment + 1]:
            return Verdict(segment, total, False, f"steps {start}..{stop - 1} re-run bit-exactly")
        if claimed is None:  # fetched only when the hash alone does not decide
            loaded = _load(manifest, segment + 1, fetch, inputs.layout, total, inputs.scratch)
            if not isinstance(loaded, Checkpoint | CheckpointFile):
                return dataclasses.replace(loaded, segment=segment)
            claimed = _in_memory(loaded, inputs.layout)
        verdict = compare(_in_memory(ckpt, inputs.layout), claimed, replayed(), inputs.layout, inputs.policy.tolerance)
        log.info(
            "referee.tolerant_comparison",
            segment=segment,
            trainer_class=ckpt.device_class,
            referee_class=inputs.referee.device_class,
            referee_kernels=inputs.referee.kernels,
            # the same class whose bit-exact replay missed (another instruction set or build), or
            # another class (no bit-exact replay is attempted)
            not_bit_exact=exact,
            within=verdict.within,
            # with several candidate shard sets (a reassignment while the round was open) only
            # one is the trainer's: the others are expected to fall outside the envelope
            shard_set=shard_set,
            shard_sets=len(shard_sets),
            **verdict.distance.to_mapping(),
        )
        if verdict.within:
            how = "not bit-exactly, " if exact else ""
            return Verdict(
                segment,
                total,
                False,
                f"steps {start}..{stop - 1} re-run on {inputs.referee.device_class} ({inputs.referee.kernels}) "
                f"against the trainer's {ckpt.device_class}: {how}{verdict.reason}",
            )
        closest = closest or f": {verdict.reason}"
    return _guilty(
        segment,
        total,
        f"re-running steps {start}..{stop - 1} from checkpoint {segment} does not give checkpoint {segment + 1}"
        + closest,
    )


def find_faulty(
    claim: Claim, manifest: bytes | CheckpointManifest | None, fetch: CheckpointFetcher, inputs: ReplayInputs
) -> Outcome | None:
    """What a challenger runs: the derivation segment first (cheap), then training segments
    ``0 .. S-1`` in order; the first guilty verdict; else the first :class:`Undecided` (some
    segment could not be judged: audit again later); None when every segment passes."""
    total = inputs.segments
    undecided: Undecided | None = None
    for segment in (total, *range(total)):
        outcome = check_segment(segment, claim, manifest, fetch, inputs)
        if isinstance(outcome, Undecided):
            undecided = undecided or outcome
            if outcome.reason.startswith("manifest:"):
                break  # no segment can be judged without it
        elif outcome.guilty:
            return outcome
    return undecided


# ---------------------------------------------------------------------- reading a submission from the chain


@dataclass(frozen=True)
class RefereeCase:
    """One submission with everything needed to referee it."""

    claim: Claim
    manifest: CheckpointManifest | None
    fetch: CheckpointFetcher
    inputs: ReplayInputs


def _round_start_roots(ctx: TaskContext, round_: int) -> list[str]:
    """The state roots round ``round_`` may legitimately have trained from, most likely first.

    Normally one root: the root round ``round_ - 1`` closed with (the initial root for round 0),
    which the contract records as the round's ``prevStateRoot`` when it finalizes. A proven fault
    that rolls the state back *while* the round is open changes the task's root under the
    trainers' feet: trainers that started before the rollback trained from the root round
    ``round_ - 1`` recorded, the witnesses finalize on the restored one. Both are honest.
    """
    roots: list[str] = []
    prev = ctx.market.round(ctx.task_id, round_).prev_state_root.lower()
    if prev != ZERO32:
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
    ctx: TaskContext, round_: int, manifest: bytes | CheckpointManifest | None, fetch: CheckpointFetcher
) -> tuple[TrainingState, bytes | None]:
    """The start state whose weights checkpoint 0 holds, among the legitimate ones; the first
    legitimate one when none matches (segment 0 then reports the mismatch). Also returns the bytes
    of checkpoint 0 when telling several start states apart needed them (None otherwise)."""
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
    if len(states) == 1 or not isinstance(manifest, CheckpointManifest):
        return states[0], None
    try:
        data = fetch(manifest, 0)
        first = Checkpoint.from_bytes(data, layout=ctx.layout, max_bytes=max_checkpoint_bytes(ctx.layout))
    except Exception as exc:  # a bad checkpoint 0: judged from the first legitimate start state
        candidate_failure(exc)
        return states[0], None
    return next((s for s in states if holds_start_state(first, s)), states[0]), data


def _round_start_state_file(
    ctx: TaskContext, round_: int, manifest: CheckpointManifest | None, fetch: CheckpointFetcher, files: CourtFiles
) -> StateFile:
    """:func:`_round_start_state` with the states in files (``files``): checkpoint 0, when it must
    tell several start states apart, is fetched into the checks' directory (where the check then
    finds it)."""
    states: list[StateFile] = []
    missing: StateUnavailable | None = None
    for root in _round_start_roots(ctx, round_):
        try:
            states.append(files.state(ctx, root))
        except StateUnavailable as exc:  # judged on the roots whose state is available
            missing = exc
    if not states:
        assert missing is not None
        raise missing
    if len(states) == 1 or manifest is None:
        return states[0]
    first = _load(manifest, 0, fetch, ctx.layout, manifest.segments, files.checkpoints)
    if not isinstance(first, Checkpoint | CheckpointFile):  # judged from the first legitimate start state
        return states[0]
    return next((s for s in states if holds_start_state(first, s)), states[0])


def _serving_first(fetch: CheckpointFetcher, first: bytes) -> CheckpointFetcher:
    """``fetch``, except that checkpoint 0 comes from bytes already downloaded."""
    return lambda manifest, index: first if index == 0 else fetch(manifest, index)


def _shard_assignments(ctx: TaskContext, round_: int, fragment: int, trainer: str) -> list[list[int]]:
    """The shard sets ``trainer`` may have trained round ``round_`` on, most likely first: the one
    it held when it committed (the last ``ShardsAssigned`` before its ``SubmissionCommitted``), then
    the earlier ones back to the one it held when the round opened (a reassignment while the round
    was open lands under a trainer already training). The current assignment when the logs cannot tell."""
    try:
        commits = ctx.market.get_logs("SubmissionCommitted", taskId=ctx.task_id, round=round_, fragment=fragment)
        opened = ctx.market.get_logs("RoundOpened", taskId=ctx.task_id, round=round_) if commits else []
        assigned = ctx.market.get_logs("ShardsAssigned", taskId=ctx.task_id, trainer=trainer) if commits else []
    except Exception as exc:  # an ABI without these events, or a node that prunes logs
        log.info("referee.shards_from_current_assignment", reason=_one_line(exc))
        commits = opened = assigned = []
    if commits:
        committed_at = _position(commits[-1])
        opened_at = _position(opened[-1]) if opened else (-1, -1)
        before = [e for e in assigned if _position(e) < committed_at]
        at_open = [e for e in before if _position(e) <= opened_at][-1:]
        during = [e for e in before if _position(e) > opened_at]
        masks = dict.fromkeys(int(e["args"]["shardMask"]) for e in reversed(at_open + during))
        if masks:
            return [[i for i in range(256) if mask >> i & 1] for mask in masks]
    return [ctx.market.trainer(ctx.task_id, trainer).shards]


def _position(event: Any) -> tuple[int, int]:
    """Where a log entry lies in the chain's history."""
    return int(event["blockNumber"]), int(event["logIndex"])


def find_manifest(
    blobs: BlobStore, claim: Claim, *, trainer: str, inner_steps: int, interval: int, aliases: Sequence[str]
) -> CheckpointManifest | None:
    """The first candidate under ``aliases`` (the trainer's signed slots first) that opens the
    committed ``checkpointRoot``; None when none does (yet): the referee then cannot judge.

    Aliases are hints: a poisoned candidate fails :func:`opened_manifest` and is skipped.
    """

    def check(data: bytes) -> CheckpointManifest:
        return opened_manifest(data, claim.checkpoint_root, inner_steps=inner_steps, interval=interval)

    try:
        return find_verified(
            blobs, aliases, check, signers=(trainer,), what="checkpoint manifest", max_bytes=MAX_MANIFEST_BYTES
        )
    except SynclineError as exc:
        log.info("referee.manifest_not_found", root="0x" + claim.checkpoint_root.hex(), reason=_one_line(exc))
        return None


def blob_openings(
    blobs: BlobStore,
    *,
    trainer: str,
    task_id: int,
    round_: int,
    fragment: int,
    interval: int,
    segments: int,
    key: EnclaveKey | None,
) -> NoiseOpenings:
    """Find a segment's sealed noise opening in ``trainer``'s signed slot of :func:`opening_alias`
    (other candidates after it): the first that this committee member's dispute ``key`` unseals
    (bound to this task, round, fragment, segment and the commitment the root binds) and that opens
    that commitment; None when none does: not published yet, the store is out, no envelope for
    this key yet, or no key at all. Never evidence against the trainer. The plaintext stays in
    memory."""

    def find(segment: int, commitment: bytes) -> Revealed | None:
        if key is None:
            log.info("referee.noise_opening_not_found", round=round_, segment=segment, reason="no committee key")
            return None
        binding = Binding(task_id, round_, fragment, segment, commitment)

        def check(data: bytes) -> Revealed:
            opening = unseal_opening(data, key.private_key, binding)
            return parse_opening(opening, interval=interval, segments=segments).verify(commitment)

        try:
            return find_verified(
                blobs,
                (opening_alias(task_id, round_, fragment, segment),),
                check,
                signers=(trainer,),
                what="sealed noise opening",
                max_bytes=MAX_SEALED_OPENING_BYTES,
            )
        except SynclineError as exc:
            log.info("referee.noise_opening_not_found", round=round_, segment=segment, reason=_one_line(exc))
            return None

    return find


def manifest_aliases(task_id: int, round_: int, fragment: int, checkpoint_root: bytes) -> tuple[str, str]:
    """Where a submission's checkpoint manifest is looked up: its root alias, then its position alias."""
    return (manifest_root_alias(checkpoint_root), manifest_alias(task_id, round_, fragment))


def submission_manifest(ctx: TaskContext, round_: int, fragment: int, sub: SubmissionView) -> CheckpointManifest | None:
    """The checkpoint manifest that opens ``sub``'s committed root, found under its root alias or its
    position alias in the trainer's signed slot (:func:`find_manifest`); None when none does."""
    claim = Claim.of(sub)
    return find_manifest(
        ctx.blobs,
        claim,
        trainer=sub.trainer,
        inner_steps=ctx.spec.inner_steps,
        interval=ctx.spec.checkpoint_interval_steps,
        aliases=manifest_aliases(ctx.task_id, round_, fragment, claim.checkpoint_root),
    )


def load_case(
    ctx: TaskContext,
    round_: int,
    fragment: int,
    *,
    shards: Sequence[int] | None = None,
    start_state: TrainingState | StateFile | None = None,
    files: CourtFiles | None = None,
) -> RefereeCase:
    """Read a submission's commitments from the chain and its public inputs from the blob store.

    ``shards`` (the trainer's shard indices that round) and ``start_state`` override what is
    read from the chain. With ``files`` (a large model: ``state_on_disk``) the start state is a
    file there and the checkpoints are fetched into it and read range by range; the caller
    clears them after the check (:meth:`CourtFiles.clear_checkpoints`). Raises RefereeError /
    StateUnavailable when the referee cannot judge.
    """
    sub = ctx.market.submission(ctx.task_id, round_, fragment)
    if sub.trainer == ZERO_ADDRESS:
        raise RefereeError(f"task {ctx.task_id} round {round_} fragment {fragment}: no submission")
    claim = Claim.of(sub)
    manifest = submission_manifest(ctx, round_, fragment, sub)
    fetch: CheckpointFetcher = blob_fetcher(ctx.blobs, ctx.layout)
    if start_state is None and files is not None:
        start_state = _round_start_state_file(ctx, round_, manifest, fetch, files)
    elif start_state is None:
        start_state, first = _round_start_state(ctx, round_, manifest, fetch)
        if first is not None:  # checkpoint 0 is already here: do not download it again
            fetch = _serving_first(fetch, first)
    held = [list(shards)] if shards is not None else _shard_assignments(ctx, round_, fragment, sub.trainer)
    inputs = ReplayInputs(
        adapter=ctx.adapter,
        build_model=ctx.build_model,
        layout=ctx.layout,
        shards=[ctx.shard(i) for i in held[0]],
        other_shards=[[ctx.shard(i) for i in indices] for indices in held[1:]],
        seed=round_seed(ctx.task_id, round_, fragment),
        inner_steps=ctx.spec.inner_steps,
        interval=ctx.spec.checkpoint_interval_steps,
        gradient_bits=ctx.spec.gradient_bits,
        start_state=start_state,
        policy=ctx.spec.verification_policy,
        privacy=DpSgd.of(PrivacyPlan.of(ctx.spec)) if ctx.spec.privacy is not None else None,
        openings=blob_openings(
            ctx.blobs,
            trainer=sub.trainer,
            task_id=ctx.task_id,
            round_=round_,
            fragment=fragment,
            interval=ctx.spec.checkpoint_interval_steps,
            segments=ctx.spec.checkpoint_segments,
            key=ctx.enclave,
        )
        if ctx.spec.privacy is not None
        else None,
        scratch=None if files is None else files.checkpoints,
    )
    return RefereeCase(claim, manifest, fetch, inputs)


def referee_segment(
    ctx: TaskContext,
    round_: int,
    fragment: int,
    segment: int,
    *,
    shards: Sequence[int] | None = None,
    start_state: TrainingState | StateFile | None = None,
    files: CourtFiles | None = None,
) -> Outcome:
    """Referee one segment of the submission ``(ctx.task_id, round_, fragment)`` (with ``files``:
    the state and the checkpoints on disk, :func:`load_case`)."""
    try:
        case = load_case(ctx, round_, fragment, shards=shards, start_state=start_state, files=files)
        outcome = check_segment(segment, case.claim, case.manifest, case.fetch, case.inputs)
    finally:
        if files is not None:
            files.clear_checkpoints()
    log.info(
        "referee.verdict" if isinstance(outcome, Verdict) else "referee.undecided",
        task_id=ctx.task_id,
        round=round_,
        fragment=fragment,
        segment=segment,
        guilty=outcome.guilty,
        reason=outcome.reason,
    )
    return outcome


def find_faulty_segment(
    ctx: TaskContext,
    round_: int,
    fragment: int,
    *,
    shards: Sequence[int] | None = None,
    start_state: TrainingState | StateFile | None = None,
    files: CourtFiles | None = None,
) -> Outcome | None:
    """The first guilty segment of a submission (derivation first, then training segments in
    order); :class:`Undecided` when none is guilty but some could not be judged; None when the
    whole round re-executes bit-exactly."""
    try:
        case = load_case(ctx, round_, fragment, shards=shards, start_state=start_state, files=files)
        return find_faulty(case.claim, case.manifest, case.fetch, case.inputs)
    finally:
        if files is not None:
            files.clear_checkpoints()


def training_checker(ctx: TaskContext, round_: int, fragment: int) -> Outcome | None:
    """:func:`find_faulty_segment`: the shape of the challenger's ``TrainingChecker``."""
    return find_faulty_segment(ctx, round_, fragment)
