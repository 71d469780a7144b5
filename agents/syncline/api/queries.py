"""Responses built from the read models (no chain calls)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from syncline.api.db import (
    ChallengeRow,
    RawEvent,
    RoundRow,
    SubmissionRow,
    TaskRow,
    TrainerLossRow,
    TrainerRow,
    VoteRow,
    WitnessRow,
)
from syncline.api.events import METRIC_SCALE, MarketEvent, timeline_entry
from syncline.api.schemas import (
    ChallengeOut,
    Losses,
    Privacy,
    RoundOut,
    RunDetail,
    RunSummary,
    SubmissionOut,
    TimelineEntry,
    TrainerOut,
    TrainerStatus,
    VoteOut,
    WitnessOut,
)
from syncline.api.specs import run_spec
from syncline.protocol.enums import Modality, parse_enum
from syncline.protocol.round_clock import commit_deadline
from syncline.protocol.spec import VALIDATION_METRICS

ZERO32 = "0x" + "00" * 32
SETTLED = ("awaiting_seal", "sealed")


def progress(row: TaskRow) -> float:
    """Closed rounds / rounds (1 once the last round closed)."""
    if row.status in SETTLED:
        return 1.0
    if row.status != "running" or row.rounds <= 0:
        return 0.0
    return min(1.0, row.current_round / row.rounds)


def summary(row: TaskRow) -> RunSummary:
    return RunSummary(
        task_id=row.task_id,
        name=row.name,
        sponsor=row.sponsor,
        status=row.status,
        tier=row.tier,
        rule=row.rule,
        rounds=row.rounds,
        current_round=row.current_round,
        rounds_finalized=row.rounds_finalized,
        rounds_carried=row.rounds_carried,
        rounds_invalidated=row.rounds_invalidated,
        trainers_enrolled=row.trainers_enrolled,
        min_trainers=row.min_trainers,
        max_trainers=row.max_trainers,
        reward_pool_wei=row.reward_pool_wei,
        escrow_wei=row.escrow_wei,
        state_root=row.state_root,
        open_challenges=row.open_challenges,
        posted_at=row.posted_at,
        progress=progress(row),
    )


def runs(s: Session) -> list[RunSummary]:
    return [summary(r) for r in s.scalars(select(TaskRow).order_by(TaskRow.task_id.desc()))]


def _event(row: RawEvent) -> MarketEvent:
    return MarketEvent(
        name=row.name,
        block_number=row.block_number,
        block_hash=row.block_hash,
        log_index=row.log_index,
        tx_hash=row.tx_hash,
        timestamp=row.timestamp,
        args=row.args,
    )


def timeline(s: Session, task_id: int) -> list[TimelineEntry]:
    out: list[TimelineEntry] = []
    for row in s.scalars(
        select(RawEvent).where(RawEvent.task_id == task_id).order_by(RawEvent.block_number, RawEvent.log_index)
    ):
        entry = timeline_entry(_event(row))
        if entry is None:
            continue
        kind, round_, text = entry
        out.append(
            TimelineEntry(
                kind=kind, block=row.block_number, timestamp=row.timestamp, round=round_, text=text, tx=row.tx_hash
            )
        )
    return out


def detail(s: Session, row: TaskRow) -> RunDetail:
    spec = run_spec(row.onchain_spec, row.spec_artifact)
    spec["spec_uri"] = row.spec_uri
    spec["spec_hash"] = row.spec_hash
    if row.spec_error and row.spec_artifact is None:
        spec["artifact_error"] = row.spec_error
    return RunDetail(summary=summary(row), spec=spec, state=row.state, timeline=timeline(s, row.task_id))


def _vote(v: VoteRow, finalized_result: str | None) -> VoteOut:
    metric = int(v.metric)
    return VoteOut(
        witness=v.witness,
        result=v.result,
        state_root=v.state_root,
        metric=metric / METRIC_SCALE if metric > 0 else None,
        agrees=finalized_result is not None and v.result == finalized_result,
        tx=v.tx,
    )


def rounds(s: Session, task_id: int, now: int | None = None) -> list[RoundOut]:
    """The task's rounds; with ``now`` (the chain's time) each ``deadline`` is the commit deadline
    the contract applies then: extended once when nobody committed on time (round_clock.py)."""
    task = s.get(TaskRow, task_id)
    duration = int(task.onchain_spec["round_duration_s"]) if task is not None else 0
    subs: dict[int, list[SubmissionRow]] = defaultdict(list)
    for sub in s.scalars(
        select(SubmissionRow).where(SubmissionRow.task_id == task_id).order_by(SubmissionRow.fragment)
    ):
        subs[sub.round].append(sub)
    votes: dict[int, list[VoteRow]] = defaultdict(list)
    for vote in s.scalars(select(VoteRow).where(VoteRow.task_id == task_id).order_by(VoteRow.block_number)):
        votes[vote.round].append(vote)
    losses: dict[int, dict[str, float]] = defaultdict(dict)
    for loss in s.scalars(
        select(TrainerLossRow).where(TrainerLossRow.task_id == task_id, TrainerLossRow.status == "ok")
    ):
        if loss.loss is not None:
            losses[loss.round][str(loss.fragment)] = loss.loss
    challenges: dict[int, list[int]] = defaultdict(list)
    for c in s.scalars(select(ChallengeRow).where(ChallengeRow.task_id == task_id).order_by(ChallengeRow.challenge_id)):
        challenges[c.round].append(c.challenge_id)
    out: list[RoundOut] = []
    for r in s.scalars(select(RoundRow).where(RoundRow.task_id == task_id).order_by(RoundRow.round)):
        has_result = r.status in ("finalized", "invalidated") and r.result != ZERO32
        result = r.result if has_result else None
        accepted = int(r.accepted_mask)
        round_votes = [_vote(v, result) for v in votes[r.round]]
        dissenters = {v.witness for v in votes[r.round] if v.dissent}
        dissent = [v for v in round_votes if (not v.agrees if has_result else v.witness in dissenters)]
        out.append(
            RoundOut(
                round=r.round,
                status=r.status,
                opened_at=r.opened_at,
                deadline=(
                    commit_deadline(r.deadline, duration, [x.committed_at for x in subs[r.round]], now)
                    if now is not None and r.deadline is not None
                    else r.deadline
                ),
                closed_at=r.closed_at,
                state_root=r.state_root,
                prev_state_root=r.prev_state_root,
                aggregate_root=r.aggregate_root,
                vote_count=r.vote_count,
                committed_mask=r.committed_mask,
                accepted_mask=r.accepted_mask,
                revoked_mask=r.revoked_mask,
                submissions=[
                    SubmissionOut(
                        fragment=x.fragment,
                        trainer=x.trainer,
                        committed_at=x.committed_at,
                        payload_hash=x.payload_hash,
                        uri=x.uri,
                        accepted=bool(accepted >> x.fragment & 1),
                    )
                    for x in subs[r.round]
                ],
                votes=round_votes,
                dissent=dissent,
                carried_forward=r.status == "carried_forward",
                validation_loss=r.validation_loss,
                trainer_losses=losses[r.round],
                challenges=challenges[r.round],
            )
        )
    return out


def _reason(text: str) -> str:
    """A ``Credited.reason`` (bytes32) as the indexer stores it."""
    return "0x" + text.encode().ljust(32, b"\0").hex()


# A trainer's stake coming back (seal or cancel); a bond coming back (a witness's at seal or
# cancel, or a challenger's when its challenge closes).
REASON_STAKE = _reason("stake-refund")
REASON_BOND = _reason("bond-refund")


def trainer_status(task_status: str, enrolled: bool, evicted: bool) -> TrainerStatus:
    """``evicted``; once the run settled, ``sealed`` (stake and reward credited) or ``refunded``
    (cancelled: stake credited back); else ``active`` while enrolled, ``left`` otherwise."""
    if evicted:
        return "evicted"
    if task_status == "sealed":
        return "sealed"
    if task_status == "cancelled":
        return "refunded"
    return "active" if enrolled else "left"


def _credited(s: Session, task_id: int, reason: str, txs: set[str] | None = None) -> dict[str, int]:
    """Per account, what ``task_id``'s ``Credited`` events with ``reason`` (in ``txs`` if given) credited."""
    out: dict[str, int] = defaultdict(int)
    for ev in s.scalars(select(RawEvent).where(RawEvent.name == "Credited", RawEvent.task_id == task_id)):
        if str(ev.args["reason"]).lower() == reason and (txs is None or ev.tx_hash in txs):
            out[str(ev.args["account"]).lower()] += int(ev.args["amount"])
    return out


def stakes_returned(s: Session, task_id: int) -> dict[str, int]:
    """Stake credited back to each trainer of ``task_id`` (seal or cancel)."""
    return _credited(s, task_id, REASON_STAKE)


def bonds_returned(s: Session, task_id: int) -> dict[str, int]:
    """Bond credited back to each witness of ``task_id``: the bond refunds of the transaction that
    sealed or cancelled it (a challenger's bond refund never happens in that transaction: a task
    seals only with no challenge open)."""
    settled = set(
        s.scalars(
            select(RawEvent.tx_hash).where(
                RawEvent.task_id == task_id, RawEvent.name.in_(("TaskSealed", "TaskCancelled"))
            )
        )
    )
    return _credited(s, task_id, REASON_BOND, settled) if settled else {}


def trainers(s: Session, task_id: int) -> list[TrainerOut]:
    out: list[TrainerOut] = []
    task = s.get(TaskRow, task_id)
    task_status = task.status if task else ""
    returned = stakes_returned(s, task_id)
    # The open round's commits are counted in ``submitted`` at once but decided (accepted or left
    # out) only when the round closes: the acceptance rate counts closed rounds only.
    open_round = (
        s.get(RoundRow, (task_id, task.current_round)) if task is not None and task_status == "running" else None
    )
    pending_mask = int(open_round.committed_mask) if open_round is not None and open_round.status == "pending" else 0
    for t in s.scalars(select(TrainerRow).where(TrainerRow.task_id == task_id).order_by(TrainerRow.fragment)):
        mask = int(t.shard_mask)
        decided = t.submitted - (pending_mask >> t.fragment & 1)
        out.append(
            TrainerOut(
                address=t.address,
                fragment=t.fragment,
                enrolled=t.enrolled,
                evicted=t.evicted,
                status=trainer_status(task_status, t.enrolled, t.evicted),
                stake_wei=t.stake_wei,
                stake_returned_wei=str(returned.get(t.address, 0)),
                slashed_wei=t.slashed_wei,
                shards=[i for i in range(mask.bit_length()) if mask >> i & 1],
                submitted=t.submitted,
                accepted=t.accepted,
                missed=t.missed,
                acceptance_rate=t.accepted / decided if decided > 0 else None,
                accepted_weight=t.accepted_weight,
                reward_wei=t.reward_wei,
            )
        )
    return out


def witnesses(s: Session, task_id: int) -> list[WitnessOut]:
    returned = bonds_returned(s, task_id)
    return [
        WitnessOut(
            address=w.address,
            bonded=w.bonded,
            bond_wei=w.bond_wei,
            bond_returned_wei=str(returned.get(w.address, 0)),
            slashed_wei=w.slashed_wei,
            votes=w.votes,
            matched=w.matched,
            dissents=w.dissents,
            fees_wei=w.fees_wei,
        )
        for w in s.scalars(select(WitnessRow).where(WitnessRow.task_id == task_id).order_by(WitnessRow.position))
    ]


def challenges(s: Session, task_id: int) -> list[ChallengeOut]:
    return [
        ChallengeOut(
            challenge_id=c.challenge_id,
            kind=c.kind,
            status=c.status,
            round=c.round,
            fragment=c.fragment,
            segment=c.segment,
            challenger=c.challenger,
            accused=c.accused,
            bond_wei=c.bond_wei,
            slashed_wei=c.slashed_wei,
            opened_at=c.opened_at,
            deadline=c.deadline,
            guilty_votes=c.guilty_votes,
            innocent_votes=c.innocent_votes,
            tx=c.tx,
        )
        for c in s.scalars(
            select(ChallengeRow).where(ChallengeRow.task_id == task_id).order_by(ChallengeRow.challenge_id)
        )
    ]


def losses(s: Session, task_id: int) -> Losses:
    """The validation metric per opened round (named: a language task's is its validation loss)
    and each trainer's self-reported training loss."""
    round_rows = list(s.scalars(select(RoundRow).where(RoundRow.task_id == task_id).order_by(RoundRow.round)))
    numbers = [r.round for r in round_rows]
    index = {n: i for i, n in enumerate(numbers)}
    per_trainer: dict[str, list[float | None]] = {}
    for t in s.scalars(select(TrainerRow).where(TrainerRow.task_id == task_id).order_by(TrainerRow.fragment)):
        per_trainer[t.address] = [None] * len(numbers)
    for loss in s.scalars(
        select(TrainerLossRow).where(TrainerLossRow.task_id == task_id, TrainerLossRow.status == "ok")
    ):
        if loss.round in index and loss.loss is not None:
            per_trainer.setdefault(loss.trainer, [None] * len(numbers))[index[loss.round]] = loss.loss
    task = s.get(TaskRow, task_id)
    modality = str(task.onchain_spec.get("modality", "language")) if task is not None else "language"
    name, higher = VALIDATION_METRICS.get(parse_enum(Modality, modality, "modality"), ("validation_loss", False))
    return Losses(
        rounds=numbers,
        validation=[r.validation_loss for r in round_rows],
        trainers=per_trainer,
        metric=name,
        metric_higher_is_better=higher,
    )


def privacy(s: Session, task_id: int) -> Privacy:
    """The run's privacy target and every trainer's ε per opened round (from its commitments)."""
    from syncline.errors import SpecError
    from syncline.privacy.accounting import PrivacyPlan
    from syncline.protocol.spec import PrivacySpec

    task = s.get(TaskRow, task_id)
    artifact = task.spec_artifact if task is not None else None
    if not artifact or not artifact.get("privacy"):
        return Privacy(enabled=False)
    try:
        target = PrivacySpec.from_mapping(artifact["privacy"])
        plan = PrivacyPlan.for_target(target, rounds=int(artifact["rounds"]), inner_steps=int(artifact["inner_steps"]))
    except (SpecError, KeyError, TypeError, ValueError):
        return Privacy(enabled=False)
    numbers = [r.round for r in s.scalars(select(RoundRow).where(RoundRow.task_id == task_id).order_by(RoundRow.round))]
    trained: dict[str, list[bool]] = {
        t.address: [False] * len(numbers)
        for t in s.scalars(select(TrainerRow).where(TrainerRow.task_id == task_id).order_by(TrainerRow.fragment))
    }
    index = {n: i for i, n in enumerate(numbers)}
    for sub in s.scalars(select(SubmissionRow).where(SubmissionRow.task_id == task_id)):
        if sub.round in index:
            trained.setdefault(sub.trainer, [False] * len(numbers))[index[sub.round]] = True
    return Privacy(
        enabled=True,
        target_epsilon=target.epsilon,
        delta=target.delta,
        clip_norm=target.clip_norm,
        sample_rate=target.sample_rate,
        accountant=target.accountant,
        noise_multiplier=plan.noise_multiplier,
        rounds=numbers,
        epsilon_per_round=plan.ledger(trained),
        rounds_opened=_rounds_opened(s, task_id, artifact),
    )


def _rounds_opened(s: Session, task_id: int, artifact: dict[str, Any]) -> dict[str, list[int]]:
    """Per DP trainer, the rounds whose noise opening the committee could read (a drawn or claimed
    training segment, ``privacy.exposure.opened_rounds``), from the index: the draw is recomputed
    from each finalized round's root and the hash of the block of its last ``RoundFinalized``."""
    from syncline.errors import SpecError
    from syncline.privacy.exposure import opened_rounds
    from syncline.protocol.spec import TrainingTaskSpec
    from syncline.protocol.spot_checks import spot_check_draw

    try:
        spec = TrainingTaskSpec.from_mapping(artifact)
    except (SpecError, KeyError, TypeError, ValueError):
        return {}
    segments = spec.checkpoint_segments
    trainers = {
        (sub.round, sub.fragment): sub.trainer
        for sub in s.scalars(select(SubmissionRow).where(SubmissionRow.task_id == task_id))
    }
    accepted: list[tuple[int, int, str]] = []
    roots: dict[int, str] = {}
    for r in s.scalars(select(RoundRow).where(RoundRow.task_id == task_id)):
        if r.status != "finalized":
            continue
        roots[r.round] = r.state_root
        mask = int(r.accepted_mask)
        accepted += [
            (r.round, f, trainers[(r.round, f)])
            for f in range(mask.bit_length())
            if mask >> f & 1 and (r.round, f) in trainers
        ]
    finalized_in: dict[int, str] = {}
    for ev in s.scalars(
        select(RawEvent)
        .where(RawEvent.task_id == task_id, RawEvent.name == "RoundFinalized")
        .order_by(RawEvent.block_number, RawEvent.log_index)
    ):
        if ev.round is not None:
            finalized_in[ev.round] = ev.block_hash  # the last one, as the agents read it

    def drawn(round_: int, fragment: int) -> int | None:
        if round_ not in finalized_in or round_ not in roots:
            return None
        return spot_check_draw(
            task_id,
            round_,
            fragment,
            bytes.fromhex(roots[round_][2:]),
            bytes.fromhex(finalized_in[round_][2:]),
            ppm=spec.spot_check_ppm,
            segments=segments,
        )

    claims = [
        (c.round, c.fragment, c.segment, trainers.get((c.round, c.fragment), c.accused))
        for c in s.scalars(select(ChallengeRow).where(ChallengeRow.task_id == task_id))
        if c.kind == "training_fraud"
    ]
    return opened_rounds(accepted, drawn if spec.verification_policy.on_demand else None, claims, segments=segments)


def known_state_roots(s: Session, row: TaskRow) -> set[str]:
    """Every state root the task has had: initial, each round's previous and finalized, current."""
    roots = {str(row.onchain_spec["initial_state_root"]), row.state_root}
    for r in s.scalars(select(RoundRow).where(RoundRow.task_id == row.task_id)):
        roots.update((r.state_root, r.prev_state_root))
    roots.discard(ZERO32)
    return {x.lower() for x in roots}
