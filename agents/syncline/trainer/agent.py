"""The trainer agent: ``syncline trainer run --config trainer.yaml``.

Each tick it reads the chain and does at most one thing: enroll, train-and-commit the open round,
seal, or claim. It rebuilds everything from the chain plus its local store (the inner optimizer
state), so it can be killed at any time and restarted.

Rounds close when the work is in (early close): once every active trainer has committed, the
round's result is fixed by its payloads, and the witnesses vote at once. A trainer with
``train_ahead`` (the default) does not wait for their vote either: it derives the next state from
those payloads (the witnesses' own deterministic computation) and trains the next round while they
vote. The work is committed only if the chain then finalizes exactly that state and its shards did
not change; otherwise it is dropped and the round is trained again from the finalized state.

For a large model (``state_on_disk``, by default from 4M parameters up) the state, the payloads
and the on-demand checkpoints live in files and are streamed (:mod:`syncline.run.state_file`): a
trainer holds one state file, and deriving the next state (after a round, or ahead of it) updates
that file in place with the round's payload files.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from syncline.blobstore import BlobStore
from syncline.blobstore.store import BlobRef, BlobUnavailable, put_signed
from syncline.chain import enrollment
from syncline.chain.calls import ZERO_ADDRESS
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient, RoundView, TaskView, TrainerView
from syncline.confidential.enclave import AgentEnclave, agent_enclave, check_task_policy
from syncline.court.defence import AvailabilityResponder
from syncline.errors import ChainError, KeyConfigError, SynclineError
from syncline.modality.language import token_count
from syncline.observability import get_logger
from syncline.privacy.accounting import PrivacyPlan
from syncline.privacy.committee import CommitteeKeys
from syncline.privacy.dpsgd import DpSgd
from syncline.privacy.noise import RoundNoise, load_or_create_secret
from syncline.privacy.opening import encode_opening, opening_alias
from syncline.privacy.sealed import Binding, seal_opening
from syncline.protocol.checkpoints import CheckpointManifest, manifest_alias, manifest_root_alias
from syncline.protocol.disk_round import PayloadFile, encode_payload_file
from syncline.protocol.enums import Modality, RoundStatus, TaskStatus
from syncline.protocol.fixed_point import from_fixed
from syncline.protocol.hashing import keccak
from syncline.protocol.quantization import QuantizedGradient, dequantize
from syncline.protocol.seeds import round_seed
from syncline.protocol.signed_messages import Commitment
from syncline.protocol.spot_checks import (
    MIN_CHALLENGE_BLOCKS,
    checkpoints_for_segment,
    claims_over,
    filing_open,
    kept_rounds,
)
from syncline.protocol.state import TrainingState
from syncline.protocol.streaming import ArrayRegion
from syncline.run.agent_config import AgentConfig
from syncline.run.context import StateUnavailable, TaskContext, fetch_by_digest, payload_file_path
from syncline.run.gossip import TrainerReport, announce_commitment, announce_report
from syncline.run.local_store import append_record, claim_state_dir
from syncline.run.loop import NewBlock, TaskNotPosted, pending_block, pending_time, run_forever
from syncline.run.metrics import AgentMetrics
from syncline.run.reveal import commit_phase_closed
from syncline.run.state_file import StateFile, use_disk_state
from syncline.trainer.checkpoint_keeper import CheckpointKeeper
from syncline.trainer.inner_loop import CheckpointWriter, InnerLoop, RoundWork
from syncline.trainer.outbox import Outbox
from syncline.trainer.segments import encode_payload

log = get_logger("syncline.trainer")


@dataclass(frozen=True)
class _OtherNoise:
    """TESTS AND DEMOS ONLY (``--misbehave other-noise``): a DP trainer whose noise is not drawn
    from the seeds it commits to."""

    committed: RoundNoise

    def step_seed(self, step: int) -> int:
        return self.committed.step_seed(step) ^ 1


# While it trains (the open round, or the next one ahead), a trainer still answers every training
# claim and availability demand against it (within challengeWindow / 2 of the claim, or it is
# convicted: the demo's window is 5 s, so 2 s) and, training ahead, serves the committee's spot
# checks of the round being finalized (their publication deadline is half a challenge window after
# the close), between two inner steps: one look at the chain at most every DUTIES_WHILE_TRAINING_S.
# A response window needs at least ANSWER_WINDOW_MIN_S: one such look and one block for the answer.
DUTIES_WHILE_TRAINING_S = 1.0
ANSWER_WINDOW_MIN_S = 2
# A state blob holds Q32 weights and momentum: 16 bytes per parameter. Rebuilding the state from a
# round's payloads costs about bits/8 bytes per parameter per submission; the cheaper path wins.
STATE_BYTES_PER_PARAM = 16
# How often a trainer that waits on the chain in the middle of a round's cycle (for the other
# trainers' commitments, for the round it trained ahead to open) asks for the block number; it
# reads the round or the task only when a new block arrived.
# It waits so at most FAST_WAIT_S before it lets the next tick decide. These waits are on every
# trainer's critical path (half a poll on average after the block that ends them), so for their
# first FAST_POLL_FOR_S the poll is finer than the agent loop's own wake-up cadence (NewBlock,
# 0.1 s), then it is that cadence (a node is asked at most 50 times a second, and only briefly).
FAST_POLL_S = 0.02
FAST_POLL_FOR_S = 1.0
SLOW_POLL_S = 0.1
FAST_WAIT_S = 5.0


def poll_pause(waited_s: float) -> float:
    """Seconds to sleep before the next look at the chain, ``waited_s`` into a wait."""
    return FAST_POLL_S if waited_s < FAST_POLL_FOR_S else SLOW_POLL_S


@dataclass(frozen=True)
class StagedWork:
    """A trained round's outputs made ready to commit: the AdamW state after it saved, the payload
    encoded, uploaded (content-addressed) and kept, its checkpoints kept (on demand) or uploaded
    (eager). None of it names the round on the chain or in an alias, so a round trained ahead
    whose work is dropped leaves nothing anyone could hold against the trainer."""

    # The payload's bytes (state in memory), or the file holding it (state on disk), kept as one
    # of the round's payloads for deriving the next state.
    payload: bytes | Path
    chunk_root: bytes
    ref: BlobRef
    checkpoint_digests: tuple[str, ...]
    checkpoint_uris: tuple[str, ...]
    checkpoint_bytes: int
    seconds: float
    # The kept checkpoints' flush to disk, under way in the background: done before committing.
    flushing: Future[None] | None = None
    # Seconds per part of the round's work, for rounds.jsonl (inner_s, encode_s, upload_s, ...).
    timings: dict[str, float] = field(default_factory=dict)

    def wait_durable(self) -> None:
        if self.flushing is not None:
            self.flushing.result()


@dataclass(frozen=True)
class TrainedAhead:
    """A round trained before it opened: from ``start_root`` (the state the previous round's
    committed payloads determine) on ``shards``. Used only if the chain opens the round with
    exactly that state root and those shards. With the state on disk, ``state`` is the trainer's
    one state file, already updated to ``start_root``."""

    round: int
    start_root: str
    shards: tuple[int, ...]
    state: TrainingState | StateFile
    work: RoundWork
    bytes_received: int
    staged: StagedWork


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
    # The state this trainer trains from: in memory, or its one state file (state on disk).
    _state: TrainingState | StateFile | None = None
    # An in-memory state and its root, known without hashing it again (computed by the round that
    # produced it, or checked when it was fetched): see :meth:`_root_of`.
    _known_root: tuple[TrainingState, str] | None = None
    _availability: AvailabilityResponder | None = None
    _outbox: Outbox | None = None
    _keeper: CheckpointKeeper | None = None
    # Rounds whose committee spot check of this trainer is settled (published, not drawn, not ours).
    _spot_settled: set[int] = field(default_factory=set)
    # The DP noise openings this trainer has put in its outbox, (round, fragment, segment) -> the
    # committee keys each is sealed to (re-sealed when the chain has more: :meth:`_reseal_openings`).
    _openings_sent: dict[tuple[int, int, int], frozenset[bytes]] = field(default_factory=dict)
    _committee_keys: CommitteeKeys | None = None
    # The next round, trained ahead from the state a complete round's payloads determine.
    _ahead: TrainedAhead | None = None
    _duties_at: float = 0.0
    # (fragment, round awaiting its finalization) while a round is trained ahead: duties between steps
    _ahead_duty: tuple[int, int] | None = None
    # The fragment whose claims and demands are answered between the inner steps of the round in training
    _training_fragment: int | None = None
    # Payloads this trainer holds for the round awaiting completion, by payload hash: its own and
    # the others', fetched (hash-checked) as their commitments appear; in memory, or in files in
    # ``state_dir/payloads`` with the state on disk.
    _payloads: dict[str, bytes] = field(default_factory=dict)
    _payload_files: dict[str, Path] = field(default_factory=dict)
    _payloads_round: int | None = None
    _flusher: ThreadPoolExecutor | None = None
    # Sends the self-reported round reports (best effort) off the round's critical path.
    _reporter: ThreadPoolExecutor | None = None
    # Runs the duties of a round trained ahead beside its inner steps (one look at a time).
    _duty_runner: ThreadPoolExecutor | None = None
    _duty_running: Future[None] | None = None
    # (open round, fragment) whose tick duties (outcomes, spot checks, pruning) are still to do
    _chores: tuple[int, int] | None = None
    # The own payloads and checkpoints of rounds before this one are pruned (no claim can need them).
    _kept_from: int = 0
    # (chain time, block) at which this trainer first saw a kept round's filing window closed
    _filing_closed: dict[int, tuple[int, int]] = field(default_factory=dict)
    _tick_began: float = 0.0
    _enrolling_hint: int | None = None
    _enrolling_hint_at: float = 0.0
    _awaiting_task: TaskNotPosted | None = None
    # A Confidential task's enclave (key, measurement, attestation report), from the config files.
    _enclave: AgentEnclave | None = field(default=None, repr=False)

    def _require_enclave(self) -> AgentEnclave:
        if self._enclave is None:
            raise KeyConfigError(
                f"task {self.cfg.task_id} is Confidential: set enclave_keystore and enclave_attestation"
            )
        return self._enclave

    @property
    def _awaiting(self) -> TaskNotPosted:
        if self._awaiting_task is None:
            self._awaiting_task = TaskNotPosted(self.market.task_count, self.cfg.task_id, role="trainer")
        return self._awaiting_task

    def run(self, *, max_iterations: int | None = None) -> None:
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        with claim_state_dir(self.cfg.state_dir):
            if self.cfg.metrics_port:
                self.metrics.serve(self.cfg.metrics_port)
            run_forever(
                self.step,
                poll_interval_s=self.cfg.poll_interval_s,
                role="trainer",
                metrics=self.metrics.loop,
                max_iterations=max_iterations,
                wake=NewBlock(self.market.w3),
            )

    # ------------------------------------------------------------------ one tick

    def step(self) -> bool:
        self._tick_began = time.perf_counter()
        task_id = self.cfg.task_id
        if self._awaiting.waiting():
            return False
        t = self.market.task(task_id)
        closed = self._enrollment_closed(t) if t.status == TaskStatus.ENROLLING else None
        if closed is not None:
            return closed
        if self.ctx is None:
            self._enclave = agent_enclave(self.cfg)
            enclave_key = self._enclave.key if self._enclave is not None else None
            self.ctx = TaskContext.load(self.market, self.blobs, task_id, enclave=enclave_key)
            answer_window = self.ctx.spec.challenge_window_s // 2
            if answer_window < ANSWER_WINDOW_MIN_S:  # a claim could convict this trainer however it answers
                log.warning("trainer.answer_window_short", answer_window_s=answer_window, needs_s=ANSWER_WINDOW_MIN_S)
        self._flush_outbox()
        self._reveal()
        me = self.market.trainer(task_id, self.signer.address)
        if t.status == TaskStatus.ENROLLING:
            if not me.enrolled and self.ctx.spec.confidential is not None:
                e = self._require_enclave()  # a Confidential task admits attested enclaves only
                check_task_policy(self.market, task_id, self.ctx.spec)  # the allow-list the spec names
                fragment, _ = self.market.enroll_attested(self.signer, task_id, e.key.pubkey, e.measurement, e.report)
                log.info("trainer.enrolled", task_id=task_id, fragment=fragment, enclave="0x" + e.key.pubkey.hex())
                t = self.market.task(task_id)
            elif not me.enrolled:
                fragment, _ = self.market.enroll(self.signer, task_id)
                log.info("trainer.enrolled", task_id=task_id, fragment=fragment, trainer=self.signer.address)
                t = self.market.task(task_id)
            self._hint_enrolling(t)
            return False
        if t.status in (TaskStatus.SEALED, TaskStatus.CANCELLED):
            amount = self.market.claim(self.signer)
            if amount:
                log.info("trainer.claimed", wei=amount)
            return True
        if not me.enrolled:
            log.info("trainer.not_enrolled", task_id=task_id, status=t.status.name.lower())
            return True
        open_round = t.current_round if t.status == TaskStatus.RUNNING else t.current_round + 1
        self._record_outcomes(open_round, me.fragment)
        self._serve_spot_checks(open_round, me.fragment)
        self._answer_availability(me.fragment)
        self._prune_kept(open_round)
        if t.status == TaskStatus.AWAITING_SEAL:
            return self._try_seal(t)
        if me.evicted:
            return False  # wait for the seal to claim the rest of the stake
        round_ = t.current_round
        if self.market.submission(task_id, round_, me.fragment).trainer != ZERO_ADDRESS:
            self._train_ahead(t, me)
            return False
        deadline = self.market.commit_deadline(task_id)  # extended once when nobody committed
        if pending_time(self.market.w3) > deadline:
            return False
        if self._train_and_commit(round_, me.fragment, me.shards, t.state_root, deadline):
            self._train_ahead(t, me)
        return False

    def _enrollment_closed(self, t: TaskView) -> bool | None:
        """Past the enrollment deadline someone must act (anyone may; chain/enrollment.py): with at
        least ``min_trainers`` start the run (False: not done, the next tick trains round 0);
        under-filled, cancel the task, withdraw the stake and say so in one line (True: done).
        None before the deadline."""
        done = enrollment.act_if_closed(self.market, self.signer, t, pending_time(self.market.w3), "trainer", log)
        return None if done is None else done == "cancelled"

    def _hint_enrolling(self, t: TaskView) -> None:
        """While the run waits for trainers, say so (when the count changes, else once a minute):
        a lone trainer otherwise just sits at ``min_trainers``."""
        if t.status != TaskStatus.ENROLLING or self.ctx is None:
            return
        spec, now = self.ctx.spec, time.monotonic()
        if self._enrolling_hint == t.enrolled and now - self._enrolling_hint_at < 60.0:
            return
        self._enrolling_hint, self._enrolling_hint_at = t.enrolled, now
        starts = (
            f"when {spec.max_trainers} have enrolled"
            if spec.min_trainers == spec.max_trainers
            else f"at {spec.max_trainers}, or at the enrollment deadline with at least {spec.min_trainers}"
        )
        log.info(
            "trainer.waiting_for_trainers",
            task_id=t.task_id,
            enrolled=t.enrolled,
            min_trainers=spec.min_trainers,
            max_trainers=spec.max_trainers,
            hint=f"the run starts {starts}: start more trainers (`syncline network up`, or "
            "`syncline trainer run --dev-account N` for each of dev accounts 1-3)",
        )

    def _train_ahead(self, t: TaskView, me: TrainerView) -> None:
        """Train ahead (:meth:`_train_ahead_once`), round after round while each one's work is
        committed as soon as it opens and the other trainers' follows: no tick of the loop between
        two rounds, only the duties a tick would do that a round trained ahead leaves due."""
        ahead = self._train_ahead_once(t, me)
        while ahead is not None:
            self._tick_began = time.perf_counter()
            self._flush_outbox()
            t, me = ahead
            # The rest of a tick's duties are done beside the next round's training.
            self._chores = (t.current_round, me.fragment)
            ahead = self._train_ahead_once(t, me)

    def _train_ahead_once(self, t: TaskView, me: TrainerView) -> tuple[TaskView, TrainerView] | None:
        """Our work for the open round is in. Once every active trainer's is (the round's work is
        complete), the round's result is fixed by its committed payloads: derive the next state
        from them, as the witnesses do, and train the next round now, while they vote. Returns
        the chain's view of the next round when it opened, our work for it is committed and the
        round's work is complete (the next round can be trained ahead at once), else None."""
        ctx = self.ctx
        assert ctx is not None
        round_, task_id = t.current_round, ctx.task_id
        nxt = round_ + 1
        if not self.cfg.train_ahead or nxt >= ctx.spec.rounds or self.cfg.misbehave is not None:
            return None
        if self._ahead is not None and self._ahead.round == nxt:
            return None
        # Only from the state this trainer trained the open round from (a restart waits instead).
        if self._state is None or self._root_of(self._state) != t.state_root.lower():
            return None
        waited = time.perf_counter()
        if not self._await_work_complete(round_):
            return None
        began = time.perf_counter()
        rr = self.market.round(task_id, round_)
        derived = self._derive_ahead(round_, rr.committed_mask, me.fragment)
        if derived is None:
            return None  # a payload is not fetchable (yet): the witnesses decide; wait for them
        state, root, received, fetch_s = derived
        derive_s = time.perf_counter() - began
        self._duties_at = time.perf_counter()
        self._ahead_duty = (me.fragment, round_)
        training = time.perf_counter()
        work = self._train(state, nxt, me.fragment, me.shards, ahead=True)
        train_wall_s = time.perf_counter() - training
        # The in-memory AdamW state is now the one after `nxt`: a dropped run reloads the saved one.
        self._optimizer_round = nxt + 1
        # Ready the work to commit while the witnesses may still be voting on the round before it.
        staged = self._stage(nxt, work, {"sync_s": derive_s})
        self._ahead = TrainedAhead(nxt, root, tuple(me.shards), state, work, received, staged)
        log.info(
            "trainer.trained_ahead",
            round=nxt,
            start_root=root[:18],
            tick_s=round(waited - self._tick_began, 2),  # the tick's chain reads and duties before it
            complete_wait_s=round(began - waited, 2),  # the other trainers' commitments
            derive_s=round(derive_s, 2),
            fetch_s=round(fetch_s, 2),
            train_s=round(work.train_seconds, 2),
            train_wall_s=round(train_wall_s, 2),  # with the round's set-up, checkpoints and duties
            stage_s=round(staged.seconds, 2),
        )
        return self._commit_ahead_when_open(nxt, me.fragment)

    def _await_work_complete(self, round_: int) -> bool:
        """Wait (a bounded while, serving duties) until every active trainer committed to the open
        ``round_``, fetching their payloads as their commitments appear. One cheap call per look
        instead of a whole tick: this wait is on every trainer's critical path."""
        ctx = self.ctx
        assert ctx is not None
        began = time.perf_counter()
        until = began + FAST_WAIT_S
        seen: int | None = None
        while True:
            block = int(self.market.w3.eth.block_number)
            if block != seen:  # a commitment arrives in a new block: look only then
                seen = block
                if self.market.round_work_complete(ctx.task_id, round_):
                    # The commit phase closed: reveal ours, then fetch the others' as they come.
                    self._reveal()
                    self._await_reveals(round_, time.perf_counter() + FAST_WAIT_S)
                    return True
            self._duties_now()
            if time.perf_counter() >= until:
                return False
            time.sleep(poll_pause(time.perf_counter() - began))

    def _await_reveals(self, round_: int, until: float) -> None:
        """Fetch the complete ``round_``'s payloads as their trainers reveal them (each reveals its
        own once the commit phase closed), until all are held or ``until`` (perf_counter) passes."""
        began = time.perf_counter()
        while not self._prefetch_payloads(round_) and time.perf_counter() < until:
            self._duties_now()
            time.sleep(poll_pause(time.perf_counter() - began))

    def _derive_ahead(
        self, round_: int, committed_mask: int, fragment: int
    ) -> tuple[TrainingState | StateFile, str, int, float] | None:
        """The state the complete ``round_``'s committed payloads determine, derived from the state
        it started from as the witnesses derive it: ``(state, its root, bytes received, seconds
        fetching)``, or None while a payload cannot be fetched. With the state on disk the
        trainer's one state file is updated in place: from then on it holds that state, which the
        chain has not finalized yet (:meth:`_drop_ahead` deletes it if the chain finalizes another)."""
        ctx, state = self.ctx, self._state
        assert ctx is not None and state is not None
        began = time.perf_counter()
        if isinstance(state, TrainingState):
            subs = ctx.committed_submissions(round_, committed_mask, known=self._held_payloads(round_))
            if any(s.payload is None for s in subs):
                return None
            fetch_s = time.perf_counter() - began
            result = ctx.compute_round(state, subs)
            received = sum(len(s.payload or b"") for s in subs if s.fragment != fragment)
            root = self._knows_root(result.state, result.state_root)
            return result.state, root, received, fetch_s
        fetched = self._fetch_payload_files(round_, committed_mask, fragment)
        if fetched is None:
            return None
        payloads, received = fetched
        fetch_s = time.perf_counter() - began
        self._state = None  # updated in place: if the computation fails, the next sync downloads
        derived, on_disk = ctx.compute_round_file(
            state, payloads, self._states_dir / f"ahead-{round_ + 1}.safetensors", in_place=True
        )
        self._state = derived
        return derived, "0x" + on_disk.state_root.hex(), received, fetch_s

    def _fetch_payload_files(
        self, round_: int, committed_mask: int, fragment: int
    ) -> tuple[list[PayloadFile], int] | None:
        """The committed payloads of ``round_`` in files (those held already, the others fetched)
        and the bytes fetched of the other trainers' ones; None when one cannot be fetched."""
        ctx = self.ctx
        assert ctx is not None
        held = self._held_payload_files(round_)
        payloads = ctx.committed_payload_files(round_, self._payloads_dir, committed_mask, known=held)
        for p in payloads:
            if p.path is not None:
                held["0x" + p.payload_hash.hex()] = Path(p.path)
        if any(p.path is None for p in payloads):
            return None
        received = sum(os.path.getsize(p.path) for p in payloads if p.path is not None and p.fragment != fragment)
        return payloads, received

    def _held_payloads(self, round_: int) -> dict[str, bytes]:
        self._payloads_of(round_)
        return self._payloads

    def _held_payload_files(self, round_: int) -> dict[str, Path]:
        self._payloads_of(round_)
        return self._payload_files

    def _payloads_of(self, round_: int) -> None:
        """Hold the payloads of ``round_`` from now on: those of another round are dropped."""
        if self._payloads_round != round_:
            for path in self._payload_files.values():
                path.unlink(missing_ok=True)
            self._payloads, self._payload_files, self._payloads_round = {}, {}, round_

    def _prefetch_payloads(self, round_: int) -> bool:
        """Fetch (hash-checked) the payloads committed to ``round_`` that are not yet held; True
        once every one is held. Best effort: one not revealed yet is fetched on a later look.
        Nothing is fetched for the task's last round: no state is derived from it (True)."""
        ctx = self.ctx
        assert ctx is not None
        if round_ + 1 >= ctx.spec.rounds:
            return True
        held, files = self._held_payloads(round_), self._held_payload_files(round_)
        on_disk = self._disk_state
        complete = True
        try:
            mask = self.market.round(ctx.task_id, round_).committed_mask
        except ChainError as exc:
            log.info("trainer.prefetch_deferred", round=round_, reason=str(exc).splitlines()[0][:160])
            return False
        for fragment in range(256):
            if not mask >> fragment & 1:
                continue
            try:
                s = self.market.submission(ctx.task_id, round_, fragment)
                digest = s.payload_hash.lower()
                if digest in held or (digest in files and files[digest].exists()):
                    continue
                if on_disk:
                    files[digest] = ctx.fetch_payload_file(round_, s, self._payloads_dir)
                else:
                    held[digest] = self.blobs.fetch(s.uri, expected_digest=digest, max_bytes=ctx.max_payload_bytes)
            except (ChainError, SynclineError):
                complete = False  # not revealed yet (or the store is down): a later look fetches it
        return complete

    def _commit_ahead_when_open(self, round_: int, fragment: int) -> tuple[TaskView, TrainerView] | None:
        """The round trained ahead is done: wait (a bounded while, serving duties) for the chain to
        open it, and commit the work at once if it opened from the state it was trained from (the
        check :meth:`_train_and_commit` makes), then wait for the other trainers' work. Returns
        the round's task and trainer views once its work is complete, else None (the next tick
        decides)."""
        ctx = self.ctx
        assert ctx is not None
        until = time.perf_counter() + FAST_WAIT_S
        waited = time.perf_counter()
        seen: int | None = None
        while True:
            block = int(self.market.w3.eth.block_number)
            if block != seen:  # the round opens in a new block: look only then
                seen = block
                t = self.market.task(ctx.task_id)
                if t.status != TaskStatus.RUNNING or t.current_round > round_:
                    return None
                if t.current_round == round_:
                    break
            self._duties_now()
            if time.perf_counter() >= until:
                return None
            time.sleep(poll_pause(time.perf_counter() - waited))
        me = self.market.trainer(ctx.task_id, self.signer.address)
        if not me.enrolled or me.evicted or me.fragment != fragment:
            return None
        if self.market.submission(ctx.task_id, round_, fragment).trainer != ZERO_ADDRESS:
            return None
        deadline = self.market.commit_deadline(ctx.task_id)
        log.info("trainer.round_opened", round=round_, open_wait_s=round(time.perf_counter() - waited, 2))
        if self._train_and_commit(round_, fragment, me.shards, t.state_root, deadline):
            waited = time.perf_counter()
            complete = self._await_work_complete(round_)
            wait_s = round(time.perf_counter() - waited, 2)
            log.info("trainer.work_complete", round=round_, complete=complete, wait_s=wait_s)
            if complete:
                return t, me
        return None

    def _duties_beside_training(self) -> None:
        """Between two inner steps (of the open round, or of a round trained ahead): start
        :meth:`_duties_while_training` in a background thread when they are due and none is under
        way, and go on training (the steps do not wait for the chain). The duties touch neither the
        model, the optimizer nor torch's generator, and send a transaction only while the training
        thread sends none: it waits for them (:meth:`_join_duties`) before it does anything else."""
        running = self._duty_running
        if running is not None and not running.done():
            return
        if time.perf_counter() - self._duties_at < DUTIES_WHILE_TRAINING_S:
            return
        if self._duty_runner is None:
            self._duty_runner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trainer-duties")
        self._duty_running = self._duty_runner.submit(self._duties_while_training)

    def _join_duties(self) -> None:
        """Wait for the duties started beside the training (they never raise: best effort)."""
        running, self._duty_running = self._duty_running, None
        if running is not None:
            running.result()

    def _duties_now(self) -> None:
        """:meth:`_duties_while_training` in this thread (while it waits on the chain), after any
        started beside the training."""
        self._join_duties()
        self._duties_while_training()

    def _duties_while_training(self) -> None:
        """While a round is trained (the open one, or the next one ahead) or a round trained ahead
        waits on the chain: first every training claim and availability demand against this
        trainer (answered within half a challenge window, or it convicts), then, training ahead,
        the duties of the tick it skipped (:meth:`_train_ahead`: outcomes, spot checks and pruning
        up to the round then open) and, once the round being finalized closes, the committee's
        spot check of this trainer's submission to it (its publication deadline is half a
        challenge window after the close). At most one look every DUTIES_WHILE_TRAINING_S; best
        effort: the next tick does all of them anyway."""
        now = time.perf_counter()
        if now - self._duties_at < DUTIES_WHILE_TRAINING_S:
            return
        self._duties_at = now
        ctx, duty = self.ctx, self._ahead_duty
        assert ctx is not None
        fragment = self._training_fragment if duty is None else duty[0]
        if fragment is None:
            return
        try:
            self._answer_availability(fragment)  # the only duty with a deadline of seconds
            if duty is None:
                return  # training the open round: the tick after it does the rest
            awaited = duty[1]
            chores, self._chores = self._chores, None
            if chores is not None:
                self._record_outcomes(chores[0], chores[1])
                self._serve_spot_checks(chores[0], chores[1])
                self._prune_kept(chores[0])
            if ctx.spec.verification_policy.on_demand and awaited not in self._spot_settled:
                t = self.market.task(ctx.task_id)
                closed = t.status != TaskStatus.RUNNING or t.current_round > awaited
                if closed:
                    self._serve_spot_checks(awaited + 1, fragment)
        except Exception as exc:  # never let a duty break the training run
            log.info("trainer.duty_deferred", reason=str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__)

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
                segment_published=lambda r, s: self._segment_published(r, s, fragment),
            )
        try:
            self._availability.step()
        except (ChainError, SynclineError) as exc:
            log.info("trainer.availability_deferred", reason=str(exc).splitlines()[0][:160])

    def _segment_published(self, round_: int, segment: int, fragment: int) -> bool:
        """Whether a claimed segment's checkpoints are out: in an eager task they went out with the
        commitment (through the outbox, so once nothing is still waiting there); in an on-demand
        task they are published from the keeper now. In a DP task the segment's noise opening is
        published with them (docs/privacy.md): the referees cannot replay it otherwise."""
        ctx = self.ctx
        assert ctx is not None
        if self.cfg.misbehave == "withhold":  # TESTS AND DEMOS ONLY: never publishes what a claim names
            log.warning("trainer.misbehaving", mode="withhold", round=round_, segment=segment)
            return False
        if self.cfg.misbehave == "answer-withhold":  # TESTS AND DEMOS ONLY: says so, publishes nothing
            log.warning("trainer.misbehaving", mode="answer-withhold", round=round_, segment=segment)
            return True
        opened = True
        if ctx.spec.privacy is not None and segment < ctx.spec.checkpoint_segments:
            if self.cfg.misbehave == "withhold-opening":  # TESTS AND DEMOS ONLY: checkpoints, no opening
                log.warning("trainer.misbehaving", mode="withhold-opening", round=round_, segment=segment)
                opened = False
            else:
                self._publish_opening(round_, fragment, segment)
        if self._keeps_checkpoints:
            sent = self.keeper.publish_segment(self.outbox, round_, segment, ctx.spec.checkpoint_segments)
            if sent is None:
                log.warning("trainer.segment_not_kept", round=round_, segment=segment)
                return False
            self._checkpoint_bytes_sent += sent
            self._write_throughput()
        if self.outbox.flush() != 0 or not opened:
            return False
        # Answer only once the store confirms it holds the segment (issue 27): a referee that finds
        # it absent from a reachable store votes Unavailable, and enough of those convict.
        return not self._keeps_checkpoints or self._segment_present(round_, segment)

    def _segment_present(self, round_: int, segment: int) -> bool:
        """Whether the blob store holds every kept checkpoint ``segment`` needs (a HEAD each)."""
        assert self.ctx is not None
        for index in checkpoints_for_segment(segment, self.ctx.spec.checkpoint_segments):
            kept = self.keeper.kept(round_, index)  # its digest from its name: never read whole
            if kept is None or not self.blobs.has(kept[1]):
                log.warning("trainer.segment_not_in_store", round=round_, segment=segment, checkpoint=index)
                return False
        return True

    def _serve_spot_checks(self, open_round: int, fragment: int) -> None:
        """Publish the segment the committee's draw names of each of this trainer's accepted
        submissions (on-demand tasks; with its noise opening in a DP task), before the witnesses
        escalate it on chain."""
        ctx = self.ctx
        assert ctx is not None
        spec = ctx.spec
        if spec.privacy is not None:
            try:
                self._reseal_openings()
            except SynclineError as exc:  # the chain or the store is out: the next tick tries again
                log.info("trainer.dp_reseal_deferred", reason=str(exc).splitlines()[0][:160])
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
                published = self._segment_published(r, segment, fragment)
            except SynclineError as exc:  # the outbox holds them through an outage; retried next tick
                log.info("trainer.spot_check_deferred", round=r, segment=segment, reason=str(exc).splitlines()[0][:160])
                continue
            if published:
                log.info("trainer.spot_check_answered", round=r, fragment=fragment, segment=segment)
                self._spot_settled.add(r)

    @property
    def _keeps_checkpoints(self) -> bool:
        """Whether checkpoints stay in the keeper (published only when asked) instead of being
        uploaded with the commitment: on-demand tasks; in an eager task, TESTS AND DEMOS ONLY, a
        trainer that withholds them (``withhold``, ``upload-on-claim``: issue 26 item 6)."""
        assert self.ctx is not None
        keeping = ("withhold", "upload-on-claim", "answer-withhold")
        return self.ctx.spec.verification_policy.on_demand or self.cfg.misbehave in keeping

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

    def _reveal(self) -> None:
        """Commit, then reveal (docs/protocol.md §10.6): upload the sealed payloads of every round
        whose commit phase has closed on chain. Best effort: the next look tries again."""
        ctx = self.ctx
        if ctx is None:
            return
        try:
            rounds = self.outbox.sealed_rounds()
            if not rounds:
                return
            last = max(rounds)
            closed = last if commit_phase_closed(self.market, ctx.task_id, last) else last - 1
            if self.cfg.misbehave == "reveal-late":  # TESTS AND DEMOS ONLY: reveal only after the vote
                t = self.market.task(ctx.task_id)
                closed = last if t.status != TaskStatus.RUNNING else t.current_round - 1
            if closed >= rounds[0]:
                self.outbox.reveal(closed)
        except (OSError, ChainError, SynclineError) as exc:
            log.info(
                "trainer.reveal_deferred", reason=str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
            )

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
                # H is the task's (spec.inner_steps), never the trainer's config
                replace(self.cfg.inner, inner_steps=self.ctx.spec.inner_steps),
                device=self.cfg.device,
                dtype=self.cfg.dtype,
                gradient_checkpointing=self.cfg.gradient_checkpointing,
                deterministic=self.cfg.deterministic,
                privacy=DpSgd.of(PrivacyPlan.of(self.ctx.spec)) if self.ctx.spec.privacy is not None else None,
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

    def _train(
        self, state: TrainingState | StateFile, round_: int, fragment: int, shards: list[int], *, ahead: bool
    ) -> RoundWork:
        """The round's H inner steps from ``state`` (AdamW restored to the round's start). On-demand
        checkpoints are streamed into the keeper as they are captured (never held as bytes) and
        flushed to disk by :meth:`_stage`. Between the steps, claims and demands against this
        trainer are answered (:meth:`_duties_beside_training`), and, ``ahead`` (the round after the
        open one), the duties of the round awaiting finalization are done too."""
        ctx = self.ctx
        assert ctx is not None
        self._training_fragment = fragment
        if not ahead:
            self._ahead_duty = None  # no round trained ahead awaits its finalization
        inner = self._ensure_inner()
        self._restore_optimizer(inner, round_)
        if self._wall_started is None:
            self._wall_started = time.perf_counter()  # utilization counts from the first round trained
        self.metrics.round.set(round_)
        noise = self._round_noise(round_, fragment) if inner.private is not None else None
        if noise is not None:
            self._check_sample_rate(inner, shards)
        try:
            work = inner.run(
                state,
                [ctx.shard(i) for i in shards],
                # a DP task's batch order is secret (docs/privacy.md): drawn from the noise seed
                seed=round_seed(ctx.task_id, round_, fragment) if noise is None else noise.batch_seed,
                # TESTS AND DEMOS ONLY: other noise than the committed seeds (e.g. noise it can subtract)
                noise=_OtherNoise(noise) if noise is not None and self.cfg.misbehave == "other-noise" else noise,
                progress=sys.stderr.isatty(),
                checkpoint_interval=ctx.spec.checkpoint_interval_steps,
                # TESTS AND DEMOS ONLY: a lazy trainer trains half the steps and pads its checkpoints.
                train_steps=ctx.spec.inner_steps // 2 if self.cfg.misbehave in ("lazy", "answer-withhold") else None,
                between_steps=self._duties_beside_training,
                checkpoint_sink=self._keep_checkpoint(round_) if self._keeps_checkpoints else None,
                wait_for_checkpoints=False,  # the last one is written while the payload is encoded (_stage)
            )
        finally:
            self._join_duties()
        if self.cfg.misbehave == "fake-gradient":  # honest checkpoints, a payload not derived from them
            work = replace(work, pseudo_gradient=torch.randn_like(work.pseudo_gradient) * 0.05)
        if self.cfg.misbehave == "copy-payload":  # TESTS AND DEMOS ONLY: a free-rider's payload
            work = replace(work, pseudo_gradient=self._copy_or_fallback(round_, fragment, work.pseudo_gradient))
        return work

    def _copy_or_fallback(self, round_: int, fragment: int, own: torch.Tensor) -> torch.Tensor:
        """TESTS AND DEMOS ONLY (``--misbehave copy-payload``): before committing, poll for another
        trainer's payload of the open ``round_``; with one, commit a copy plus 5 % noise; with none
        by shortly before the commit deadline, commit noise only (what a free-rider has)."""
        ctx = self.ctx
        assert ctx is not None
        scale = float(own.float().std()) or 1e-3
        give_up = self.market.commit_deadline(ctx.task_id) - max(3, ctx.spec.round_duration_s // 3)
        tries = 0
        while pending_time(self.market.w3) < give_up:
            if commit_phase_closed(self.market, ctx.task_id, round_):
                break  # e.g. evicted meanwhile: nothing left to commit a copy to
            tries += 1
            mask = self.market.round(ctx.task_id, round_).committed_mask
            for other in range(256):
                if other == fragment or not mask >> other & 1:
                    continue
                s = self.market.submission(ctx.task_id, round_, other)
                try:
                    data = fetch_by_digest(self.blobs, s.payload_hash, (s.uri,), max_bytes=ctx.max_payload_bytes)
                except SynclineError:
                    continue  # sealed until the commit phase closes
                if commit_phase_closed(self.market, ctx.task_id, round_):
                    # Revealed because the commit phase closed meanwhile (e.g. this trainer was
                    # evicted): public by design now, and too late to commit a copy of.
                    log.warning("trainer.misbehaving", mode="copy-payload", round=round_, obtained=False, closed=True)
                    return torch.randn_like(own) * 0.05 * scale
                qg = QuantizedGradient.from_safetensors_bytes(data, expected_numel=own.numel())
                copied = from_fixed(dequantize(qg)).to(own.dtype).reshape(own.shape)
                log.warning("trainer.misbehaving", mode="copy-payload", round=round_, obtained=True, source=other)
                return copied + torch.randn_like(copied) * 0.05 * float(copied.std())
            time.sleep(0.25)
        log.warning("trainer.misbehaving", mode="copy-payload", round=round_, obtained=False, tries=tries)
        return torch.randn_like(own) * 0.05 * scale

    def _check_sample_rate(self, inner: InnerLoop, shards: list[int]) -> None:
        """Warn when this trainer samples its windows at a higher rate than the spec's
        ``privacy.sample_rate`` (its ε would then exceed what everyone accounts; docs/privacy.md).
        Language tasks only: an example is a window of ``seq_len`` tokens."""
        ctx = self.ctx
        assert ctx is not None and ctx.spec.privacy is not None
        seq_len = getattr(ctx.adapter, "seq_len", None)
        if ctx.spec.modality != Modality.LANGUAGE or not isinstance(seq_len, int) or seq_len <= 0:
            return
        width = int(getattr(ctx.adapter, "token_bytes", 2))
        method = str(getattr(ctx.adapter, "method", "pretrain"))
        windows = sum(token_count(ctx.shard(i), method, width) for i in shards) // seq_len
        actual = inner.batch_size / max(1, windows)
        if actual > ctx.spec.privacy.sample_rate * (1 + 1e-9):
            log.warning(
                "trainer.dp_sample_rate_above_spec",
                actual=round(actual, 6),
                declared=ctx.spec.privacy.sample_rate,
                batch_size=inner.batch_size,
                windows=windows,
            )

    def _noise_seeds(self, round_: int, fragment: int) -> RoundNoise:
        ctx = self.ctx
        assert ctx is not None
        return RoundNoise.derive(
            load_or_create_secret(self.cfg.state_dir / "noise-secret"),
            task_id=ctx.task_id,
            round_=round_,
            fragment=fragment,
            interval=ctx.spec.checkpoint_interval_steps,
            inner_steps=ctx.spec.inner_steps,
        )

    def _publish_opening(self, round_: int, fragment: int, segment: int) -> None:
        """Put the opening of ``segment``'s noise (its seed, the round's batch key, the seed hashes)
        in this trainer's signed slot of ``opening_alias``, sealed to every committee witness whose
        dispute key the chain has now (docs/protocol.md §12.10): they alone can read it. With no
        key registered yet it is still published (sealed to nobody), so answering a claim is never
        blocked; :meth:`_reseal_openings` publishes it again when more keys appear."""
        ctx = self.ctx
        assert ctx is not None
        keys = self._committee().recipients()
        if self._openings_sent.get((round_, fragment, segment)) == frozenset(r.pubkey for r in keys):
            return
        noise = self._noise_seeds(round_, fragment)
        binding = Binding(ctx.task_id, round_, fragment, segment, noise.commitment())
        sealed = seal_opening(encode_opening(noise, segment), binding, keys)
        put_signed(self.outbox, sealed, opening_alias(ctx.task_id, round_, fragment, segment), self.signer.account)
        self._openings_sent[(round_, fragment, segment)] = frozenset(r.pubkey for r in keys)
        log.info(
            "trainer.dp_opening_published",
            round=round_,
            fragment=fragment,
            segment=segment,
            sealed_to=len(keys),
            committee=len(ctx.spec.witnesses),
        )

    def _committee(self) -> CommitteeKeys:
        """The committee's dispute keys on chain (``getEnclave`` of each witness of the spec)."""
        ctx = self.ctx
        assert ctx is not None
        if self._committee_keys is None:
            self._committee_keys = CommitteeKeys(
                ctx.spec.witnesses, lambda w: self.market.get_enclave(ctx.task_id, w)[0]
            )
        return self._committee_keys

    def _reseal_openings(self) -> None:
        """Re-publish every opening sent so far sealed to the committee keys registered since
        (reads the chain only for witnesses still without a key)."""
        if not self._openings_sent:
            return
        keys = frozenset(r.pubkey for r in self._committee().recipients())
        for round_, fragment, segment in [k for k, v in self._openings_sent.items() if v != keys]:
            self._publish_opening(round_, fragment, segment)

    def _round_noise(self, round_: int, fragment: int) -> RoundNoise:
        """The round's DP noise seeds, from this trainer's secret; their commitment (bound by the
        checkpoint root, docs/protocol.md §12.10) and hashes are kept in ``noise/``."""
        noise = self._noise_seeds(round_, fragment)
        record = {"commitment": "0x" + noise.commitment().hex(), "hashes": ["0x" + h.hex() for h in noise.hashes()]}
        out = self.cfg.state_dir / "noise" / f"round-{round_}-fragment-{fragment}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(record))
        log.info("trainer.dp_noise", round=round_, fragment=fragment, commitment=record["commitment"])
        return noise

    def _train_and_commit(self, round_: int, fragment: int, shards: list[int], state_root: str, deadline: int) -> bool:
        """Train the open round (or take the work trained ahead for it) and commit; True once committed."""
        ctx = self.ctx
        assert ctx is not None
        ahead, self._ahead = self._ahead, None
        trained_ahead = ahead is not None and (ahead.round, ahead.start_root, ahead.shards) == (
            round_,
            state_root.lower(),
            tuple(shards),
        )
        if ahead is not None and trained_ahead:
            # The chain finalized exactly the state this round was trained from: commit that work.
            work, staged = ahead.work, ahead.staged
            self._hold(ahead.state)
            if isinstance(ahead.state, StateFile):  # the state file becomes the finalized state's
                ahead.state.move_to(self._states_dir / f"{ahead.start_root}.safetensors")
            self._bytes_received += ahead.bytes_received
            log.info("trainer.ahead_used", round=round_)
        else:
            if ahead is not None:
                log.info("trainer.ahead_dropped", round=ahead.round, trained_from=ahead.start_root[:18])
                self._drop_ahead(ahead, state_root)
            syncing = time.perf_counter()
            try:
                state = self._sync_state(round_, fragment, state_root)
            except StateUnavailable as exc:
                if exc.outage:  # the store is down: the loop backs off and reports degraded health
                    raise
                log.info("trainer.waiting_for_state", round=round_, reason=str(exc))
                return False
            sync_s = time.perf_counter() - syncing
            work = self._train(state, round_, fragment, shards, ahead=False)
            staged = self._stage(round_, work, {"sync_s": sync_s})
        finishing = time.perf_counter()
        payload, chunk_root, ref = staged.payload, staged.chunk_root, staged.ref
        if isinstance(payload, Path) and round_ + 1 >= ctx.spec.rounds:
            payload.unlink(missing_ok=True)  # the last round: no state is derived from it
        elif isinstance(payload, Path):
            self._held_payload_files(round_)[ref.digest.lower()] = payload
        else:
            self._held_payloads(round_)[ref.digest.lower()] = payload
        checkpoint_root = self._publish_manifest(round_, fragment, staged, len(staged.checkpoint_digests))
        message, signature = self.market.sign_commitment(
            self.signer, ctx.task_id, round_, fragment, ref.digest, chunk_root, checkpoint_root, ref.uri
        )
        staged.wait_durable()  # the checkpoints the commitment binds are on disk
        sending = time.perf_counter()
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
                return False
            # Someone relayed our own announced commitment first: it is on record, uri included.
            log.info("trainer.commit_relayed", round=round_, fragment=fragment, error=exc.error_name)
            outcome = "committed"
        timings = {**staged.timings, "commit_s": time.perf_counter() - finishing}
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
            stage_s=round(staged.seconds, 2),  # save AdamW, encode, upload and keep the payload, keep checkpoints
            commit_s=round(time.perf_counter() - finishing, 2),  # manifest, sign, announce, commit
            tx_s=round(time.perf_counter() - sending, 2),  # announce, commit
        )
        append_record(
            self.cfg.state_dir,
            "rounds.jsonl",
            {
                "round": round_,
                "loss": work.mean_loss,
                "payload": ref.digest,
                "trained_ahead": trained_ahead,
                # sync_s: the state synced before training, or (trained ahead) derived from the
                # previous round's payloads while the witnesses voted; commit_s: manifest, sign, commit
                "timings": {k: round(v, 3) for k, v in timings.items()},
                "committed_at": time.time(),
            },
        )
        self._report(ctx.task_id, round_, fragment, work)
        self._tokens += work.tokens
        self._rounds_committed += 1
        self._steps += steps
        self._write_throughput()
        return True

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
        """Announce the round's training loss (self-reported; the API plots it). Best effort, from
        a background thread: the next round does not wait for it (reports go out in round order).
        Not in a DP task: a loss on the round's batches is not covered by the noise (docs/privacy.md)."""
        if self.ctx is not None and self.ctx.spec.privacy is not None:
            return
        report = TrainerReport(
            task_id, round_, fragment, work.mean_loss, len(work.losses), work.tokens, work.train_seconds
        )
        if self._reporter is None:
            self._reporter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="round-report")
        self._reporter.submit(self._announce_report, report)

    def _announce_report(self, report: TrainerReport) -> None:
        try:
            announce_report(self.blobs, report, self.signer)
        except Exception as exc:  # best effort: a report never breaks the run
            log.warning(
                "trainer.report_failed",
                round=report.round,
                error=str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__,
            )

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

    def _stage(self, round_: int, work: RoundWork, timings: dict[str, float]) -> StagedWork:
        """Everything committing ``work`` for ``round_`` needs that neither names the round on the
        chain nor depends on it being open (:class:`StagedWork`); ``timings`` (the state's sync)
        gets the seconds of each part."""
        ctx = self.ctx
        assert ctx is not None
        began = time.perf_counter()
        timings["inner_s"] = work.train_seconds
        saving = time.perf_counter()
        self._save_optimizer(self._ensure_inner(), round_ + 1)
        timings["save_optimizer_s"] = time.perf_counter() - saving
        payload, chunk_root, ref = self._encode_and_upload(round_, work.pseudo_gradient, timings)
        self._bytes_sent += ref.size
        # The inner loop did not wait for its last checkpoint: it was written meanwhile.
        work = work.checkpoints_written()
        timings["checkpoints_s"] = work.checkpoint_seconds
        flushing: Future[None] | None = None
        if self._keeps_checkpoints:
            # Streamed into the keeper during training, not yet flushed: flushed to disk in the
            # background while the commitment is prepared; the commitment waits for the flush
            # (StagedWork.wait_durable).
            digests = work.checkpoint_digests or self.keeper.keep(round_, work.checkpoints, durable=False)
            if self._flusher is None:
                self._flusher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-flush")
            flushing = self._flusher.submit(self.keeper.sync, round_, digests)
            uris: tuple[str, ...] = ("",) * len(digests)
            size = 0
        else:
            # Sealed like the payload (its last checkpoint gives the payload away): revealed once
            # the round's commit phase closed (docs/protocol.md §10.6).
            refs = [self.outbox.seal_blob(round_, c) for c in work.checkpoints]
            digests = tuple(r.digest for r in refs)
            uris = tuple(r.uri for r in refs)
            size = sum(r.size for r in refs)
        self._checkpoint_bytes_sent += size
        return StagedWork(payload, chunk_root, ref, digests, uris, size, time.perf_counter() - began, flushing, timings)

    def _keep_checkpoint(self, round_: int) -> Callable[[int, CheckpointWriter], str]:
        """The inner loop's checkpoint sink: stream checkpoint ``index`` of ``round_`` into the keeper."""
        return lambda index, write: self.keeper.keep_stream(round_, index, write, durable=False)

    def _encode_and_upload(
        self, round_: int, gradient: torch.Tensor, timings: dict[str, float]
    ) -> tuple[bytes | Path, bytes, BlobRef]:
        """Quantize the outer gradient into the payload (refuses NaN/Inf) and seal it in the outbox
        (kept for availability demands, uploaded only once the round's commit phase has closed:
        :meth:`_reveal`); returns ``(payload, chunk root, reference)``. With the state on disk
        the payload is encoded range by range into a file, sealed from it and returned as that file."""
        ctx = self.ctx
        assert ctx is not None
        began = time.perf_counter()
        if not self._disk_state:
            payload, chunk_root = encode_payload(gradient, ctx.spec.gradient_bits)
            if self.cfg.misbehave == "junk-payload":  # TESTS AND DEMOS ONLY: a header no parser should trust
                payload = junk_data_offsets(payload)
            timings["encode_s"] = time.perf_counter() - began
            began = time.perf_counter()
            ref = self.outbox.seal(round_, payload)  # revealed once the round's commit phase closed
            timings["upload_s"] = time.perf_counter() - began
            return payload, chunk_root, ref
        path = self._payloads_dir / f"own-{round_}.bin"
        encoded = encode_payload_file(ArrayRegion(gradient.numpy()), ctx.spec.gradient_bits, str(path))
        timings["encode_s"] = time.perf_counter() - began
        began = time.perf_counter()
        ref = self.outbox.seal_file(round_, path)  # revealed once the round's commit phase closed
        held = payload_file_path(self._payloads_dir, round_, ref.digest)
        os.replace(path, held)
        timings["upload_s"] = time.perf_counter() - began
        return held, encoded.chunk_root, ref

    def _publish_manifest(self, round_: int, fragment: int, staged: StagedWork, checkpoints: int) -> bytes:
        """Put the checkpoint manifest (aliased by position and by root, each in this trainer's own
        signed slot, which no other writer can displace); returns the ``checkpointRoot`` to commit.
        Publishing precedes the commitment, so a challenger can fetch the manifest as soon as the
        commitment is on chain. In an eager task :meth:`_stage` uploaded every checkpoint blob; in
        an on-demand task the checkpoints stay in the keeper until a spot-check draw or a claim
        names their segment (the manifest then lists no locators: readers fetch by digest)."""
        ctx = self.ctx
        assert ctx is not None
        manifest = CheckpointManifest(
            interval=ctx.spec.checkpoint_interval_steps,
            inner_steps=ctx.spec.inner_steps,
            hashes=tuple(bytes.fromhex(d[2:]) for d in staged.checkpoint_digests),  # a blob's digest is its hash
            uris=staged.checkpoint_uris,
            # a DP task's noise commitment, bound by the root (docs/protocol.md §12.10)
            noise=self._noise_seeds(round_, fragment).commitment() if ctx.spec.privacy is not None else None,
        )
        root = manifest.root
        data = manifest.to_json()
        for alias in (manifest_root_alias(root), manifest_alias(ctx.task_id, round_, fragment)):
            put_signed(self.outbox, data, alias, self.signer.account)
        self._checkpoint_bytes_sent += 2 * len(data)
        log.info(
            "trainer.checkpoints",
            round=round_,
            fragment=fragment,
            checkpoints=checkpoints,
            published_kib=round(staged.checkpoint_bytes / 1024, 1),
            kept=self._keeps_checkpoints,
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
        if self._state is not None and self._root_of(self._state) == state_root.lower():
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
            # One state file at a time: the one held (not the finalized state) and any left by an
            # earlier run of this trainer go before the download.
            self._state = None
            for stale in self._states_dir.glob("*.safetensors"):
                stale.unlink(missing_ok=True)
            fetched, size = ctx.fetch_state_file(state_root, self._states_dir / f"{state_root.lower()}.safetensors")
            self._bytes_received += size
            self._hold(fetched)
            return fetched
        state, size = ctx.fetch_state_sized(state_root)  # verified: its root is state_root
        self._bytes_received += size
        self._knows_root(state, bytes.fromhex(state_root.lower().removeprefix("0x")))
        self._state = state
        return state

    def _hold(self, state: TrainingState | StateFile) -> None:
        """Train from ``state`` from now on; a state file held before is deleted."""
        old = self._state
        if isinstance(old, StateFile) and not (isinstance(state, StateFile) and state.path == old.path):
            old.remove()
        self._state = state

    def _knows_root(self, state: TrainingState, root: bytes) -> str:
        """Remember that the in-memory ``state``'s root is ``root`` (computed with it, or checked
        when it was fetched); returns it as ``0x`` hex."""
        known = "0x" + root.hex()
        self._known_root = (state, known)
        return known

    def _root_of(self, state: TrainingState | StateFile) -> str:
        """``state``'s root (``0x`` hex). A state file remembers its own (and adopts the new one
        when a round updates it in place); an in-memory state's root is the one remembered for
        this very object, else hashed (16 bytes per parameter, on the critical path of every
        round). Nothing changes a :class:`TrainingState`'s vectors in place."""
        if isinstance(state, StateFile):
            return state.state_root_hex
        known = self._known_root
        if known is not None and known[0] is state:
            return known[1]
        return self._knows_root(state, state.state_root())

    def _drop_ahead(self, ahead: TrainedAhead, state_root: str) -> None:
        """Forget a round trained ahead whose work the chain's round does not take. Its state is
        kept if the chain finalized exactly it (only the shards changed); otherwise a state file
        updated for it is deleted (the trainer's only one: the next sync downloads the state the
        chain finalized). Its payload file goes too."""
        if ahead.start_root == state_root.lower():
            self._hold(ahead.state)
        elif isinstance(ahead.state, StateFile):
            ahead.state.remove()
            if self._state is ahead.state:
                self._state = None
        if isinstance(ahead.staged.payload, Path):
            ahead.staged.payload.unlink(missing_ok=True)
        self.outbox.drop_sealed(ahead.round)  # never committed: nothing to reveal

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
        if self._knows_root(result.state, result.state_root) != state_root.lower():
            log.info("trainer.state_sync_mismatch", round=round_, fallback="full state blob")
            return None
        return result.state

    def _derive_on_disk(
        self, round_: int, rr: RoundView, fragment: int, state_root: str, previous: StateFile
    ) -> StateFile | None:
        """:meth:`_derive_from_payloads` with the state and payloads in files: the state file is
        updated in place (one state file on disk); on a mismatch it is deleted (the caller
        downloads the state)."""
        ctx = self.ctx
        assert ctx is not None
        fetched = self._fetch_payload_files(round_, rr.committed_mask, fragment)
        if fetched is None:
            return None
        payloads, received = fetched
        self._bytes_received += received
        self._state = None  # updated in place (one state file on disk): on a mismatch, download
        derived, result = ctx.compute_round_file(
            previous, payloads, self._states_dir / f"derived-{round_}.safetensors", in_place=True
        )
        if "0x" + result.state_root.hex() != state_root.lower():
            log.info("trainer.state_sync_mismatch", round=round_, fallback="full state blob")
            derived.remove()
            return None
        return derived.move_to(self._states_dir / f"{state_root.lower()}.safetensors")

    @property
    def _disk_state(self) -> bool:
        """Whether this trainer keeps the state, payloads and checkpoints in files (large models)."""
        assert self.ctx is not None
        return use_disk_state(self.ctx.layout.numel, self.cfg.state_on_disk)

    @property
    def _states_dir(self) -> Path:
        states = self.cfg.state_dir / "states"
        states.mkdir(parents=True, exist_ok=True)
        return states

    @property
    def _payloads_dir(self) -> Path:
        payloads = self.cfg.state_dir / "payloads"
        payloads.mkdir(parents=True, exist_ok=True)
        return payloads

    def _prune_kept(self, open_round: int) -> None:
        """Forget the own payloads and checkpoints of the rounds before ``open_round`` that no
        claim can need any more (:func:`claims_over`, on the chain's time and blocks: with early
        close a round can be far shorter than ``round_duration_s``, so they are not counted in
        rounds). A round's filing window is first seen closed (:func:`filing_open`), then its data
        is kept a whole claim window and half the minimum in blocks more."""
        ctx = self.ctx
        assert ctx is not None
        w3, window = self.market.w3, ctx.spec.challenge_window_s
        first, now, block = self._kept_from, 0, 0
        while first < open_round:
            if first not in self._filing_closed:
                rr = self.market.round(ctx.task_id, first)
                if rr.closed_at == 0:
                    break
                now, block = now or pending_time(w3), block or pending_block(w3)
                if filing_open(rr.closed_at, rr.closed_block, now, block, window):
                    break
                self._filing_closed[first] = (now, block)
            seen_at, seen_block = self._filing_closed[first]
            now, block = now or pending_time(w3), block or pending_block(w3)
            if not claims_over(seen_at, seen_block, now, block, window):
                break
            del self._filing_closed[first]
            first += 1
        if first > self._kept_from:
            self.outbox.prune_own(first)
            self.keeper.prune(first)
            self._kept_from = first
            log.info("trainer.pruned", before_round=first, chain_time=now, block=block)

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

    def _try_seal(self, t: TaskView) -> bool:
        assert self.ctx is not None
        w3, window = self.market.w3, self.ctx.spec.challenge_window_s
        # the contract's `seal`: the filing window has passed in time and in blocks
        if (
            pending_time(w3) >= t.last_closed_at + window
            and pending_block(w3) >= t.last_closed_block + MIN_CHALLENGE_BLOCKS
        ):
            try:
                self.market.seal(self.signer, self.ctx.task_id)
                log.info("trainer.sealed", task_id=self.ctx.task_id)
            except ChainError as exc:
                log.info("trainer.seal_skipped", reason=exc.error_name)
        return False


def junk_data_offsets(payload: bytes, offsets: object = None) -> bytes:
    """TESTS AND DEMOS ONLY (``--misbehave junk-payload``, tests/run/test_junk_candidates.py):
    ``payload`` (safetensors) with every tensor's ``data_offsets`` replaced by ``offsets`` (``null``
    by default), the header padded to 8 bytes as the format asks."""
    (n,) = struct.unpack("<Q", payload[:8])
    header = json.loads(payload[8 : 8 + n])
    for name, entry in header.items():
        if name != "__metadata__" and isinstance(entry, dict):
            entry["data_offsets"] = offsets
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + payload[8 + n :]
