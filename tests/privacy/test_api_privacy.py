"""``GET /api/runs/{id}/privacy``'s read model: ε per trainer and round from the indexed spec and
commitments (a round a trainer did not commit to spends nothing), ``enabled: false`` otherwise."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, Float, Integer

from syncline.api import queries
from syncline.api.db import Base, Database, RoundRow, SubmissionRow, TaskRow, TrainerRow
from syncline.privacy.accounting import PrivacyPlan
from syncline.protocol.spec import TrainingTaskSpec

from .specs import dp_mapping, dp_spec

A, B = "0x" + "aa" * 20, "0x" + "bb" * 20


def row(model: type[Base], **values: Any) -> Any:
    """A row with every column not given filled with a neutral value of its type."""
    filled: dict[str, Any] = {}
    for column in model.__table__.columns:
        if column.name in values:
            continue
        kind = column.type
        if isinstance(kind, Boolean):
            filled[column.name] = False
        elif isinstance(kind, Integer):
            filled[column.name] = 0
        elif isinstance(kind, Float):
            filled[column.name] = None if column.nullable else 0.0
        elif isinstance(kind, JSON):
            filled[column.name] = None if column.nullable else {}
        else:
            filled[column.name] = None if column.nullable else ("0x" + "00" * 32 if "root" in column.name else "0")
    return model(**filled, **values)


def database(artifact: dict[str, Any] | None) -> Database:
    db = Database("sqlite://")
    with db.transaction() as s:
        s.add(row(TaskRow, task_id=1, spec_artifact=artifact, rounds=3))
        for i, who in enumerate((A, B)):
            s.add(row(TrainerRow, task_id=1, address=who, fragment=i))
        for r in range(3):
            s.add(row(RoundRow, task_id=1, round=r, status="finalized"))
            s.add(row(SubmissionRow, task_id=1, round=r, fragment=0, trainer=A))
        s.add(row(SubmissionRow, task_id=1, round=2, fragment=1, trainer=B))
    return db


def test_the_privacy_route_reports_epsilon_per_trainer_from_its_commitments() -> None:
    artifact = dp_mapping(rounds=3, inner_steps=5)
    with database(artifact).session() as s:
        out = queries.privacy(s, 1)
    plan = PrivacyPlan.of(dp_spec(rounds=3, inner_steps=5))
    assert out.enabled and out.rounds == [0, 1, 2]
    assert out.noise_multiplier == plan.noise_multiplier and out.target_epsilon == 5.0
    assert out.epsilon_per_round[A] == [round(e, 6) for e in plan.epsilon_per_round([True, True, True])]
    assert out.epsilon_per_round[B] == [0.0, 0.0, round(plan.epsilon_after(1), 6)]
    assert out.epsilon_per_round[A][-1] <= 5.0


def test_a_task_without_privacy_or_with_a_bad_section_is_not_private() -> None:
    plain = {k: v for k, v in dp_mapping().items() if k != "privacy"}
    bad = dp_mapping()
    bad["privacy"]["delta"] = 2
    for artifact in (None, plain, bad):
        with database(artifact).session() as s:
            assert queries.privacy(s, 1).enabled is False


def test_the_privacy_route_reports_the_rounds_whose_opening_the_committee_could_read() -> None:
    """``rounds_opened``: a finalized round whose public draw names a training segment of a
    trainer's accepted submission (recomputed from the indexed root and finalizing block), or a
    training claim's round; the derivation segment opens nothing. The receipt route carries it."""
    from syncline.api.db import ChallengeRow, RawEvent
    from syncline.protocol.spot_checks import spot_check_draw

    artifact = {
        **dp_mapping(rounds=3, inner_steps=6),
        "checkpoint_interval": 2,
        "verification": {"checkpoints": "on-demand", "spot_check_rate": 1.0},
    }
    spec = TrainingTaskSpec.from_mapping(artifact).validate()
    segments = spec.checkpoint_segments
    db = Database("sqlite://")
    roots = ["0x" + bytes([0x40 + r]).hex() * 32 for r in range(3)]
    blocks = ["0x" + bytes([0x70 + r]).hex() * 32 for r in range(3)]
    with db.transaction() as s:
        s.add(row(TaskRow, task_id=1, spec_artifact=artifact, rounds=3))
        for i, who in enumerate((A, B)):
            s.add(row(TrainerRow, task_id=1, address=who, fragment=i))
        for r in range(3):
            s.add(row(RoundRow, task_id=1, round=r, status="finalized", state_root=roots[r], accepted_mask="3"))
            s.add(row(SubmissionRow, task_id=1, round=r, fragment=0, trainer=A))
            s.add(row(SubmissionRow, task_id=1, round=r, fragment=1, trainer=B))
            s.add(
                row(
                    RawEvent,
                    id=r + 1,
                    block_number=10 + r,
                    log_index=0,
                    block_hash=blocks[r],
                    tx_hash=blocks[r],
                    name="RoundFinalized",
                    task_id=1,
                    round=r,
                    args={},
                )
            )
        s.add(
            row(
                ChallengeRow,
                challenge_id=1,
                task_id=1,
                round=0,
                fragment=1,
                segment=1,
                kind="training_fraud",
                accused=B,
                challenger=A,
            )
        )
        s.add(
            row(
                ChallengeRow,
                challenge_id=2,
                task_id=1,
                round=1,
                fragment=1,
                segment=segments,
                kind="training_fraud",
                accused=B,
                challenger=A,
            )
        )
    expected: dict[str, set[int]] = {}
    for r in range(3):
        for f, who in enumerate((A, B)):
            d = spot_check_draw(
                1, r, f, bytes.fromhex(roots[r][2:]), bytes.fromhex(blocks[r][2:]), ppm=1_000_000, segments=segments
            )
            assert d is not None
            if d < segments:
                expected.setdefault(who, set()).add(r)
    expected.setdefault(B, set()).add(0)  # the claim on a training segment; the derivation claim opens nothing
    with db.session() as s:
        out = queries.privacy(s, 1)
    assert out.rounds_opened == {who: sorted(rs) for who, rs in sorted(expected.items())}
    with db.session() as s:  # eager: claims only
        eager = {**artifact, "verification": {"checkpoints": "eager"}}
        s.get(TaskRow, 1).spec_artifact = eager
        assert queries._rounds_opened(s, 1, eager) == {B: [0]}
