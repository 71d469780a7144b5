"""The challenger agent: ``syncline challenger run --config challenger.yaml``.

Anyone can run it; witness agents run one by default. Every closed round still inside its
challenge window is audited once (:mod:`syncline.court.audit`); each fault found is proven on
chain by sending the call the finding builds (:meth:`syncline.court.findings.Finding.call`).
Censorship claims are resolved after their defence period, undecided training claims expired after
theirs, and the credit earned (bonds back plus the challenger's share of each slash) is withdrawn.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from prometheus_client import Counter, Gauge

from syncline.blobstore import BlobStore
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient, TaskView
from syncline.court.audit import RoundAuditor, TrainingChecker
from syncline.court.findings import AggregationFraud, Censorship, Finding
from syncline.court.sampling import make_training_checker
from syncline.errors import ChainError
from syncline.observability import get_logger
from syncline.protocol.enums import ChallengeKind, ChallengeStatus, TaskStatus
from syncline.protocol.spot_checks import filing_open
from syncline.run.agent_config import AgentConfig
from syncline.run.context import TaskContext
from syncline.run.local_store import SIGNED_VOTES_FILE, append_record, claim_state_dir, read_records
from syncline.run.loop import TaskNotPosted, pending_block, pending_time, run_forever
from syncline.run.metrics import default_loop_metrics, serve_metrics

log = get_logger("syncline.challenger")

FINDINGS = Counter("syncline_challenger_findings_total", "Faults found by the challenger", ["kind"])
PROVEN = Counter("syncline_challenger_proofs_total", "Challenges the challenger brought", ["kind"])
LATENCY = Gauge("syncline_challenger_last_proof_latency_seconds", "Seconds from the round's close to the proof")
AUDITED = Gauge("syncline_challenger_last_audited_round", "Last round the challenger audited")


@dataclass
class Challenger:
    """Audits one task's rounds and brings the proofs; embeddable in other agents."""

    task_id: int
    signer: Signer
    market: MarketClient
    blobs: BlobStore
    state_dir: Path | None = None
    training_checker: TrainingChecker | None = None
    # A standalone challenger withdraws what it earns; a witness claims everything itself at seal.
    withdraw: bool = True
    ctx: TaskContext | None = None
    audited: set[int] = field(default_factory=set)
    # Findings already proven (or lost to a faster challenger): never brought twice.
    brought: set[tuple[ChallengeKind, int, object]] = field(default_factory=set)
    # Censorship and training challenges this challenger brought that are still open (they need a
    # follow-up after their deadline); proofs decided in their own transaction are not kept.
    mine: set[int] = field(default_factory=set)
    _auditor: RoundAuditor | None = None

    def _context(self) -> TaskContext:
        if self.ctx is None:
            self.ctx = TaskContext.load(self.market, self.blobs, self.task_id)
        return self.ctx

    def _auditor_for(self) -> RoundAuditor:
        if self._auditor is None:
            self._auditor = RoundAuditor(self._context(), self.market.domain(), self.training_checker)
        return self._auditor

    def step(self, task: TaskView | None = None) -> None:
        """Audit every newly closed round in its window, prove what is wrong, follow up, withdraw.

        ``task`` is the task's view if the caller has just read it (saves reading it again)."""
        t = task or self.market.task(self.task_id)
        if t.status in (TaskStatus.RUNNING, TaskStatus.AWAITING_SEAL):
            spec = self._context().spec
            now, block = pending_time(self.market.w3), pending_block(self.market.w3)
            window = spec.challenge_window_s
            last = t.current_round if t.status == TaskStatus.RUNNING else spec.rounds
            for round_ in range(last):
                if round_ in self.audited:
                    continue
                rr = self.market.round(self.task_id, round_)
                if rr.closed_at == 0 or not filing_open(rr.closed_at, rr.closed_block, now, block, window):
                    self.audited.add(round_)
                    continue
                auditor = self._auditor_for()
                for finding in auditor.audit(round_):
                    key = finding.key()
                    if key in self.brought:
                        continue  # a re-audit of a round that could not be judged whole before
                    FINDINGS.labels(kind=finding.kind_name).inc()
                    if isinstance(finding, Censorship | AggregationFraud) and self._voted_for(round_):
                        # INVARIANT: never a claim against a result this account voted for (it
                        # could not defend it, and it would accuse itself: issue 27 item 6).
                        log.info("challenger.own_result_not_claimed", kind=finding.kind_name, round=round_)
                        self.brought.add(key)
                        continue
                    self._prove(finding, rr.closed_at)
                    self.brought.add(key)
                AUDITED.set(round_)
                if not auditor.incomplete:
                    self.audited.add(round_)
            self._follow_up(now)
        if self.withdraw:
            self._withdraw()

    def _voted_for(self, round_: int) -> bool:
        """Whether this account voted the finalized result of ``round_``: its vote on chain, or a
        vote it signed (``signed-votes.jsonl`` of a witness's state dir) for that same result (a
        vote sent after the round finalized leaves none on chain)."""
        rr = self.market.round(self.task_id, round_)
        if self.market.vote_of(self.task_id, round_, self.signer.address).lower() == rr.result.lower():
            return True
        if self.state_dir is None:
            return False
        for record in read_records(self.state_dir, SIGNED_VOTES_FILE):
            if record.get("task") != self.task_id or record.get("round") != round_:
                continue
            try:
                vote = json.loads(str(record["vote"]))
                same = (
                    str(vote["stateRoot"]).lower() == rr.state_root.lower()
                    and str(vote["aggregateRoot"]).lower() == rr.aggregate_root.lower()
                    and int(vote["acceptedMask"]) == rr.accepted_mask
                )
            except (KeyError, TypeError, ValueError):
                continue
            if same:
                return True
        return False

    # ------------------------------------------------------------------ proving

    def _prove(self, finding: Finding, closed_at: int) -> None:
        kind = finding.kind_name
        log.info("challenger.fault_found", kind=kind, round=finding.round, detail=finding.details())
        try:
            challenge_id = self.market.send_call(self.signer, finding.call(self.market, self.task_id))
        except ChainError as exc:
            # Someone else proved it first (duplicate), or the window closed: nothing lost.
            log.info(
                "challenger.proof_skipped", kind=kind, round=finding.round, reason=exc.error_name or str(exc)[:160]
            )
            return
        if not finding.decided_in_its_transaction:
            self.mine.add(challenge_id)
        latency = max(0, pending_time(self.market.w3) - closed_at)
        LATENCY.set(latency)
        PROVEN.labels(kind=kind).inc()
        log.info(
            "challenger.challenge_brought", kind=kind, round=finding.round, challenge=challenge_id, latency_s=latency
        )
        if self.state_dir is not None:
            append_record(
                self.state_dir,
                "challenges.jsonl",
                {
                    "challenge": challenge_id,
                    "kind": kind,
                    "round": finding.round,
                    "latency_s": latency,
                    "detail": finding.details(),
                    "wall_time": time.time(),
                },
            )

    def _follow_up(self, now: int) -> None:
        for challenge_id in sorted(self.mine):
            c = self.market.challenge(challenge_id)
            if c.status != ChallengeStatus.OPEN:
                self.mine.discard(challenge_id)
                continue
            close_at = c.deadline
            if c.kind == ChallengeKind.TRAINING_FRAUD:
                demand = self.market.availability_demand(challenge_id)
                if not demand.answered:
                    # the accused stayed silent: its claim is upheld once its response window
                    # has passed in time and in blocks
                    if pending_block(self.market.w3) <= demand.deadline_block:
                        continue
                    close_at = demand.deadline
            if now <= close_at:
                continue
            try:
                if c.kind == ChallengeKind.CENSORSHIP:
                    self.market.resolve_censorship(self.signer, challenge_id)
                elif c.kind == ChallengeKind.TRAINING_FRAUD:
                    self.market.expire_challenge(self.signer, challenge_id)
            except ChainError as exc:
                log.info(
                    "challenger.follow_up_skipped", challenge=challenge_id, reason=exc.error_name or str(exc)[:160]
                )
                continue
            after = self.market.challenge(challenge_id)
            log.info("challenger.challenge_closed", challenge=challenge_id, status=after.status.name.lower())
            self.mine.discard(challenge_id)

    def _withdraw(self) -> None:
        amount = self.market.claim(self.signer)
        if amount:
            log.info("challenger.withdrew", wei=amount)


@dataclass
class ChallengerAgent:
    """The long-running process behind ``syncline challenger run``."""

    cfg: AgentConfig
    signer: Signer
    market: MarketClient
    blobs: BlobStore

    def run(self, *, max_iterations: int | None = None) -> None:
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        with claim_state_dir(self.cfg.state_dir):
            self._run(max_iterations)

    def _run(self, max_iterations: int | None) -> None:
        if self.cfg.metrics_port:
            serve_metrics(self.cfg.metrics_port)
        challenger = Challenger(
            task_id=self.cfg.task_id,
            signer=self.signer,
            market=self.market,
            blobs=self.blobs,
            state_dir=self.cfg.state_dir,
            training_checker=make_training_checker(self.cfg.training_checks, seed=int(self.signer.address, 16)),
        )

        awaiting = TaskNotPosted(self.market.task_count, self.cfg.task_id, role="challenger")

        def step() -> bool:
            if awaiting.waiting():
                return False
            t = self.market.task(self.cfg.task_id)
            if t.status == TaskStatus.ENROLLING:
                return False
            challenger.step(t)
            done = t.status in (TaskStatus.SEALED, TaskStatus.CANCELLED)
            return done and self.market.credit_of(self.signer.address) == 0

        run_forever(
            step,
            poll_interval_s=self.cfg.poll_interval_s,
            role="challenger",
            metrics=default_loop_metrics("challenger"),
            max_iterations=max_iterations,
        )
