"""The witness (syncer) agent: ``syncline witness run --config witness.yaml``.

After each round's deadline it fetches every committed payload, rejects bad ones with a reason,
aggregates with the task's rule, applies the outer step, publishes the new state, measures the
validation loss and votes. A crashed witness recomputes the same bytes and its repeated vote is a
no-op on chain (idempotent finalize). After the grace window it carries a stuck round forward;
after the challenge window it seals; then it claims its fees.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from syncline.blobstore import BlobStore
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.errors import ChainError
from syncline.observability import get_logger
from syncline.protocol.enums import TaskStatus
from syncline.protocol.sync_round import RoundResult
from syncline.run.agent_config import AgentConfig
from syncline.run.context import StateUnavailable, TaskContext, load_weights
from syncline.run.local_store import append_record
from syncline.run.loop import pending_time, run_forever
from syncline.run.metrics import AgentMetrics

log = get_logger("syncline.witness")
ZERO = "0x" + "00" * 32


@dataclass
class WitnessAgent:
    cfg: AgentConfig
    signer: Signer
    market: MarketClient
    blobs: BlobStore
    metrics: AgentMetrics = field(default_factory=lambda: AgentMetrics("witness"))
    ctx: TaskContext | None = None
    _eval_model: torch.nn.Module | None = None

    def run(self, *, max_iterations: int | None = None) -> None:
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        if self.cfg.metrics_port:
            self.metrics.serve(self.cfg.metrics_port)
        run_forever(self.step, poll_interval_s=self.cfg.poll_interval_s, role="witness", max_iterations=max_iterations)

    def step(self) -> bool:
        task_id = self.cfg.task_id
        t = self.market.task(task_id)
        if t.status in (TaskStatus.SEALED, TaskStatus.CANCELLED):
            amount = self.market.claim(self.signer)
            if amount:
                log.info("witness.claimed", wei=amount)
            return True
        if t.status == TaskStatus.ENROLLING:
            return False
        if self.ctx is None:
            self.ctx = TaskContext.load(self.market, self.blobs, task_id)
        spec = self.ctx.spec
        now = pending_time(self.market.w3)
        if t.status == TaskStatus.AWAITING_SEAL:
            if now >= t.last_closed_at + spec.challenge_window_s:
                self._send("seal", lambda: self.market.seal(self.signer, task_id))
            return False
        round_ = t.current_round
        deadline = t.round_opened_at + spec.round_duration_s
        if now <= deadline:
            return False
        if self.market.vote_of(task_id, round_, self.signer.address) == ZERO:
            self._vote(round_, t.state_root)
        elif now > deadline + spec.grace_window_s:
            self._send("carry_forward", lambda: self.market.carry_forward(self.signer, task_id, round_))
        return False

    # ------------------------------------------------------------------ round work

    def _vote(self, round_: int, previous_root: str) -> None:
        ctx = self.ctx
        assert ctx is not None
        try:
            previous = ctx.fetch_state(previous_root)
        except StateUnavailable as exc:
            log.info("witness.waiting_for_state", round=round_, reason=str(exc))
            return
        started = time.perf_counter()
        result = ctx.compute_round(previous, ctx.committed_submissions(round_))
        self.metrics.aggregate_seconds.set(time.perf_counter() - started)
        if self.cfg.misbehave == "bad-aggregate":
            result = self._tamper(result)
        ctx.publish_state(result.state)
        loss = self._validation_loss(result)
        for fragment, reason in result.rejected.items():
            self.metrics.rejected.labels(reason=reason.split(":")[0].split(" (")[0]).inc()
            log.info("witness.rejected", round=round_, fragment=fragment, reason=reason)
        self._send(
            "finalize",
            lambda: self.market.finalize_round(
                self.signer,
                ctx.task_id,
                round_,
                result.state_root,
                result.aggregate_root,
                result.accepted_mask,
                metric=int(loss * 1_000_000),
            ),
        )
        self.metrics.round.set(round_)
        self.metrics.validation_loss.set(loss)
        self.metrics.finalized.inc()
        log.info(
            "witness.voted",
            round=round_,
            rule=result.rule_used,
            accepted=bin(result.accepted_mask).count("1"),
            rejected=len(result.rejected),
            validation_loss=round(loss, 4),
            state_root="0x" + result.state_root.hex()[:16],
        )
        append_record(
            self.cfg.state_dir,
            "rounds.jsonl",
            {
                "round": round_,
                "state_root": "0x" + result.state_root.hex(),
                "aggregate_root": "0x" + result.aggregate_root.hex(),
                "accepted_mask": result.accepted_mask,
                "rejected": {str(k): v for k, v in result.rejected.items()},
                "validation_loss": loss,
            },
        )

    def _validation_loss(self, result: RoundResult) -> float:
        ctx = self.ctx
        assert ctx is not None
        if self._eval_model is None:
            self._eval_model = ctx.build_model()
        load_weights(self._eval_model, result.state)
        return ctx.adapter.evaluate(
            self._eval_model,
            ctx.validation_shard(),
            batch_size=self.cfg.eval_batch_size,
            max_batches=self.cfg.eval_batches,
        )

    def _tamper(self, result: RoundResult) -> RoundResult:
        """Misbehaviour for tests/demos only: nudge the weights so the state root is wrong."""
        state = result.state
        bumped = type(state)(state.layout, state.weights + 1, state.momentum)
        return RoundResult(bumped, bumped.state_root(), result.aggregate_root, result.accepted_mask, result.rejected)

    # ------------------------------------------------------------------ chain edge

    def _send(self, what: str, call: Callable[[], object]) -> None:
        try:
            call()
        except ChainError as exc:
            # Losing a race (someone else sealed / carried forward / the round moved on) is normal.
            log.info("witness.call_skipped", what=what, reason=exc.error_name or str(exc)[:120])
