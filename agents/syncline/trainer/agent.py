"""The trainer agent: ``syncline trainer run --config trainer.yaml``.

Each tick it reads the chain and does at most one thing: enroll, train-and-commit the open round,
seal, or claim. It rebuilds everything from the chain plus its local store (the inner optimizer
state), so it can be killed at any time and restarted.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from syncline.blobstore import BlobRef, BlobStore
from syncline.blobstore.store import BlobUnavailable, put_signed
from syncline.chain.calls import ZERO_ADDRESS
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient, RoundView
from syncline.court.defence import AvailabilityResponder
from syncline.errors import ChainError, SynclineError
from syncline.observability import get_logger
from syncline.protocol.checkpoints import CheckpointManifest, manifest_alias, manifest_root_alias
from syncline.protocol.disk_round import encode_payload_file
from syncline.protocol.enums import RoundStatus, TaskStatus
from syncline.protocol.hashing import keccak
from syncline.protocol.seeds import round_seed
from syncline.protocol.signed_messages import Commitment
from syncline.protocol.spot_checks import kept_rounds
from syncline.protocol.state import TrainingState
from syncline.protocol.streaming import ArrayRegion
from syncline.run.agent_config import AgentConfig, ConfigError
from syncline.run.context import StateUnavailable, TaskContext, remove_payload_files
from syncline.run.gossip import TrainerReport, announce_commitment, announce_report
from syncline.run.local_store import append_record
from syncline.run.loop import pending_time, run_forever
from syncline.run.metrics import AgentMetrics
from syncline.run.state_file import StateFile, use_disk_state
from syncline.trainer.checkpoint_keeper import CheckpointKeeper
from syncline.trainer.inner_loop import CheckpointWriter, InnerLoop, RoundWork
from syncline.trainer.outbox import Outbox
from syncline.trainer.segments import encode_payload

log = get_logger("syncline.trainer")
# A state blob holds Q32 weights and momentum: 16 bytes per parameter. Rebuilding the state from a
# round's payloads costs about bits/8 bytes per parameter per submission; the cheaper path wins.
STATE_BYTES_PER_PARAM = 16


@dataclass
class TrainerAgent:
    cfg: AgentConfig
    signer: Signer
    market: MarketClient
    blobs: BlobStore
    metrics: AgentMetrics = field(default_factory=lambda: AgentMetrics("trainer"))
    ctx: TaskContext | None = None
    inner: InnerLoop | None = None
    _checked_rounds: set[int] = field(default_factory=set)
    _wall_started: float | None = None
    _train_seconds: float = 0.0
    _tokens: int = 0
    _steps: int = 0
    _bytes_sent: int = 0
    _checkpoint_bytes_sent: int = 0
    _rounds_committed: int = 0
    _optimizer_round: int | None = None
    _bytes_received: int = 0
    _sync_started: float = 0.0
    _state: TrainingState | StateFile | None = None
    _availability: AvailabilityResponder | None = None
    _outbox: Outbox | None = None
    _keeper: CheckpointKeeper | None = None
    # Rounds whose committee spot check of this trainer is settled (published, not drawn, not ours).
    _spot_settled: set[int] = field(default_factory=set)

    def run(self, *, max_iterations: int | None = None) -> None:
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        if self.cfg.metrics_port:
            self.metrics.serve(self.cfg.metrics_port)
        run_forever(
            self.step,
            poll_interval_s=self.cfg.poll_interval_s,
            role="trainer",
            metrics=self.metrics.loop,
            max_iterations=max_iterations,
        )

    # ------------------------------------------------------------------ one tick

    def step(self) -> bool:
        task_id = self.cfg.task_id
        t = self.market.task(task_id)
        if self.ctx is None:
            ctx = TaskContext.load(self.market, self.blobs, task_id)
            if ctx.spec.inner_steps != self.cfg.inner.inner_steps:
                raise ConfigError(
                    f"inner.inner_steps={self.cfg.inner.inner_steps} but task {task_id} requires H="
                    f"{ctx.spec.inner_steps}; gradients with another H are rejected"
                )
            self.ctx = ctx
        self._flush_outbox()
        me = self.market.trainer(task_id, self.signer.address)
        if t.status == TaskStatus.ENROLLING:
            if not me.enrolled:
                fragment, _ = self.market.enroll(self.signer, task_id)
                log.info("trainer.enrolled", task_id=task_id, fragment=fragment, trainer=self.signer.address)
            return False
        if t.status in (TaskStatus.SEALED, TaskStatus.CANCELLED):
            amount = self.market.claim(self.signer)
            if amount:
                log.info("trainer.claimed", wei=amount)
            return True
        if not me.enrolled:
            log.info("trainer.not_enrolled", task_id=task_id, status=t.status.name.lower())
            return True
        self._record_outcomes(t.current_round if t.status == TaskStatus.RUNNING else t.current_round + 1, me.fragment)
        self._serve_spot_checks(t.current_round if t.status == TaskStatus.RUNNING else t.current_round + 1, me.fragment)
        self._answer_availability(me.fragment)
        if t.status == TaskStatus.AWAITING_SEAL:
            return self._try_seal(t.last_closed_at)
        if me.evicted:
            return False  # wait for the seal to claim the rest of the stake
        round_ = t.current_round
        if self.market.submission(task_id, round_, me.fragment).trainer != ZERO_ADDRESS:
            return False
        deadline = t.round_opened_at + self.ctx.spec.round_duration_s
        if pending_time(self.market.w3) > deadline:
            return False
        self._train_and_commit(round_, me.fragment, me.shards, t.state_root, deadline)
        return False

    def _answer_availability(self, fragment: int) -> None:
        """Open any chunk a censorship claim's voters demand from this trainer's own submissions."""
        ctx = self.ctx
        assert ctx is not None
        if self._availability is None:
            self._availability = AvailabilityResponder(
                self.market,
                self.signer,
                ctx.task_id,
                fragment,
                own_payload=lambda round_: self._own_payload(round_, fragment),
                numel=ctx.layout.numel,
                bits=ctx.spec.gradient_bits,
                now=lambda: pending_time(self.market.w3),
                segment_published=self._segment_published,
            )
        try:
            self._availability.step()
        except (ChainError, SynclineError) as exc:
            log.info("trainer.availability_deferred", reason=str(exc).splitlines()[0][:160])

    def _segment_published(self, round_: int, segment: int) -> bool:
        """Whether a claimed segment's checkpoints are out: in an eager task they went out with the
        commitment (through the outbox, so once nothing is still waiting there); in an on-demand
        task they are published from the keeper now."""
        ctx = self.ctx
        assert ctx is not None
        if ctx.spec.verification_policy.on_demand:
            if self.cfg.misbehave == "withhold":
                log.warning("trainer.misbehaving", mode="withhold", round=round_, segment=segment)
                return False
            sent = self.keeper.publish_segment(self.outbox, round_, segment, ctx.spec.checkpoint_segments)
            if sent is None:
                log.warning("trainer.segment_not_kept", round=round_, segment=segment)
                return False
            self._checkpoint_bytes_sent += sent
            self._write_throughput()
        return self.outbox.flush() == 0

    def _serve_spot_checks(self, open_round: int, fragment: int) -> None:
        """Publish the segment the committee's draw names of each of this trainer's accepted
        submissions (on-demand tasks), before the witnesses escalate it on chain."""
        ctx = self.ctx
        assert ctx is not None
        spec = ctx.spec
        if not spec.verification_policy.on_demand:
            return
        window = kept_rounds(spec.challenge_window_s, spec.round_duration_s)
        for r in range(max(0, open_round - window), open_round):
            if r in self._spot_settled:
                continue
            rr = self.market.round(ctx.task_id, r)
            if rr.status != RoundStatus.FINALIZED:
                if rr.closed_at != 0:  # voided or carried forward: nothing to check
                    self._spot_settled.add(r)
                continue
            if not rr.accepted_mask >> fragment & 1:
                self._spot_settled.add(r)
                continue
            segment = ctx.drawn_segment(r, fragment, rr)
            if segment is None:
                self._spot_settled.add(r)
                continue
            try:
                published = self._segment_published(r, segment)
            except SynclineError as exc:  # the outbox holds them through an outage; retried next tick
                log.info("trainer.spot_check_deferred", round=r, segment=segment, reason=str(exc).splitlines()[0][:160])
                continue
            if published:
                log.info("trainer.spot_check_answered", round=r, fragment=fragment, segment=segment)
                self._spot_settled.add(r)

    @property
    def keeper(self) -> CheckpointKeeper:
        """This trainer's checkpoints of recent rounds, kept on disk (on-demand tasks)."""
        if self._keeper is None:
            self._keeper = CheckpointKeeper(self.cfg.state_dir / "checkpoints")
        return self._keeper

    @property
    def outbox(self) -> Outbox:
        """Uploads that wait out a blob-store outage on disk (:class:`Outbox`)."""
        if self._outbox is None:
            self._outbox = Outbox(self.blobs, self.cfg.state_dir / "outbox")
        return self._outbox

    def _flush_outbox(self) -> None:
        """Upload what an outage held back (best effort: the next tick tries again)."""
        try:
            waiting = self.outbox.flush()
        except OSError as exc:
            log.warning("trainer.outbox_unreadable", error=str(exc)[:160])
            return
        self.metrics.uploads_pending.set(waiting)

    def _own_payload(self, round_: int, fragment: int) -> bytes | None:
        ctx = self.ctx
        assert ctx is not None
        s = self.market.submission(ctx.task_id, round_, fragment)
        kept = self.outbox.own(s.payload_hash)
        if kept is not None:
            return kept
        try:
            return self.blobs.fetch(s.uri, expected_digest=s.payload_hash, max_bytes=ctx.max_payload_bytes)
        except SynclineError:
            return None

    # ------------------------------------------------------------------ work

    def _ensure_inner(self) -> InnerLoop:
        assert self.ctx is not None
        if self.inner is None:
            self.inner = InnerLoop(
                self.ctx.adapter,
                self.ctx.build_model(),
                self.ctx.layout,
                self.cfg.inner,
                device=self.cfg.device,
                dtype=self.cfg.dtype,
                gradient_checkpointing=self.cfg.gradient_checkpointing,
                deterministic=self.cfg.deterministic,
            )
        return self.inner

    def _saved_optimizers(self) -> list[tuple[int, Path]]:
        """``(round, path)`` of every AdamW state saved as ``optimizer/before-round-<round>.pt``, in round order."""
        files = (self.cfg.state_dir / "optimizer").glob("before-round-*.pt")
        return sorted((int(p.stem.removeprefix("before-round-")), p) for p in files)

    def _restore_optimizer(self, inner: InnerLoop, round_: int) -> None:
        """Load the AdamW state saved for the start of ``round_`` (a restart resumes bit-exactly)."""
        if self._optimizer_round == round_:
            return
        usable = [(r, p) for r, p in self._saved_optimizers() if r <= round_]
        if usable and inner.load(usable[-1][1]):
            log.info("trainer.resumed", optimizer_state=f"before round {usable[-1][0]}", round=round_)
        self._optimizer_round = round_

    def _save_optimizer(self, inner: InnerLoop, next_round: int) -> None:
        inner.save(self.cfg.state_dir / "optimizer" / f"before-round-{next_round}.pt")
        for r, old in self._saved_optimizers():
            if r < next_round - 1:
                old.unlink(missing_ok=True)
        self._optimizer_round = next_round

    def _train_and_commit(self, round_: int, fragment: int, shards: list[int], state_root: str, deadline: int) -> None:
        ctx = self.ctx
        assert ctx is not None
        try:
            state = self._sync_state(round_, fragment, state_root)
        except StateUnavailable as exc:
            if exc.outage:  # the store is down: the loop backs off and reports degraded health
                raise
            log.info("trainer.waiting_for_state", round=round_, reason=str(exc))
            return
        timings = {"sync_s": time.perf_counter() - self._sync_started}
        inner = self._ensure_inner()
        self._restore_optimizer(inner, round_)
        if self._wall_started is None:
            self._wall_started = time.perf_counter()  # utilization counts from the first round trained
        self.metrics.round.set(round_)
        interval = ctx.spec.checkpoint_interval_steps
        on_demand = ctx.spec.verification_policy.on_demand
        began = time.perf_counter()
        work = inner.run(
            state,
            [ctx.shard(i) for i in shards],
            seed=round_seed(ctx.task_id, round_, fragment),
            progress=sys.stderr.isatty(),
            checkpoint_interval=interval,
            # TESTS AND DEMOS ONLY: a lazy trainer trains half the steps and pads its checkpoints.
            train_steps=ctx.spec.inner_steps // 2 if self.cfg.misbehave == "lazy" else None,
            # On-demand checkpoints stream into the keeper (never held as bytes).
            checkpoint_sink=self._keep_checkpoint(round_) if on_demand else None,
        )
        timings["inner_s"] = work.train_seconds
        timings["checkpoints_s"] = time.perf_counter() - began - work.train_seconds
        if self.cfg.misbehave == "fake-gradient":  # honest checkpoints, a payload not derived from them
            work = replace(work, pseudo_gradient=torch.randn_like(work.pseudo_gradient) * 0.05)
        began = time.perf_counter()
        self._save_optimizer(inner, round_ + 1)
        timings["save_optimizer_s"] = time.perf_counter() - began
        # Through the outbox: a blob-store outage now delays the upload, never the commitment.
        ref, chunk_root = self._encode_and_upload(round_, work.pseudo_gradient, timings)
        # A claim names a round within the challenge window of its close and is answered within a
        # response window after it: keep the own payloads and checkpoints of that many rounds.
        kept = round_ - kept_rounds(ctx.spec.challenge_window_s, ctx.spec.round_duration_s)
        self.outbox.prune_own(kept)
        self.keeper.prune(kept)
        self._bytes_sent += ref.size
        began = time.perf_counter()
        checkpoint_root = self._publish_checkpoints(
            round_, fragment, interval, work.checkpoints, work.checkpoint_digests
        )
        timings["manifest_s"] = time.perf_counter() - began
        began = time.perf_counter()
        message, signature = self.market.sign_commitment(
            self.signer, ctx.task_id, round_, fragment, ref.digest, chunk_root, checkpoint_root, ref.uri
        )
        try:
            try:
                self._announce(message, signature)
            except BlobUnavailable as exc:  # gossip is for relayers and proofs; the chain comes first
                log.warning("trainer.announce_deferred", round=round_, error=str(exc)[:160])
            self.market.send_commitment(self.signer, message, signature)
            outcome = "committed"
        except ChainError as exc:
            if not self._recorded(message):
                outcome = "late" if exc.error_name == "SynclineSubmissionLate" else "refused"
                self.metrics.submissions.labels(outcome=outcome).inc()
                log.warning("trainer.commit_refused", round=round_, error=str(exc))
                return
            # Someone relayed our own announced commitment first: it is on record, uri included.
            log.info("trainer.commit_relayed", round=round_, fragment=fragment, error=exc.error_name)
            outcome = "committed"
        timings["commit_s"] = time.perf_counter() - began
        self._train_seconds += work.train_seconds
        wall = time.perf_counter() - (self._wall_started or time.perf_counter())
        steps = len(work.losses)
        self.metrics.submissions.labels(outcome=outcome).inc()
        self.metrics.steps_per_s.set(steps / work.train_seconds)
        self.metrics.tokens_per_s.set(work.tokens / work.train_seconds)
        self.metrics.train_loss.set(work.mean_loss)
        self.metrics.utilization.set(self._train_seconds / wall)
        log.info(
            "trainer.round",
            round=round_,
            fragment=fragment,
            loss=round(work.mean_loss, 4),
            steps_per_s=round(steps / work.train_seconds, 2),
            tokens_per_s=round(work.tokens / work.train_seconds),
            payload_kib=round(ref.size / 1024, 1),
            seconds_left=deadline - pending_time(self.market.w3),
        )
        append_record(
            self.cfg.state_dir,
            "rounds.jsonl",
            {
                "round": round_,
                "loss": work.mean_loss,
                "payload": ref.digest,
                "timings": {k: round(v, 3) for k, v in timings.items()},
                "committed_at": time.time(),
            },
        )
        self._report(ctx.task_id, round_, fragment, work)
        self._tokens += work.tokens
        self._rounds_committed += 1
        self._steps += steps
        self._write_throughput()

    def _keep_checkpoint(self, round_: int) -> Callable[[int, CheckpointWriter], str]:
        return lambda index, write: self.keeper.keep_stream(round_, index, write)

    def _encode_and_upload(
        self, round_: int, gradient: torch.Tensor, timings: dict[str, float]
    ) -> tuple[BlobRef, bytes]:
        """Quantize the outer gradient into the payload, upload it and keep a copy for
        availability demands; returns ``(reference, chunk root)``. With the state on disk the
        payload is encoded range by range into a file and uploaded from it (``put_file``)."""
        ctx = self.ctx
        assert ctx is not None
        began = time.perf_counter()
        if not self._disk_state:
            payload, chunk_root = encode_payload(gradient, ctx.spec.gradient_bits)
            timings["encode_s"] = time.perf_counter() - began
            began = time.perf_counter()
            ref = self.outbox.put(payload)
            self.outbox.keep_own(round_, payload)
            timings["upload_s"] = time.perf_counter() - began
            return ref, chunk_root
        path = self.cfg.state_dir / "payloads" / f"own-{round_}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        encoded = encode_payload_file(ArrayRegion(gradient.numpy()), ctx.spec.gradient_bits, str(path))
        timings["encode_s"] = time.perf_counter() - began
        began = time.perf_counter()
        ref = self.outbox.put_file(path)
        self.outbox.keep_own_file(round_, path, ref.digest)
        path.unlink(missing_ok=True)
        timings["upload_s"] = time.perf_counter() - began
        return ref, encoded.chunk_root

    @property
    def _disk_state(self) -> bool:
        assert self.ctx is not None
        return use_disk_state(self.ctx.layout.numel, self.cfg.state_on_disk)

    def _write_throughput(self) -> None:
        """What this trainer trained and sent so far (the demo's receipt reads it)."""
        ctx = self.ctx
        if ctx is None or not self._train_seconds:
            return
        wall = time.perf_counter() - (self._wall_started or time.perf_counter())
        (self.cfg.state_dir / "throughput.json").write_text(
            json.dumps(
                {
                    "trainer": self.signer.address,
                    "rounds": self._rounds_committed,
                    "steps_per_s": round(self._steps / self._train_seconds, 3),
                    "tokens_per_s": round(self._tokens / self._train_seconds, 1),
                    "train_seconds": round(self._train_seconds, 2),
                    "wall_seconds": round(wall, 2),
                    "utilization": round(self._train_seconds / wall, 4) if wall else 0.0,
                    "bytes_sent": self._bytes_sent,
                    "checkpoint_bytes_sent": self._checkpoint_bytes_sent,
                    "bytes_received": self._bytes_received,
                    "parameters": ctx.layout.numel,
                    "device": self.cfg.device,
                    "dtype": self.cfg.dtype,
                    "checkpoints": ctx.spec.verification_policy.checkpoints,
                }
            )
        )

    def _report(self, task_id: int, round_: int, fragment: int, work: RoundWork) -> None:
        """Announce the round's training loss (self-reported; the API plots it). Best effort."""
        report = TrainerReport(
            task_id, round_, fragment, work.mean_loss, len(work.losses), work.tokens, work.train_seconds
        )
        try:
            announce_report(self.blobs, report, self.signer)
        except SynclineError as exc:
            log.warning("trainer.report_failed", round=round_, error=str(exc))

    def _recorded(self, message: Commitment) -> bool:
        """Whether exactly our signed commitment is on record (a relayed copy counts as ours)."""
        try:
            return self.market.commitment_recorded(message)
        except ChainError:
            return False

    def _announce(self, message: Commitment, signature: bytes) -> None:
        """Announce the signed commitment (gossip) before committing it on chain."""
        if self.cfg.misbehave != "equivocate":
            announce_commitment(self.blobs, message, signature)
            return
        # TESTS AND DEMOS ONLY: announce a different signed commitment than the one committed.
        other = replace(message, payload_hash=keccak(b"equivocation" + message.payload_hash))
        other_signature = self.market.sign_commitment(
            self.signer,
            other.task_id,
            other.round,
            other.fragment,
            other.payload_hash,
            other.chunk_root,
            other.checkpoint_root,
            other.uri,
        )[1]
        announce_commitment(self.blobs, other, other_signature)
        log.warning("trainer.misbehaving", mode="equivocate", round=message.round)

    def _publish_checkpoints(
        self, round_: int, fragment: int, interval: int, checkpoints: Sequence[bytes], kept: Sequence[str] = ()
    ) -> bytes:
        """Put the checkpoint manifest (aliased by position and by root, each in this trainer's own
        signed slot, which no other writer can displace) and, in an eager task, every checkpoint
        blob; returns the ``checkpointRoot`` to commit. Publishing precedes the commitment, so a
        challenger can fetch the manifest as soon as the commitment is on chain. In an on-demand
        task the checkpoints stay in the keeper until a spot-check draw or a claim names their
        segment (the manifest then lists no locators: readers fetch by digest)."""
        ctx = self.ctx
        assert ctx is not None
        on_demand = ctx.spec.verification_policy.on_demand
        if on_demand:
            digests = tuple(kept) if kept else self.keeper.keep(round_, checkpoints)
            uris = ("",) * len(digests)
            size = 0
        else:
            refs = [self.outbox.put(c) for c in checkpoints]
            digests = tuple(r.digest for r in refs)
            uris = tuple(r.uri for r in refs)
            size = sum(r.size for r in refs)
        manifest = CheckpointManifest(
            interval=interval,
            inner_steps=ctx.spec.inner_steps,
            hashes=tuple(bytes.fromhex(d[2:]) for d in digests),  # a blob's digest is its checkpoint hash
            uris=uris,
        )
        root = manifest.root
        data = manifest.to_json()
        for alias in (manifest_root_alias(root), manifest_alias(ctx.task_id, round_, fragment)):
            put_signed(self.outbox, data, alias, self.signer.account)
        self._checkpoint_bytes_sent += size + 2 * len(data)
        log.info(
            "trainer.checkpoints",
            round=round_,
            fragment=fragment,
            checkpoints=len(digests),
            published_kib=round(size / 1024, 1),
            kept=on_demand,
            root="0x" + root.hex(),
        )
        return root

    def _sync_state(self, round_: int, fragment: int, state_root: str) -> TrainingState | StateFile:
        """The state to train from, fetched with as few bytes as possible.

        If the trainer holds the state the last round started from and the round's payloads are
        smaller than a state blob, it re-derives the new state from that round's committed int8
        payloads (about 1 byte per parameter each) with the same
        deterministic aggregation and outer step the witnesses ran, and checks the state root the
        chain finalized. Otherwise (first round, a restart, a mismatch) it downloads the full state
        blob (16 bytes per parameter: Q32 weights and momentum). With the state on disk (large
        models) both happen in files, and the previous state's file is dropped once the new one is
        there.
        """
        ctx = self.ctx
        assert ctx is not None
        self._sync_started = time.perf_counter()
        if self._state is not None and self._state.state_root_hex == state_root.lower():
            return self._state
        if self._state is not None and round_ > 0:
            rr = self.market.round(ctx.task_id, round_ - 1)
            payload_bytes = bin(rr.committed_mask).count("1") * ctx.spec.gradient_bits // 8
            derived = (
                self._derive_from_payloads(round_ - 1, rr, fragment, state_root)
                if payload_bytes < STATE_BYTES_PER_PARAM
                else None
            )
            if derived is not None:
                self._hold(derived)
                return derived
        if self._disk_state:
            states = self.cfg.state_dir / "states"
            states.mkdir(parents=True, exist_ok=True)
            fetched, size = ctx.fetch_state_file(state_root, states / f"{state_root.lower()}.safetensors")
            self._bytes_received += size
            self._hold(fetched)
            return fetched
        state, size = ctx.fetch_state_sized(state_root)
        self._bytes_received += size
        self._state = state
        return state

    def _hold(self, state: TrainingState | StateFile) -> None:
        """Train from ``state`` from now on; a state file held before is deleted."""
        old = self._state
        if isinstance(old, StateFile) and not (isinstance(state, StateFile) and state.path == old.path):
            old.remove()
        self._state = state

    def _derive_from_payloads(
        self, round_: int, rr: RoundView, fragment: int, state_root: str
    ) -> TrainingState | StateFile | None:
        """The state round ``round_`` (read as ``rr``) finalized with, recomputed from its payloads."""
        ctx = self.ctx
        assert ctx is not None and self._state is not None
        if rr.status != RoundStatus.FINALIZED or rr.state_root.lower() != state_root.lower():
            return None
        if isinstance(self._state, StateFile):
            return self._derive_on_disk(round_, rr, fragment, state_root, self._state)
        subs = ctx.committed_submissions(round_, rr.committed_mask)
        if any(s.payload is None for s in subs):
            return None
        result = ctx.compute_round(self._state, subs)
        self._bytes_received += sum(len(s.payload or b"") for s in subs if s.fragment != fragment)
        if "0x" + result.state_root.hex() != state_root.lower():
            log.info("trainer.state_sync_mismatch", round=round_, fallback="full state blob")
            return None
        return result.state

    def _derive_on_disk(
        self, round_: int, rr: RoundView, fragment: int, state_root: str, previous: StateFile
    ) -> StateFile | None:
        """:meth:`_derive_from_payloads` with the state and payloads in files."""
        ctx = self.ctx
        assert ctx is not None
        payloads = ctx.committed_payload_files(round_, self.cfg.state_dir / "payloads", rr.committed_mask)
        if any(p.path is None for p in payloads):
            remove_payload_files(payloads)
            return None
        self._bytes_received += sum(
            os.path.getsize(p.path) for p in payloads if p.path is not None and p.fragment != fragment
        )
        states = self.cfg.state_dir / "states"
        self._state = None  # updated in place (one state file on disk): on a mismatch, download
        derived, result = ctx.compute_round_file(
            previous, payloads, states / f"derived-{round_}.safetensors", in_place=True
        )
        if "0x" + result.state_root.hex() != state_root.lower():
            log.info("trainer.state_sync_mismatch", round=round_, fallback="full state blob")
            derived.remove()
            return None
        return derived.move_to(states / f"{state_root.lower()}.safetensors")

    def _record_outcomes(self, open_round: int, fragment: int) -> None:
        """Once a round closed, count whether this trainer's submission was accepted."""
        assert self.ctx is not None
        for r in range(max(0, open_round - 2), open_round):
            if r in self._checked_rounds:
                continue
            sub = self.market.submission(self.ctx.task_id, r, fragment)
            if sub.trainer == ZERO_ADDRESS:
                self._checked_rounds.add(r)
                continue
            rr = self.market.round(self.ctx.task_id, r)
            if rr.closed_at == 0:
                continue
            accepted = bool(rr.accepted_mask >> fragment & 1)
            self.metrics.submissions.labels(outcome="accepted" if accepted else "rejected").inc()
            self._checked_rounds.add(r)

    def _try_seal(self, last_closed_at: int) -> bool:
        assert self.ctx is not None
        if pending_time(self.market.w3) >= last_closed_at + self.ctx.spec.challenge_window_s:
            try:
                self.market.seal(self.signer, self.ctx.task_id)
                log.info("trainer.sealed", task_id=self.ctx.task_id)
            except ChainError as exc:
                log.info("trainer.seal_skipped", reason=exc.error_name)
        return False
