"""How much inner-loop re-execution a challenger spends per accepted submission.

In a task whose checkpoints are uploaded eagerly (the default):

- ``all``: the derivation segment, then every training segment (as much compute as the trainer
  spent; what a dedicated challenger runs).
- ``spot`` (the witnesses' default): the derivation segment of every submission (cheap: one
  checkpoint and a quantization) plus, with probability ``rate``, one training segment drawn at
  random. Witnesses draw independently (seeded by their address), so a trainer that fakes any
  segment of any round is caught with high probability over a run at a fraction of the cost.
  Besides, the committee's public draw at the task's on-chain ``spotCheckPpm`` applies here too
  (:func:`syncline.protocol.spot_checks.spot_check_draw`): the drawn segment of each drawn
  submission is always replayed, so the on-chain rate, which ``postTask`` ties to the stake and
  the reward, is a floor on the detection probability in both modes.
- ``off``: no training checks.

In an on-demand task (``verification.checkpoints: on-demand``) only what the committee's public
draw names is ever published, so ``all`` and ``spot`` both check exactly the drawn segment of each
drawn submission (:func:`syncline.protocol.spot_checks.spot_check_draw`); a drawn segment still
unpublished at the spot-check deadline is :class:`~syncline.court.referee.Unanswered` (the
challenger escalates it to a claim on chain); ``off`` checks nothing.

In a DP task (``privacy``) a training segment can be replayed only with its trainer's noise
opening, which the trainer publishes, sealed to the committee witnesses' dispute keys, for the
committee's drawn segment (on demand) or a claimed one alone (docs/privacy.md). On demand, a drawn
opening that this witness cannot read (not published, or no envelope for its key yet) at the
spot-check deadline is :class:`Unanswered`, exactly as a withheld checkpoint (the claim it
escalates to is answered by publishing, re-sealed to the keys registered by then); a challenger
without a committee key leaves DP training segments alone (logged); in an eager DP task the
challenger's own choice of a training segment has no opening and is left alone.

In an eager task a check left :class:`Undecided` for want of checkpoints is retried; once the
committed checkpoints stayed unavailable past the availability deadline, the submission is claimed
once on chain (:mod:`syncline.court.withheld`), as an unpublished drawn segment of an on-demand task.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from syncline.court.audit import TrainingCheck, TrainingChecker
from syncline.court.files import CourtFiles
from syncline.court.referee import (
    PRIVATE_UNREVEALED,
    Outcome,
    RefereeCase,
    Unanswered,
    Undecided,
    check_segment,
    find_faulty,
    load_case,
)
from syncline.court.withheld import WithheldWatch
from syncline.observability import get_logger
from syncline.protocol.spot_checks import spot_check_deadline
from syncline.run.context import TaskContext
from syncline.run.loop import pending_time

log = get_logger("syncline.court")

MODES = ("all", "spot", "off")

CheckRecorder = Callable[[int, int, str, Outcome, float], None]
"""Called with ``(round, fragment, why, outcome, seconds)`` for every segment a challenger's
training check judged (``why``: ``drawn``, the committee's public draw; ``own``, this challenger's
own draw; ``all``, every segment): what the witnesses record in ``training-checks.jsonl``."""


def _judged(
    case: RefereeCase,
    segment: int,
    round_: int,
    fragment: int,
    why: str,
    record: CheckRecorder | None,
) -> Outcome:
    """``check_segment`` of one segment of ``case``, timed and recorded."""
    began = time.perf_counter()
    outcome = check_segment(segment, case.claim, case.manifest, case.fetch, case.inputs)
    if record is not None:
        record(round_, fragment, why, outcome, time.perf_counter() - began)
    return outcome


def _case(ctx: TaskContext, round_: int, fragment: int, files: CourtFiles | None) -> RefereeCase:
    return load_case(ctx, round_, fragment, files=files)


def committee_spot_check(
    ctx: TaskContext,
    round_: int,
    fragment: int,
    *,
    files: CourtFiles | None = None,
    record: CheckRecorder | None = None,
) -> TrainingCheck:
    """The committee's check of one submission in an on-demand task: None when the draw passes it
    over or its drawn segment re-executes; the verdict, :class:`Undecided` (not published yet,
    before the deadline), or :class:`Unanswered` (still not published after it). With ``files``
    the state and the checkpoints are on disk (:func:`~syncline.court.referee.load_case`)."""
    spec = ctx.spec
    rr = ctx.market.round(ctx.task_id, round_)
    segment = ctx.drawn_segment(round_, fragment, rr)
    if segment is None:
        return None
    if spec.privacy is not None and ctx.enclave is None and segment < spec.checkpoint_segments:
        # the drawn segment's noise opening is sealed to the committee's keys (docs/privacy.md):
        # a challenger holding none cannot replay it, and its failure to read is no one's fault
        log.info(
            "challenger.training_check_private",
            round=round_,
            fragment=fragment,
            segment=segment,
            reason="no committee key: the noise opening is sealed to the witnesses",
        )
        return None
    try:
        outcome = _judged(_case(ctx, round_, fragment, files), segment, round_, fragment, "drawn", record)
    finally:
        if files is not None:
            files.clear_checkpoints()
    if not isinstance(outcome, Undecided):
        return outcome if outcome.guilty else None
    if outcome.reason.startswith(PRIVATE_UNREVEALED):
        # a DP task: the trainer owes the drawn segment's noise opening as it owes its checkpoints
        # (docs/privacy.md): unpublished, it is retried and escalated like a withheld checkpoint
        outcome = Undecided(segment, outcome.segments, f"noise opening of drawn segment {segment} not published")
    deadline = spot_check_deadline(rr.closed_at, spec.challenge_window_s)
    if pending_time(ctx.market.w3) <= deadline:
        return outcome
    return Unanswered(
        segment,
        spec.checkpoint_segments,
        f"drawn segment {segment} not published by the spot-check deadline: {outcome.reason}",
    )


def make_training_checker(
    mode: str,
    *,
    seed: int = 0,
    rate: float = 0.5,
    files: CourtFiles | None = None,
    record: CheckRecorder | None = None,
) -> TrainingChecker | None:
    """The challenger's training checks in ``mode`` (see the module docstring). ``files``: a large
    model's checks read the state and the checkpoints from files there (``state_on_disk``);
    ``record`` is told every segment judged."""
    if mode not in MODES:
        raise ValueError(f"training check mode {mode!r}: use one of {', '.join(MODES)}")
    if mode == "off":
        return None
    rng = random.Random(seed)

    def eager_spot(ctx: TaskContext, round_: int, fragment: int) -> TrainingCheck:
        case = _case(ctx, round_, fragment, files)
        total = case.inputs.segments
        segments = [(total, "own")]
        drawn = ctx.drawn_segment(round_, fragment, ctx.market.round(ctx.task_id, round_))
        if drawn is not None and drawn != total:
            segments.append((drawn, "drawn"))  # the committee's public draw (the on-chain rate)
        if rng.random() < rate:
            extra = rng.randrange(total)
            if extra not in [s for s, _ in segments]:
                segments.append((extra, "own"))
        undecided: Undecided | None = None
        for segment, why in segments:
            outcome = _judged(case, segment, round_, fragment, why, record)
            if isinstance(outcome, Undecided):
                undecided = undecided or outcome
            elif outcome.guilty:
                return outcome
        return undecided

    def every_segment(ctx: TaskContext, round_: int, fragment: int) -> TrainingCheck:
        case = _case(ctx, round_, fragment, files)
        outcome = find_faulty(case.claim, case.manifest, case.fetch, case.inputs)
        if record is not None and outcome is not None:
            record(round_, fragment, "all", outcome, 0.0)
        return outcome

    eager: TrainingChecker = every_segment if mode == "all" else eager_spot
    watch = WithheldWatch()

    def cleared(check: TrainingChecker) -> TrainingChecker:
        def run(ctx: TaskContext, round_: int, fragment: int) -> TrainingCheck:
            try:
                return check(ctx, round_, fragment)
            finally:
                if files is not None:
                    files.clear_checkpoints()

        return run

    eager = cleared(eager)

    def check(ctx: TaskContext, round_: int, fragment: int) -> TrainingCheck:
        if ctx.spec.verification_policy.on_demand:
            return committee_spot_check(ctx, round_, fragment, files=files, record=record)
        # checkpoints not in hand: audited again, and claimed once withheld past the deadline
        return watch.check(ctx, round_, fragment, eager(ctx, round_, fragment))

    return check
