"""Read models refreshed from the contract's views, inside the indexer's transaction.

Events say which task, round, trainer, witness or challenge changed; the rows are then re-read
from ``SynclineMarket``'s views, so every number the API serves is the contract's own (to the
wei), and a row is always whole even if an event was emitted by a code path the API does not model.
Votes, submissions' transactions and the timeline come from the stored raw events.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from syncline.api.db import (
    TASK_SCOPED,
    ChallengeRow,
    Database,
    RawEvent,
    RoundRow,
    SubmissionRow,
    TaskRow,
    TrainerLossRow,
    TrainerRow,
    VoteRow,
    WitnessRow,
)
from syncline.api.events import Changes, validation_loss
from syncline.api.specs import fetch_artifact, onchain_spec
from syncline.blobstore import BlobStore
from syncline.chain.market import MarketClient, TaskView
from syncline.errors import ChainError, SynclineError, candidate_failure
from syncline.observability import get_logger
from syncline.protocol.enums import ChallengeStatus, RoundStatus, TaskStatus
from syncline.run.gossip import TrainerReport, read_report

log = get_logger("syncline.api.indexer")

MAX_SPEC_ATTEMPTS = 6
MAX_REPORT_ATTEMPTS = 12
MAX_BACKOFF_S = 30.0
REPORTS_PER_PASS = 32


def backoff_s(attempts: int) -> float:
    """Seconds before retry ``attempts + 1`` of a blob fetch: 0.5, 1, 2, ... capped at 30."""
    return float(min(MAX_BACKOFF_S, 0.5 * 2**attempts))


def task_state(view: TaskView) -> dict[str, Any]:
    """TaskView as JSON: enums lowercase, wei as decimal strings."""
    data = asdict(view)
    data["status"] = view.status.name.lower()
    data["sponsor"] = view.sponsor.lower()
    return {k: str(v) if k.endswith("_wei") else v for k, v in data.items()}


class Projector:
    """Refreshes the read-model rows of one transaction from the market's views."""

    def __init__(self, market: MarketClient, session: Session):
        self.market = market
        self.s = session

    # ------------------------------------------------------------------ batches

    def apply(self, changes: Changes) -> None:
        live: set[int] = set()
        for task_id in sorted(changes.tasks):
            if self.task(task_id) is not None:
                self.members(task_id)
                live.add(task_id)
        for task_id, round_ in sorted(changes.rounds):
            if task_id in live:
                self.round(task_id, round_)
        open_ids = self.s.scalars(
            select(ChallengeRow.challenge_id).where(ChallengeRow.task_id.in_(live), ChallengeRow.status == "open")
        ).all()
        for cid in sorted(changes.challenges | set(open_ids)):
            self.challenge(cid)
        for task_id, round_, fragment, trainer in sorted(changes.commitments):
            if task_id in live:
                self.expect_report(task_id, round_, fragment, trainer)
        for task_id, round_ in changes.closed_rounds:
            pending = select(TrainerLossRow).where(
                TrainerLossRow.task_id == task_id, TrainerLossRow.round == round_, TrainerLossRow.status == "pending"
            )
            for row in self.s.scalars(pending):
                row.next_try = 0.0  # the round closed: try its missing reports again now

    def whole_task(self, task_id: int) -> None:
        """Every row of ``task_id``, rebuilt from scratch (after a rollback)."""
        self.forget_task(task_id)
        row = self.task(task_id)
        if row is None:
            return
        self.members(task_id)
        last = min(row.current_round, max(0, row.rounds - 1))
        for round_ in range(last + 1):
            self.round(task_id, round_)
        for ev in self._raw(task_id, "ChallengeOpened"):
            self.challenge(int(ev.args["challengeId"]))
        for ev in self._raw(task_id, "SubmissionCommitted"):
            a = ev.args
            self.expect_report(task_id, int(a["round"]), int(a["fragment"]), str(a["trainer"]).lower())

    def forget_task(self, task_id: int) -> None:
        for model in TASK_SCOPED:
            self.s.execute(delete(model).where(model.task_id == task_id))
        self.s.execute(delete(TrainerLossRow).where(TrainerLossRow.task_id == task_id))

    # ------------------------------------------------------------------ rows

    def _raw(self, task_id: int, name: str, round_: int | None = None) -> list[RawEvent]:
        query = select(RawEvent).where(RawEvent.task_id == task_id, RawEvent.name == name)
        if round_ is not None:
            query = query.where(RawEvent.round == round_)
        return list(self.s.scalars(query.order_by(RawEvent.block_number, RawEvent.log_index)))

    def task(self, task_id: int) -> TaskRow | None:
        try:
            view = self.market.task(task_id)
        except ChainError:  # no such task on this chain (any more)
            self.forget_task(task_id)
            return None
        row = self.s.get(TaskRow, task_id)
        if row is None:
            spec = onchain_spec(self.market.spec_tuple(task_id))
            row = TaskRow(
                task_id=task_id,
                name=f"task {task_id}",
                tier=spec["tier"],
                rule=spec["rule"],
                rounds=spec["rounds"],
                min_trainers=spec["min_trainers"],
                max_trainers=spec["max_trainers"],
                spec_hash=spec["spec_hash"],
                spec_uri=spec["spec_uri"],
                onchain_spec=spec,
                posted_at=0,
                posted_block=0,
                posted_tx="",
                spec_artifact=None,
                spec_attempts=0,
                spec_next_try=0.0,
                spec_error=None,
            )
            self.s.add(row)
        row.sponsor = view.sponsor.lower()
        row.status = view.status.name.lower()
        row.current_round = view.current_round
        row.rounds_finalized = view.rounds_finalized
        row.rounds_carried = view.rounds_carried
        row.rounds_invalidated = view.rounds_invalidated
        row.trainers_enrolled = view.enrolled
        # As the receipt shows it: sealing moves the pool into ``sealed_pool_wei``.
        sealed = view.status == TaskStatus.SEALED
        row.reward_pool_wei = str(view.sealed_pool_wei if sealed else view.reward_pool_wei)
        row.escrow_wei = str(self.market.escrow_of(task_id))
        row.state_root = view.state_root
        row.open_challenges = view.open_challenges
        row.state = task_state(view)
        if not row.posted_tx:
            posted = self._raw(task_id, "TaskPosted")
            if posted:
                row.posted_at, row.posted_block, row.posted_tx = (
                    posted[0].timestamp,
                    posted[0].block_number,
                    posted[0].tx_hash,
                )
        return row

    def members(self, task_id: int) -> None:
        for address in self.market.trainers(task_id):
            tv = self.market.trainer(task_id, address)
            key = address.lower()
            row = self.s.get(TrainerRow, (task_id, key)) or TrainerRow(task_id=task_id, address=key)
            row.fragment = tv.fragment
            row.enrolled = tv.enrolled
            row.evicted = tv.evicted
            row.stake_wei = str(tv.stake_wei)
            row.slashed_wei = str(tv.slashed_wei)
            row.shard_mask = str(tv.shard_mask)
            row.submitted = tv.submitted
            row.accepted = tv.accepted
            row.missed = tv.missed
            row.consecutive_missed = tv.consecutive_missed
            row.accepted_weight = tv.accepted_weight
            row.reward_wei = str(tv.reward_wei)
            self.s.add(row)
        task = self.s.get(TaskRow, task_id)
        witnesses: list[str] = list(task.onchain_spec["witnesses"]) if task else []
        for position, address in enumerate(witnesses):
            wv = self.market.witness(task_id, address)
            wrow = self.s.get(WitnessRow, (task_id, address)) or WitnessRow(task_id=task_id, address=address)
            wrow.position = position
            wrow.bonded = wv.bonded
            wrow.bond_wei = str(wv.bond_wei)
            wrow.slashed_wei = str(wv.slashed_wei)
            wrow.votes = wv.votes
            wrow.matched = wv.matched
            wrow.dissents = wv.dissents
            wrow.fees_wei = str(wv.fees_wei)
            self.s.add(wrow)

    def round(self, task_id: int, round_: int) -> None:
        task = self.s.get(TaskRow, task_id)
        if task is None or round_ >= task.rounds:
            return
        rv = self.market.round(task_id, round_)
        key = (task_id, round_)
        if rv.opened_at == 0:  # never opened (or rolled back)
            for model in (RoundRow, SubmissionRow, VoteRow):
                self.s.execute(delete(model).where(model.task_id == task_id, model.round == round_))
            return
        row = self.s.get(RoundRow, key) or RoundRow(task_id=task_id, round=round_)
        row.status = rv.status.name.lower()
        row.opened_at = rv.opened_at
        row.deadline = rv.opened_at + int(task.onchain_spec["round_duration_s"])
        row.closed_at = rv.closed_at
        row.result = rv.result
        row.state_root = rv.state_root
        row.prev_state_root = rv.prev_state_root
        row.aggregate_root = rv.aggregate_root
        row.vote_count = rv.vote_count
        row.committed_mask = str(rv.committed_mask)
        row.accepted_mask = str(rv.accepted_mask)
        row.revoked_mask = str(rv.revoked_mask)
        self.s.add(row)
        self._submissions(task_id, round_, rv.committed_mask)
        votes = self._votes(task_id, round_)
        finalized = rv.status == RoundStatus.FINALIZED
        row.validation_loss = validation_loss(votes, rv.result) if finalized else None

    def _submissions(self, task_id: int, round_: int, committed: int) -> None:
        txs = {int(ev.args["fragment"]): ev.tx_hash for ev in self._raw(task_id, "SubmissionCommitted", round_)}
        stored = {
            r.fragment: r
            for r in self.s.scalars(
                select(SubmissionRow).where(SubmissionRow.task_id == task_id, SubmissionRow.round == round_)
            )
        }
        for fragment, srow in stored.items():
            if not committed >> fragment & 1:
                self.s.delete(srow)
        for fragment in range(committed.bit_length()):
            if not committed >> fragment & 1 or fragment in stored:
                continue  # a commitment never changes once made
            sv = self.market.submission(task_id, round_, fragment)
            self.s.add(
                SubmissionRow(
                    task_id=task_id,
                    round=round_,
                    fragment=fragment,
                    trainer=sv.trainer.lower(),
                    weight=sv.weight,
                    committed_at=sv.committed_at,
                    payload_hash=sv.payload_hash,
                    chunk_root=sv.chunk_root,
                    checkpoint_root=sv.checkpoint_root,
                    uri=sv.uri,
                    tx=txs.get(fragment, ""),
                )
            )

    def _votes(self, task_id: int, round_: int) -> list[tuple[str, int]]:
        """The round's votes, from its ``VoteCast`` / ``DissentRecorded`` events; returns (result, metric)."""
        stored = {
            r.witness: r
            for r in self.s.scalars(select(VoteRow).where(VoteRow.task_id == task_id, VoteRow.round == round_))
        }
        dissenters = {str(ev.args["witness"]).lower() for ev in self._raw(task_id, "DissentRecorded", round_)}
        out: list[tuple[str, int]] = []
        seen: set[str] = set()
        for ev in self._raw(task_id, "VoteCast", round_):
            a = ev.args
            witness = str(a["witness"]).lower()
            row = stored.get(witness) or VoteRow(task_id=task_id, round=round_, witness=witness)
            row.result = str(a["result"])
            row.state_root = str(a["stateRoot"])
            row.aggregate_root = str(a["aggregateRoot"])
            row.accepted_mask = str(int(a["acceptedMask"]))
            row.metric = str(int(a["metric"]))
            row.dissent = witness in dissenters
            row.block_number = ev.block_number
            row.tx = ev.tx_hash
            self.s.add(row)
            seen.add(witness)
            out.append((row.result, int(a["metric"])))
        for witness, row in stored.items():
            if witness not in seen:
                self.s.delete(row)
        return out

    def challenge(self, challenge_id: int) -> None:
        try:
            cv = self.market.challenge(challenge_id)
        except ChainError:
            cv = None
        if cv is None or cv.status == ChallengeStatus.NONE:
            self.s.execute(delete(ChallengeRow).where(ChallengeRow.challenge_id == challenge_id))
            return
        tx = next(
            (ev.tx_hash for ev in self._raw(cv.task_id, "ChallengeOpened") if ev.args["challengeId"] == challenge_id),
            "",
        )
        row = self.s.get(ChallengeRow, challenge_id) or ChallengeRow(challenge_id=challenge_id)
        row.task_id = cv.task_id
        row.round = cv.round
        row.kind = cv.kind.name.lower()
        row.status = cv.status.name.lower()
        row.fragment = cv.fragment
        row.segment = cv.segment
        row.challenger = cv.challenger.lower()
        row.accused = cv.accused.lower()
        row.bond_wei = str(cv.bond_wei)
        row.slashed_wei = str(cv.slashed_wei)
        row.opened_at = cv.opened_at
        row.deadline = cv.deadline
        row.guilty_votes = cv.guilty_votes
        row.innocent_votes = cv.innocent_votes
        row.tx = tx
        self.s.add(row)

    def expect_report(self, task_id: int, round_: int, fragment: int, trainer: str) -> None:
        """A commitment was made: its trainer's loss report is to be fetched (if not already)."""
        if self.s.get(TrainerLossRow, (task_id, round_, fragment)) is None:
            self.s.add(
                TrainerLossRow(
                    task_id=task_id,
                    round=round_,
                    fragment=fragment,
                    trainer=trainer,
                    status="pending",
                    attempts=0,
                    next_try=0.0,
                )
            )


# ---------------------------------------------------------------------- blob-backed enrichment
#
# These run on the enrichment worker, never on the indexing path: due rows are read in one short
# session, fetched with no transaction open (each fetch has a total deadline), and the results are
# written in one short transaction, so a slow or hostile blob store never holds the database.


def fetch_spec_artifacts(db: Database, blobs: BlobStore, now: float | None = None, budget_s: float = 2.0) -> int:
    """Fetch and verify the spec artifacts still missing (bounded retries, at most ``budget_s`` of
    fetching per call); returns how many arrived."""
    now = time.time() if now is None else now
    stop_at = time.monotonic() + budget_s
    with db.session() as s:
        due = s.execute(
            select(TaskRow.task_id, TaskRow.spec_uri, TaskRow.spec_hash).where(
                TaskRow.spec_artifact.is_(None),
                TaskRow.spec_attempts < MAX_SPEC_ATTEMPTS,
                TaskRow.spec_next_try <= now,
            )
        ).all()
    results: list[tuple[int, str, dict[str, Any] | None, str | None]] = []
    for task_id, spec_uri, spec_hash in due:
        if time.monotonic() > stop_at:
            break
        try:
            results.append((int(task_id), str(spec_hash), fetch_artifact(blobs, spec_uri, spec_hash), None))
        except Exception as exc:  # any failure marks this task's artifact bad, never the pass
            failure = candidate_failure(exc)
            results.append((int(task_id), str(spec_hash), None, failure))
    arrived = 0
    with db.transaction() as s:
        for task_id, spec_hash, artifact, reason in results:
            row = s.get(TaskRow, task_id)
            if row is None or row.spec_hash != spec_hash or row.spec_artifact is not None:
                continue  # rolled back or re-indexed meanwhile
            if artifact is None:
                row.spec_attempts += 1
                row.spec_next_try = now + backoff_s(row.spec_attempts)
                row.spec_error = reason
                log.info("api.spec_unavailable", task_id=task_id, attempt=row.spec_attempts, reason=reason)
                continue
            row.spec_artifact = artifact
            row.name = str(artifact.get("name") or row.name)[:256]
            row.spec_error = None
            arrived += 1
    return arrived


def fetch_reports(
    db: Database, blobs: BlobStore, now: float | None = None, limit: int = REPORTS_PER_PASS, budget_s: float = 2.0
) -> int:
    """Fetch due trainer loss reports (at most ``limit`` and ``budget_s`` of fetching per call); a
    report counts only if signed by the trainer that committed the fragment on chain. Returns how
    many were stored."""
    now = time.time() if now is None else now
    stop_at = time.monotonic() + budget_s
    with db.session() as s:
        due = s.execute(
            select(TrainerLossRow.task_id, TrainerLossRow.round, TrainerLossRow.fragment)
            .where(TrainerLossRow.status == "pending", TrainerLossRow.next_try <= now)
            .order_by(TrainerLossRow.next_try)
            .limit(limit)
        ).all()
    results: list[tuple[tuple[int, int, int], TrainerReport | None]] = []
    for task_id, round_, fragment in due:
        if time.monotonic() > stop_at:
            break
        try:
            report = read_report(blobs, int(task_id), int(round_), int(fragment))
        except SynclineError:
            report = None
        results.append(((int(task_id), int(round_), int(fragment)), report))
    stored = 0
    with db.transaction() as s:
        for key, report in results:
            row = s.get(TrainerLossRow, key)
            if row is None or row.status != "pending":
                continue
            if report is None:
                row.attempts += 1
                if row.attempts >= MAX_REPORT_ATTEMPTS:
                    row.status = "absent"
                row.next_try = now + backoff_s(row.attempts)
                continue
            if report.signer.lower() != row.trainer.lower():
                row.status = "rejected"
                log.info("api.report_rejected", task_id=row.task_id, round=row.round, fragment=row.fragment)
                continue
            row.status = "ok"
            row.loss = report.loss
            row.steps = report.steps
            row.tokens = report.tokens
            stored += 1
    return stored
