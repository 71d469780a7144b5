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
from syncline.court.files import CourtFiles
from syncline.court.findings import AggregationFraud, Censorship, Finding
from syncline.court.referee import Outcome, Undecided
from syncline.court.sampling import CheckRecorder, make_training_checker
from syncline.errors import ChainError
from syncline.observability import get_logger
from syncline.protocol.enums import ChallengeKind, ChallengeStatus, TaskStatus
from syncline.protocol.spot_checks import filing_open
from syncline.run.agent_config import AgentConfig
from syncline.run.context import TaskContext
from syncline.run.local_store import SIGNED_VOTES_FILE, append_record, claim_state_dir, read_records
from syncline.run.loop import TaskNotPosted, pending_block, pending_time, run_forever
from syncline.run.metrics import default_loop_metrics, serve_metrics
from syncline.run.state_file import use_disk_state

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
    # A large model's challenger keeps the states, payloads and checkpoints it judges in files
    # here (``state_on_disk``; None: in memory). Its training checker must be given the same.
    files: CourtFiles | None = None
    _auditor: RoundAuditor | None = None

    def _context(self) -> TaskContext:
        if self.ctx is None:
            self.ctx = TaskContext.load(self.market, self.blobs, self.task_id)
        return self.ctx

    def _auditor_for(self) -> RoundAuditor:
        if self._auditor is None:
            self._auditor = RoundAuditor(self._context(), self.market.domain(), self.training_checker, files=self.files)
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
                began = time.perf_counter()
                found = 0
                for finding in auditor.audit(round_):
                    found += 1
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
                self._record_audit(round_, auditor.incomplete, found, time.perf_counter() - began)
            self._follow_up(now, block)
        if self.withdraw:
            self._withdraw()

    def _record_audit(self, round_: int, incomplete: bool, findings: int, seconds: float) -> None:
        """One line per audit pass in ``audits.jsonl`` (a round still waiting for data is audited again)."""
        log.info(
            "challenger.audited", round=round_, complete=not incomplete, findings=findings, seconds=round(seconds, 1)
        )
        if self.state_dir is not None:
            append_record(
                self.state_dir,
                "audits.jsonl",
                {
                    "round": round_,
                    "complete": not incomplete,
                    "findings": findings,
                    "seconds": round(seconds, 3),
                    "on_disk": self.files is not None,
                    "wall_time": time.time(),
                },
            )

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

    def _follow_up(self, now: int, block: int) -> None:
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
                    if block <= demand.deadline_block:
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
        challenger: Challenger | None = None
        awaiting = TaskNotPosted(self.market.task_count, self.cfg.task_id, role="challenger")

        def step() -> bool:
            nonlocal challenger
            if awaiting.waiting():
                return False
            t = self.market.task(self.cfg.task_id)
            if t.status == TaskStatus.ENROLLING:
                return False
            if challenger is None:  # once the task is posted: its size decides where the court's data lives
                ctx = TaskContext.load(self.market, self.blobs, self.cfg.task_id)
                challenger = court_challenger(self.cfg, self.signer, self.market, self.blobs, ctx, withdraw=True)
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


def court_files(cfg: AgentConfig, ctx: TaskContext) -> CourtFiles | None:
    """Where an agent's court keeps what it judges: files under ``<state_dir>/court`` when the
    agent keeps the task's state on disk (``state_on_disk``), None (memory) otherwise."""
    if not use_disk_state(ctx.layout.numel, cfg.state_on_disk):
        return None
    return CourtFiles(cfg.state_dir / "court")


def check_recorder(state_dir: Path) -> CheckRecorder:
    """Record every segment a training check judged in ``<state_dir>/training-checks.jsonl``."""

    def record(round_: int, fragment: int, why: str, outcome: Outcome, seconds: float) -> None:
        verdict = "undecided" if isinstance(outcome, Undecided) else "guilty" if outcome.guilty else "innocent"
        log.info(
            "challenger.segment_checked",
            round=round_,
            fragment=fragment,
            segment=outcome.segment,
            why=why,
            verdict=verdict,
            seconds=round(seconds, 1),
        )
        append_record(
            state_dir,
            "training-checks.jsonl",
            {
                "round": round_,
                "fragment": fragment,
                "segment": outcome.segment,
                "segments": outcome.segments,
                "why": why,
                "verdict": verdict,
                "reason": outcome.reason,
                "seconds": round(seconds, 3),
                "wall_time": time.time(),
            },
        )

    return record


def court_challenger(
    cfg: AgentConfig,
    signer: Signer,
    market: MarketClient,
    blobs: BlobStore,
    ctx: TaskContext,
    *,
    withdraw: bool,
    files: CourtFiles | None = None,
) -> Challenger:
    """The challenger an agent runs on ``cfg``'s task: training checks in ``cfg.training_checks``
    (seeded by the agent's address), recorded in its state dir, on disk for a large model
    (``files``, :func:`court_files` by default)."""
    files = files if files is not None else court_files(cfg, ctx)
    return Challenger(
        task_id=cfg.task_id,
        signer=signer,
        market=market,
        blobs=blobs,
        state_dir=cfg.state_dir,
        training_checker=make_training_checker(
            cfg.training_checks, seed=int(signer.address, 16), files=files, record=check_recorder(cfg.state_dir)
        ),
        withdraw=withdraw,
        ctx=ctx,
        files=files,
    )
