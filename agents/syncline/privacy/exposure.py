"""Which rounds of each DP trainer the witness committee could see the noise of (docs/privacy.md).

A trainer publishes a round's noise opening, sealed to the committee, when the committee's public
spot-check draw names a training segment of its submission (on-demand tasks) or a training claim
on chain does. Against the committee such a round has no DP protection; against everyone else it
keeps the accounted ε. ``rounds_opened`` is read with ``epsilon_per_round``.

:func:`opened_rounds` is the rule (pure); :func:`rounds_opened` reads its inputs from the chain
(the DP demo's receipt), the sponsor API from its index (``GET /api/runs/{id}/privacy``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from syncline.chain.calls import ZERO_ADDRESS
from syncline.protocol.enums import ChallengeKind
from syncline.run.context import TaskContext

Drawn = Callable[[int, int], int | None]
"""``(round, fragment) -> the segment the committee's draw names`` (None: not drawn, not finalized)."""


def opened_rounds(
    accepted: Iterable[tuple[int, int, str]],
    drawn: Drawn | None,
    claims: Iterable[tuple[int, int, int, str]],
    *,
    segments: int,
) -> dict[str, list[int]]:
    """Trainer address (lowercase) -> the rounds (ascending) of a drawn or claimed training
    segment of its submission. ``accepted``: ``(round, fragment, trainer)`` of every accepted
    submission (what the draw is over; ``drawn`` None in an eager task); ``claims``: ``(round,
    fragment, segment, trainer)`` of every training claim against the task. Segment ``segments``
    is the derivation segment, which needs no opening. Trainers with none are absent."""
    opened: dict[str, set[int]] = {}
    if drawn is not None:
        for round_, fragment, trainer in accepted:
            segment = drawn(round_, fragment)
            if segment is not None and segment < segments:
                opened.setdefault(trainer.lower(), set()).add(round_)
    for round_, _fragment, segment, trainer in claims:
        if segment < segments:
            opened.setdefault(trainer.lower(), set()).add(round_)
    return {who: sorted(rounds) for who, rounds in sorted(opened.items())}


def rounds_opened(ctx: TaskContext) -> dict[str, list[int]]:
    """:func:`opened_rounds` of the task, read from the chain."""
    spec = ctx.spec
    market, task_id = ctx.market, ctx.task_id
    accepted: list[tuple[int, int, str]] = []
    views = {}
    if spec.verification_policy.on_demand:
        for round_ in range(spec.rounds):
            rr = views[round_] = market.round(task_id, round_)
            for fragment in range(rr.accepted_mask.bit_length()):
                if rr.accepted_mask >> fragment & 1:
                    trainer = market.submission(task_id, round_, fragment).trainer
                    if trainer != ZERO_ADDRESS:
                        accepted.append((round_, fragment, trainer))
    claims = []
    for challenge_id in range(1, market.challenge_count() + 1):
        c = market.challenge(challenge_id)
        if c.task_id == task_id and c.kind == ChallengeKind.TRAINING_FRAUD:
            claims.append((c.round, c.fragment, c.segment, market.submission(task_id, c.round, c.fragment).trainer))
    drawn = (lambda r, f: ctx.drawn_segment(r, f, views[r])) if spec.verification_policy.on_demand else None
    return opened_rounds(accepted, drawn, claims, segments=spec.checkpoint_segments)
