"""Checkpoints on demand: which submissions the witness committee spot-checks, and by when.

In a task whose verification policy says ``checkpoints: on-demand`` a trainer publishes only the
small checkpoint manifest with each commitment and keeps the checkpoints themselves on its own
disk: they are bound by the committed ``checkpointRoot`` (each checkpoint's hash is a leaf), so
withholding them changes nothing it committed. It publishes a segment's checkpoints when asked:

* **by the committee's public draw** (this module): once round ``r`` is finalized with state root
  ``R`` in block ``B``, submission ``(r, f)`` is spot-checked iff the draw below selects it, at
  segment ``s``. Every witness and the trainer compute the same draw from on-chain data, so one
  publication serves the whole committee. The trainer cannot know the draw when it commits: the
  hash of the block that finalizes the round does not exist yet (``R`` alone would not do: a late
  committer sees the earlier payloads and could try variants of its own until ``R`` passes it over);
* **by a claim on chain** (``challengeTraining``, bonded, by anyone), which the accused answers
  with ``answerTraining`` within ``challengeWindow / 2`` after publishing the segment.

A drawn segment not published by :func:`spot_check_deadline` is escalated by the witnesses to a
claim on chain; from then on only the on-chain answer counts. Missing the off-chain deadline is
never a fault by itself: only silence past the on-chain response window convicts.

The draw (normative, ``docs/architecture.md``)::

    h = keccak256(b"syncline-spot-check-v1" ‖ uint256(task_id) ‖ uint256(round) ‖ uint256(fragment) ‖ R ‖ B)
    drawn   iff  uint64(h[0:8]) < floor(ppm · 2^64 / 10^6)   (big-endian; ppm 10^6 draws every submission)
    segment  =   uint64(h[8:16]) mod (S + 1)                 (S is the derivation segment)

``ppm`` is the task's on-chain ``TaskSpec.spotCheckPpm`` (1..10^6); the spec artifact's rate must
be the same (``TrainingTaskSpec.spot_check_ppm``, checked against the chain by every agent). The
draw applies to eager tasks too (their checkpoints are already public: the committee replays the
drawn segment of each drawn submission besides its own checks), so the rate is a floor on the
detection probability in both modes. ``postTask`` refuses a rate that does not deter
(:func:`deterrence_ppm`); the default rate is the least that deters.

:func:`default_spot_check_rate` is the rate at which the expected checkpoint bytes are a budget of
:data:`DEFAULT_SPOT_CHECK_BUDGET` of the payload bytes: a check publishes on average
``(2S + 1) / (S + 1)`` checkpoints of 12 bytes per parameter (two for a training segment, one for
the derivation segment) against a payload of ``gradient_bits / 8`` bytes per parameter
(:func:`checkpoint_bytes_per_payload_byte`).
"""

from __future__ import annotations

import math
from decimal import Decimal

from syncline.protocol.hashing import keccak

MIN_CHALLENGE_BLOCKS = 50
"""``SynclineStorage.MIN_CHALLENGE_BLOCKS``: the challenge window's minimum in blocks (10 minutes of
12-second slots), beside ``MIN_CHALLENGE_WINDOW_S`` in seconds; a response window lasts at least
half of it."""

SPOT_CHECK_DOMAIN = b"syncline-spot-check-v1"
CHECKPOINT_BYTES_PER_PARAM = 12
"""fp32 weights and the two AdamW moments."""
DEFAULT_SPOT_CHECK_BUDGET = 0.08
"""Expected checkpoint bytes per payload byte at the default rate (the manifests take well under 1 %)."""
CHECKPOINT_MODES = ("eager", "on-demand")
PPM_SCALE = 1_000_000
"""``TaskSpec.spotCheckPpm`` is in parts per million (``TaskPosting.SPOT_CHECK_PPM_SCALE``)."""
DETERRENCE_MARGIN = 2
"""``TaskPosting.DETERRENCE_MARGIN``: ``stake · ppm >= 2 · R · 10^6`` (docs/protocol.md §14)."""


def checkpoints_for_segment(segment: int, segments: int) -> tuple[int, ...]:
    """Indices of the checkpoints re-executing ``segment`` needs (``segments`` = S): a training
    segment ``s < S`` its two ends ``c_s`` and ``c_{s+1}``, the derivation segment ``S`` only ``c_S``."""
    if isinstance(segment, bool) or not isinstance(segment, int) or not 0 <= segment <= segments:
        raise ValueError(f"segment {segment!r} is outside 0..{segments}")
    return (segment,) if segment == segments else (segment, segment + 1)


def mean_checkpoints_per_check(segments: int) -> float:
    """Checkpoints a drawn check publishes on average (the segment is uniform over ``0..S``)."""
    return (2 * segments + 1) / (segments + 1)


def default_spot_check_rate(gradient_bits: int, segments: int, *, budget: float = DEFAULT_SPOT_CHECK_BUDGET) -> float:
    """The rate at which a trainer's expected checkpoint bytes are ``budget`` times its payload bytes."""
    per_check = CHECKPOINT_BYTES_PER_PARAM * mean_checkpoints_per_check(segments)
    return min(1.0, budget * (gradient_bits / 8) / per_check)


def checkpoint_bytes_per_payload_byte(rate: float, gradient_bits: int, segments: int) -> float:
    """Expected checkpoint bytes a trainer publishes per payload byte at spot-check ``rate``."""
    return rate * CHECKPOINT_BYTES_PER_PARAM * mean_checkpoints_per_check(segments) / (gradient_bits / 8)


def rate_ppm(rate: float) -> int:
    """``rate`` in parts per million, rounded up (the decimal value written, not its binary float:
    0.34 is 340000)."""
    if isinstance(rate, bool) or not (math.isfinite(rate) and 0 < rate <= 1):
        raise ValueError(f"spot-check rate must be within (0, 1], got {rate!r}")
    return math.ceil(Decimal(repr(float(rate))) * PPM_SCALE)


def reward_per_submission(reward_pool_wei: int, rounds: int, min_trainers: int) -> int:
    """``R = ceil(rewardPool / (rounds · minTrainers))``: a submission's share of the pool when the
    fewest trainers the run may have are paid for every round (``TaskPosting._requireDeterrence``)."""
    submissions = max(1, rounds * min_trainers)
    return -(-reward_pool_wei // submissions)


def deterrence_ppm(trainer_stake_wei: int, reward_pool_wei: int, rounds: int, min_trainers: int) -> int:
    """The least ``spotCheckPpm`` with ``stake · ppm >= DETERRENCE_MARGIN · R · 10^6`` (above
    :data:`PPM_SCALE` when no rate deters: the stake is below ``2R``)."""
    reward = reward_per_submission(reward_pool_wei, rounds, min_trainers)
    need = DETERRENCE_MARGIN * reward * PPM_SCALE
    return max(1, -(-need // max(1, trainer_stake_wei)))


def spot_check_threshold(ppm: int) -> int:
    """``floor(ppm · 2^64 / 10^6)``: a submission is drawn when its 64-bit draw is below it."""
    if isinstance(ppm, bool) or not isinstance(ppm, int) or not 0 < ppm <= PPM_SCALE:
        raise ValueError(f"spot-check ppm must be within 1..{PPM_SCALE}, got {ppm!r}")
    return (ppm << 64) // PPM_SCALE


def draw_hash(domain: bytes, task_id: int, round_: int, fragment: int, state_root: bytes, block_hash: bytes) -> bytes:
    """``keccak256(domain ‖ uint256 task ‖ uint256 round ‖ uint256 fragment ‖ R ‖ B)``: the public
    randomness of a submission's draws (the spot-check draw, the withheld-claim segment), ``R`` the
    round's finalized state root and ``B`` the hash of the block that finalized it (32 bytes each)."""
    if len(state_root) != 32 or len(block_hash) != 32:
        raise ValueError("state_root and block_hash must be 32 bytes each")
    return keccak(
        domain
        + task_id.to_bytes(32, "big")
        + round_.to_bytes(32, "big")
        + fragment.to_bytes(32, "big")
        + state_root
        + block_hash
    )


def spot_check_draw(
    task_id: int,
    round_: int,
    fragment: int,
    state_root: bytes,
    block_hash: bytes,
    *,
    ppm: int,
    segments: int,
) -> int | None:
    """The segment (``0..segments``) the committee checks of submission ``(round_, fragment)``, or
    None when the draw passes it over. ``state_root`` is the 32-byte root the round finalized with,
    ``block_hash`` the hash of the block whose ``RoundFinalized`` event finalized it, ``ppm`` the
    task's on-chain ``spotCheckPpm``."""
    h = draw_hash(SPOT_CHECK_DOMAIN, task_id, round_, fragment, state_root, block_hash)
    if int.from_bytes(h[:8], "big") >= spot_check_threshold(ppm):
        return None
    return int.from_bytes(h[8:16], "big") % (segments + 1)


def spot_check_deadline(closed_at: int, challenge_window_s: int) -> int:
    """When an undelivered drawn segment is escalated on chain: half the challenge window after the
    round closed (the other half leaves time for the claim, which must open within the window)."""
    return closed_at + challenge_window_s // 2


def kept_rounds(challenge_window_s: int, round_duration_s: int) -> int:
    """How many rounds back a trainer looks for spot checks to serve: a claim may open up to the
    challenge window after a round closed and is answered within half a window more. A round can
    close early (when its work is in), so what a trainer keeps is decided on the chain's clock
    instead (:func:`claims_over`)."""
    span = challenge_window_s + challenge_window_s // 2
    return -(-span // max(1, round_duration_s)) + 2


def filing_open(closed_at: int, closed_block: int, now: int, block: int, challenge_window_s: int) -> bool:
    """Whether a claim against a round closed at chain time ``closed_at`` in block ``closed_block``
    can still be filed by a transaction at time ``now`` in block ``block`` (the contract's
    ``_requireFileable``): the filing window lasts until its time AND its blocks have passed,
    ``challenge_window_s`` seconds and ``MIN_CHALLENGE_BLOCKS`` blocks."""
    return now <= closed_at + challenge_window_s or block <= closed_block + MIN_CHALLENGE_BLOCKS


def claims_over(filing_closed_at: int, filing_closed_block: int, now: int, block: int, challenge_window_s: int) -> bool:
    """Whether no claim can need a round's payload or checkpoints any more at time ``now`` in block
    ``block``, given that its filing window was seen closed (:func:`filing_open` false) at time
    ``filing_closed_at`` in block ``filing_closed_block``: every claim was filed before that, its
    accused answers within half a window (and half ``MIN_CHALLENGE_BLOCKS``), and its referees
    vote until a window after its filing. A round can close early, and a producer can skew
    timestamps, so what a trainer keeps is decided from the chain's time and blocks, never counted
    in rounds."""
    return now > filing_closed_at + challenge_window_s and block > filing_closed_block + MIN_CHALLENGE_BLOCKS // 2
