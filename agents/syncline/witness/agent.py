"""The witness (syncer) agent: ``syncline witness run --config witness.yaml``.

After each round's deadline it fetches every committed payload, rejects bad ones with a reason,
aggregates with the task's rule, applies the outer step, publishes the new state, measures the
validation loss and votes. A crashed witness recomputes the same bytes and its repeated vote is a
no-op on chain (idempotent finalize). After the grace window it carries a stuck round forward;
after the challenge window it seals; then it claims its fees.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import torch

from syncline.blobstore import BlobStore
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.errors import ChainError, SynclineError
from syncline.observability import get_logger
from syncline.protocol.enums import TaskStatus
from syncline.protocol.sync_round import CommittedSubmission, RoundResult, compute_round
from syncline.run.agent_config import AgentConfig
from syncline.run.context import StateUnavailable, TaskContext
from syncline.run.loop import pending_time, run_forever
from syncline.run.metrics import AgentMetrics

log = get_logger("syncline.witness")
ZERO = "0x" + "00" * 32
MAX_PAYLOAD_OVERHEAD = 1 << 20


@dataclass
class WitnessAgent:
    cfg: AgentConfig
    signer: Signer
    market: MarketClient
    blobs: BlobStore
    metrics: AgentMetrics = field(default_factory=lambda: AgentMetrics("witness"))
    ctx: TaskContext | None = None

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
            return self._claim()
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
        result = compute_round(
            previous,
            self._submissions(round_),
            rule=ctx.spec.aggregation.rule,
            rule_param=ctx.spec.aggregation.rule_param,
            bits=ctx.spec.gradient_bits,
            lr_ppm=round(ctx.spec.outer_optimizer.lr * 1_000_000),
            momentum_ppm=round(ctx.spec.outer_optimizer.momentum * 1_000_000),
            max_payload_bytes=self._max_payload_bytes(),
        )
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
        self._append_local(
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

    def _submissions(self, round_: int) -> list[CommittedSubmission]:
        ctx = self.ctx
        assert ctx is not None
        committed = self.market.round(ctx.task_id, round_).committed_mask
        out: list[CommittedSubmission] = []
        limit = self._max_payload_bytes()
        for fragment in range(256):
            if not committed >> fragment & 1:
                continue
            s = self.market.submission(ctx.task_id, round_, fragment)
            payload: bytes | None = None
            error: str | None = None
            try:
                payload = self.blobs.fetch(s.uri, expected_digest=s.payload_hash, max_bytes=limit)
            except SynclineError as exc:
                error = f"fetch failed: {str(exc).splitlines()[0][:160]}"
            out.append(
                CommittedSubmission(
                    fragment=fragment,
                    payload_hash=bytes.fromhex(s.payload_hash[2:]),
                    chunk_root=bytes.fromhex(s.chunk_root[2:]),
                    payload=payload,
                    fetch_error=error,
                )
            )
        return out

    def _max_payload_bytes(self) -> int:
        assert self.ctx is not None
        numel = self.ctx.layout.numel
        return numel * (self.ctx.spec.gradient_bits // 8) + numel // 128 + MAX_PAYLOAD_OVERHEAD

    def _validation_loss(self, result: RoundResult) -> float:
        ctx = self.ctx
        assert ctx is not None
        model = ctx.build_model(result.state)
        return ctx.adapter.evaluate(
            model, ctx.validation_shard(), batch_size=self.cfg.eval_batch_size, max_batches=self.cfg.eval_batches
        )

    def _tamper(self, result: RoundResult) -> RoundResult:
        """Misbehaviour for tests/demos only: nudge the weights so the state root is wrong."""
        state = result.state
        bumped = type(state)(state.layout, state.weights + 1, state.momentum)
        return RoundResult(bumped, bumped.state_root(), result.aggregate_root, result.accepted_mask, result.rejected)

    # ------------------------------------------------------------------ chain edge

    def _send(self, what: str, call: object) -> None:
        try:
            call()  # type: ignore[operator]
        except ChainError as exc:
            # Losing a race (someone else sealed / carried forward / the round moved on) is normal.
            log.info("witness.call_skipped", what=what, reason=exc.error_name or str(exc)[:120])

    def _claim(self) -> bool:
        if self.market.credit_of(self.signer.address) > 0:
            amount, _ = self.market.withdraw(self.signer)
            log.info("witness.claimed", wei=amount)
        return True

    def _append_local(self, name: str, record: dict[str, object]) -> None:
        self.cfg.state_dir.mkdir(parents=True, exist_ok=True)
        with (self.cfg.state_dir / name).open("a") as fh:
            fh.write(json.dumps(record) + "\n")
