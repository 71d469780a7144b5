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
    drawn   iff  uint64(h[0:8]) < floor(rate · 2^64)         (big-endian; rate 1 draws every submission)
    segment  =   uint64(h[8:16]) mod (S + 1)                 (S is the derivation segment)

The default rate spends a budget of :data:`DEFAULT_SPOT_CHECK_BUDGET` of the payload bytes on
checkpoints in expectation: a check publishes on average ``(2S + 1) / (S + 1)`` checkpoints of
12 bytes per parameter (two for a training segment, one for the derivation segment) against a
payload of ``gradient_bits / 8`` bytes per parameter.
"""

from __future__ import annotations

import math

from syncline.protocol.hashing import keccak

SPOT_CHECK_DOMAIN = b"syncline-spot-check-v1"
CHECKPOINT_BYTES_PER_PARAM = 12
"""fp32 weights and the two AdamW moments."""
DEFAULT_SPOT_CHECK_BUDGET = 0.08
"""Expected checkpoint bytes per payload byte at the default rate (the manifests take well under 1 %)."""
CHECKPOINT_MODES = ("eager", "on-demand")


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


def spot_check_threshold(rate: float) -> int:
    """``floor(rate · 2^64)``: a submission is drawn when its 64-bit draw is below it."""
    if not (math.isfinite(rate) and 0 < rate <= 1):
        raise ValueError(f"spot-check rate must be within (0, 1], got {rate!r}")
    return min(1 << 64, math.floor(rate * 2.0**64))


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
    rate: float,
    segments: int,
) -> int | None:
    """The segment (``0..segments``) the committee checks of submission ``(round_, fragment)``, or
    None when the draw passes it over. ``state_root`` is the 32-byte root the round finalized with,
    ``block_hash`` the hash of the block whose ``RoundFinalized`` event finalized it."""
    h = draw_hash(SPOT_CHECK_DOMAIN, task_id, round_, fragment, state_root, block_hash)
    if int.from_bytes(h[:8], "big") >= spot_check_threshold(rate):
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


def claims_over(closed_at: int, now: int, challenge_window_s: int) -> bool:
    """Whether no claim can need a round's payload or checkpoints any more at chain time ``now``:
    the round closed (``closed_at`` > 0) more than a challenge window and a half ago (a claim may
    open up to the window after the close, and its demand is answered within half a window)."""
    return closed_at > 0 and now >= closed_at + challenge_window_s + challenge_window_s // 2
