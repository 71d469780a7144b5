"""The witness (syncer) agent: ``syncline witness run --config witness.yaml``.

Once a round closes (its deadline passed, or every active trainer committed: early close) it
fetches every committed payload, rejects bad ones with a reason,
aggregates with the task's rule, applies the outer step, publishes the new state, measures the
validation loss and votes. Every signed vote is written to the local store before it is published;
a witness whose finalize failed, or that restarted, re-sends that same vote for the same (task,
round, prevStateRoot) and never signs a different one (which would read as equivocation). A
repeated vote is a no-op on chain (idempotent finalize). After the grace window it carries a stuck round forward;
after the challenge window it seals; then it claims its fees.

Unless it misbehaves, a witness also runs the challenger on every closed round (it audits the
round independently and proves any fault on chain) and referees training-fraud claims by
re-executing the disputed segment. Misbehaviour modes exist for tests and demos only and start at
round ``CHEAT_FROM_ROUND``: ``bad-aggregate`` (a wrong state), ``censor`` (leave the lowest valid
submission out) and ``equivocate`` (announce a signed vote that differs from the one cast).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from syncline.blobstore import BlobStore
from syncline.blobstore.store import BlobUnavailable
from syncline.chain import enrollment
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient, TaskView
from syncline.challenger.agent import Challenger, court_challenger, court_files
from syncline.confidential.enclave import AgentEnclave, agent_enclave, check_task_policy
from syncline.confidential.keystore import EnclaveKey
from syncline.court.defence import CensorshipDefence, MalformedChunk, find_malformed_chunk
from syncline.court.duty import RefereeDuty
from syncline.court.files import CourtFiles
from syncline.errors import ChainError, KeyConfigError, SynclineError
from syncline.observability import get_logger
from syncline.privacy.committee import load_or_create_dispute_key
from syncline.protocol.chunking import num_chunks
from syncline.protocol.disk_round import DiskRoundResult
from syncline.protocol.enums import TaskStatus
from syncline.protocol.hashing import keccak
from syncline.protocol.signed_messages import METRIC_SCALE, Vote
from syncline.protocol.state import TrainingState
from syncline.protocol.sync_round import RoundResult
from syncline.run.agent_config import AgentConfig
from syncline.run.context import StateUnavailable, TaskContext, load_weights
from syncline.run.gossip import GossipError, announce_vote, decode_vote, encode_vote
from syncline.run.local_store import SIGNED_VOTES_FILE, append_durable, append_record, claim_state_dir, read_records
from syncline.run.loop import NewBlock, TaskNotPosted, pending_time, run_forever
from syncline.run.metrics import AgentMetrics
from syncline.run.reveal import reveal_window_s
from syncline.run.state_file import StateFile, use_disk_state

log = get_logger("syncline.witness")
ZERO = "0x" + "00" * 32
CHEAT_FROM_ROUND = 1  # misbehaviour (tests and demos only) starts after one honest round
VOTES_FILE = SIGNED_VOTES_FILE  # every vote this witness signed, written before it is published


@dataclass
class WitnessAgent:
    cfg: AgentConfig
    signer: Signer
    market: MarketClient
    blobs: BlobStore
    metrics: AgentMetrics = field(default_factory=lambda: AgentMetrics("witness"))
    ctx: TaskContext | None = None
    _eval_model: torch.nn.Module | None = None
    _bonded: bool = False
    challenger: Challenger | None = None
    referee: RefereeDuty | None = None
    _court_files: CourtFiles | None = None
    defence: CensorshipDefence | None = None
    _awaiting: TaskNotPosted | None = None
    _held: StateFile | None = None  # the state file the next round builds on (state on disk)
    # The in-memory state this witness computed last and its root: the next round builds on it
    # when the chain finalized exactly that root (instead of downloading and hashing it again).
    _computed: tuple[str, TrainingState] | None = None
    # A Confidential task's enclave (key, measurement, report) and whether the chain has admitted it.
    _enclave: AgentEnclave | None = field(default=None, repr=False)
    _enclave_registered: bool = False
    # A DP task that is not Confidential: this witness's dispute key (the noise openings of drawn
    # and claimed segments are sealed to it), and whether the chain has it.
    _dispute_key: EnclaveKey | None = field(default=None, repr=False)
    _dispute_key_settled: bool = False
    # Per round, the chain time its reveal window started: the close (the deadline, or when this
    # witness first saw the work complete), or the end of a blob-store outage seen since.
    _reveal_from: dict[int, int] = field(default_factory=dict)

    def _load_dispute_key(self) -> None:
        """A DP task that is not Confidential: this witness's dispute key, generated once in its
        state dir's encrypted keystore (docs/privacy.md). Without a password it runs on without
        one: it then cannot read the noise openings, so it never judges a DP training segment
        (its challenger leaves them alone, as a referee it abstains), and says so."""
        assert self.ctx is not None
        if self.ctx.spec.privacy is None or self.ctx.spec.confidential is not None:
            return
        try:
            self._dispute_key = load_or_create_dispute_key(self.cfg.state_dir)
        except KeyConfigError as exc:
            log.warning("witness.dispute_key_unavailable", task_id=self.cfg.task_id, reason=str(exc))
            self._dispute_key_settled = True

    def _ensure_dispute_key_registered(self) -> None:
        """Register the dispute key on chain once (``registerWitnessKey``), before the task runs when
        the witness is up by then; trainers seal openings to the keys the chain has. Only once the
        chain has it does this witness's referee and challenger use it (until then a drawn DP
        training segment is left alone rather than escalated: the trainer could not seal to it)."""
        if self._dispute_key_settled or self._dispute_key is None:
            return
        registered, _ = self.market.get_enclave(self.cfg.task_id, self.signer.address)
        key = self._dispute_key.pubkey
        if registered == b"\x00" * 32:
            try:
                self.market.register_witness_key(self.signer, self.cfg.task_id, key)
            except ChainError as exc:  # retried next step (a sealed task says so in the log)
                log.info("witness.dispute_key_deferred", reason=exc.error_name or str(exc)[:160])
                return
            log.info("witness.dispute_key_registered", task_id=self.cfg.task_id, pubkey="0x" + key.hex())
        elif registered != key:
            log.error(
                "witness.dispute_key_mismatch",
                task_id=self.cfg.task_id,
                registered="0x" + registered.hex(),
                keystore="0x" + key.hex(),
                reason="the chain has another key for this witness: it cannot read the noise openings",
            )
            self._dispute_key_settled = True
            return
        assert self.ctx is not None
        self.ctx.enclave = self._dispute_key  # the key the referee code unseals openings with
        self._dispute_key_settled = True

    def _ensure_enclave_registered(self) -> None:
        """A Confidential task's witness registers its attested enclave once (the sponsor seals the
        validation shard, and the training shards it re-executes as a referee, to it)."""
        if self._enclave_registered:
            return
        if self._enclave is None:
            raise KeyConfigError(
                f"task {self.cfg.task_id} is Confidential: set enclave_keystore and enclave_attestation"
            )
        registered, _ = self.market.get_enclave(self.cfg.task_id, self.signer.address)
        e = self._enclave
        if registered == b"\x00" * 32:
            assert self.ctx is not None
            check_task_policy(self.market, self.cfg.task_id, self.ctx.spec)  # the allow-list the spec names
            self.market.register_witness_enclave(self.signer, self.cfg.task_id, e.key.pubkey, e.measurement, e.report)
            log.info("witness.enclave_registered", task_id=self.cfg.task_id, enclave="0x" + e.key.pubkey.hex())
        elif registered != e.key.pubkey:
            raise KeyConfigError(
                f"task {self.cfg.task_id}: this witness registered enclave 0x{registered.hex()}, not this keystore's"
            )
        self._enclave_registered = True

    def run(self, *, max_iterations: int | None = None) -> None:
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        with claim_state_dir(self.cfg.state_dir):
            if self.cfg.metrics_port:
                self.metrics.serve(self.cfg.metrics_port)
            run_forever(
                self.step,
                poll_interval_s=self.cfg.poll_interval_s,
                role="witness",
                metrics=self.metrics.loop,
                max_iterations=max_iterations,
                wake=NewBlock(self.market.w3),
            )

    def step(self) -> bool:
        task_id = self.cfg.task_id
        if self._awaiting is None:
            self._awaiting = TaskNotPosted(self.market.task_count, task_id, role="witness")
        if self._awaiting.waiting():
            return False
        t = self.market.task(task_id)
        if t.status in (TaskStatus.SEALED, TaskStatus.CANCELLED):
            amount = self.market.claim(self.signer)
            if amount:
                log.info("witness.claimed", wei=amount)
            return True
        if t.status == TaskStatus.ENROLLING and self._enrollment_closed(t):
            return True
        if t.status in (TaskStatus.ENROLLING, TaskStatus.RUNNING):
            self._ensure_bonded()
        if self.ctx is None:
            # While the trainers enroll: the first round's vote then waits for nothing else.
            self._enclave = agent_enclave(self.cfg)
            enclave_key = self._enclave.key if self._enclave is not None else None
            self.ctx = TaskContext.load(self.market, self.blobs, task_id, enclave=enclave_key)
            self._load_dispute_key()
            if t.status == TaskStatus.ENROLLING:
                self._eval_model = self.ctx.build_model()
                dataset = self.ctx.spec.dataset
                # a Confidential task's validation shard opens once the sponsor seals it to this enclave
                if dataset.validation_hash and dataset.validation_uri and self.ctx.spec.confidential is None:
                    self.ctx.validation_shard()
        if self.ctx.spec.confidential is not None and t.status in (TaskStatus.ENROLLING, TaskStatus.RUNNING):
            self._ensure_enclave_registered()
        if t.status in (TaskStatus.ENROLLING, TaskStatus.RUNNING, TaskStatus.AWAITING_SEAL):
            self._ensure_dispute_key_registered()
        if t.status == TaskStatus.ENROLLING:
            return False
        spec = self.ctx.spec
        if t.status == TaskStatus.AWAITING_SEAL:
            self._court_duties(t)
            if pending_time(self.market.w3) >= t.last_closed_at + spec.challenge_window_s:
                self._send("seal", lambda: self.market.seal(self.signer, task_id))
            return False
        # The open round first (a complete round is voted on at once, the next one opens sooner),
        # then the court duties on closed rounds, whatever the round work did.
        try:
            self._round_work(t)
        finally:
            self._court_duties(t)
        return False

    def _enrollment_closed(self, t: TaskView) -> bool:
        """Past the enrollment deadline (chain/enrollment.py; anyone may act): with at least
        ``minTrainers`` enrolled start the run (False: go on, the witness votes on it);
        under-filled, cancel the task and withdraw the bond (True: done, one line)."""
        now = pending_time(self.market.w3)
        return enrollment.act_if_closed(self.market, self.signer, t, now, "witness", log) == "cancelled"

    def _round_work(self, t: TaskView) -> None:
        """Vote on the open round once it closes, or carry it forward after its grace window.

        A round closes at its deadline, or earlier once its work is complete: every active trainer
        committed, so nothing more can be committed and the contract counts votes at once (early
        close). A slow honest trainer is still covered by the deadline: until it commits (or the
        deadline passes) the witness waits."""
        assert self.ctx is not None
        spec = self.ctx.spec
        task_id = self.cfg.task_id
        now = pending_time(self.market.w3)
        round_ = t.current_round
        deadline = self.market.commit_deadline(task_id)  # extended once when nobody committed
        if now <= deadline and not (self.cfg.vote_early and self.market.round_work_complete(task_id, round_)):
            return
        if now > deadline and self.market.round(task_id, round_).committed_mask == 0:
            # Nobody committed, even in the extension: no vote, no fee; the round closes empty.
            self._send("carry_forward", lambda: self.market.carry_forward(self.signer, task_id, round_))
            return
        if self.market.vote_of(task_id, round_, self.signer.address) == ZERO:
            if self._awaiting_reveals(round_, now, deadline):
                return
            self._vote(round_, t.state_root)
        elif now > deadline + spec.grace_window_s:
            self._send("carry_forward", lambda: self.market.carry_forward(self.signer, task_id, round_))

    def _awaiting_reveals(self, round_: int, now: int, deadline: int) -> bool:
        """Commit, then reveal (docs/protocol.md §10.6): trainers publish their payloads only once
        the commit phase closed. Within the reveal window after the close, True (wait) while a
        committed payload is not on the blob store yet; after it, False: vote without it."""
        assert self.ctx is not None
        began = self._reveal_from.setdefault(round_, min(deadline, now))
        if now > began + reveal_window_s(self.ctx.spec.grace_window_s):
            return False
        committed = self.market.round(self.cfg.task_id, round_).committed_mask
        for fragment in range(256):
            if committed >> fragment & 1:
                s = self.market.submission(self.cfg.task_id, round_, fragment)
                try:
                    if self.blobs.has(s.payload_hash):
                        continue
                except BlobUnavailable:
                    # Our store is down: nobody can reveal to it now. The window starts again once
                    # it is back, so an honest trainer's outbox has a whole window to flush; the
                    # failure goes on to the agent loop, which backs off and reports the witness
                    # degraded (once) until the store answers again.
                    self._reveal_from[round_] = now
                    raise
                except SynclineError:
                    pass
                log.debug("witness.awaiting_reveal", round=round_, fragment=fragment)
                return True
        return False

    # ------------------------------------------------------------------ round work

    def _vote(self, round_: int, previous_root: str) -> None:
        ctx = self.ctx
        assert ctx is not None
        stored = self._stored_vote(round_, previous_root)
        if stored is not None:
            vote, signature = stored
            log.info("witness.vote_resent", round=round_, prev_state_root=previous_root[:18])
            announce_vote(self.blobs, vote, signature, self.signer.address)
            self._send("finalize", lambda: self.market.send_vote(self.signer, vote, signature))
            return
        timings: dict[str, float] = {}
        cheating = self.cfg.misbehave is not None and round_ >= CHEAT_FROM_ROUND
        try:
            if use_disk_state(ctx.layout.numel, self.cfg.state_on_disk) and self.cfg.misbehave is None:
                outcome = self._compute_on_disk(round_, previous_root, timings)
            else:
                outcome = self._compute_in_memory(round_, previous_root, cheating, timings)
        except StateUnavailable as exc:
            if exc.outage:  # the store is down: the loop backs off and reports degraded health
                raise
            log.info("witness.waiting_for_state", round=round_, reason=str(exc))
            return
        result, loss = outcome
        for fragment, reason in result.rejected.items():
            self.metrics.rejected.labels(reason=reason.split(":")[0].split(" (")[0]).inc()
            log.info("witness.rejected", round=round_, fragment=fragment, reason=reason)
        vote, signature = self.market.sign_vote(
            self.signer,
            ctx.task_id,
            round_,
            result.state_root,
            result.aggregate_root,
            result.accepted_mask,
            prev_state_root=previous_root,
            metric=int(loss * METRIC_SCALE),
        )
        # Durable before published: after a crash or a failed finalize, this vote is re-sent as is.
        append_durable(
            self.cfg.state_dir,
            VOTES_FILE,
            {
                "task": ctx.task_id,
                "round": round_,
                "prev": previous_root.lower(),
                "vote": encode_vote(vote, signature).decode(),
            },
        )
        self._announce(vote, signature, equivocate=cheating and self.cfg.misbehave == "equivocate")
        began = time.perf_counter()
        self._send("finalize", lambda: self.market.send_vote(self.signer, vote, signature))
        timings["finalize_s"] = time.perf_counter() - began
        self.metrics.round.set(round_)
        self.metrics.validation_metric.labels(name=ctx.adapter.metric_name).set(loss)
        if ctx.adapter.metric_name == "validation_loss":
            self.metrics.validation_loss.set(loss)
        self.metrics.finalized.inc()
        log.info(
            "witness.voted",
            round=round_,
            rule=result.rule_used,
            accepted=bin(result.accepted_mask).count("1"),
            rejected=len(result.rejected),
            **{ctx.adapter.metric_name: round(loss, 4)},
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
                ctx.adapter.metric_name: loss,
                "timings": {k: round(v, 3) for k, v in timings.items()},
                "voted_at": time.time(),
            },
        )

    def _compute_in_memory(
        self, round_: int, previous_root: str, cheating: bool, timings: dict[str, float]
    ) -> tuple[RoundResult | DiskRoundResult, float]:
        """The round with the state and payloads in memory (small models, and the misbehaviours)."""
        ctx = self.ctx
        assert ctx is not None
        started = time.perf_counter()
        computed = self._computed
        previous = computed[1] if computed and computed[0] == previous_root.lower() else ctx.fetch_state(previous_root)
        submissions = ctx.committed_submissions(round_)
        timings["fetch_s"] = time.perf_counter() - started
        started = time.perf_counter()
        result = ctx.compute_round(previous, submissions)
        timings["compute_s"] = time.perf_counter() - started
        self.metrics.aggregate_seconds.set(timings["compute_s"])
        if cheating and self.cfg.misbehave == "bad-aggregate":
            result = self._tamper(result)
        if cheating and self.cfg.misbehave == "censor" and result.accepted_mask:
            victim = (result.accepted_mask & -result.accepted_mask).bit_length() - 1
            result = ctx.compute_round(previous, [s for s in submissions if s.fragment != victim])
            log.warning("witness.misbehaving", mode="censor", round=round_, left_out=victim)
        self._computed = ("0x" + result.state_root.hex(), result.state)
        started = time.perf_counter()
        # In its own slot of the alias: no one can displace it.
        ctx.publish_state(result.state, self.signer.account, root=result.state_root)
        timings["publish_s"] = time.perf_counter() - started
        started = time.perf_counter()
        loss = self._validation_metric(result.state)
        timings["eval_s"] = time.perf_counter() - started
        return result, loss

    def _compute_on_disk(
        self, round_: int, previous_root: str, timings: dict[str, float]
    ) -> tuple[RoundResult | DiskRoundResult, float]:
        """The round with the state and payloads in files (large models): the previous state is
        the one this witness computed (or one downloaded and verified); the round updates that
        file in place (one state on disk) and it is published with ``put_file``; memory stays at
        a range. If the chain then finalizes another state, the next round downloads it."""
        ctx = self.ctx
        assert ctx is not None
        states = self.cfg.state_dir / "states"
        states.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        previous = self._held
        if previous is None or previous.state_root_hex != previous_root.lower():
            previous, _ = ctx.fetch_state_file(previous_root, states / f"{previous_root.lower()}.safetensors")
            self._hold(previous)
        payloads = ctx.committed_payload_files(round_, self.cfg.state_dir / "payloads")
        timings["fetch_s"] = time.perf_counter() - started
        started = time.perf_counter()
        self._held = None  # updated in place: it no longer holds the previous state
        state, result = ctx.compute_round_file(
            previous, payloads, states / f"round-{round_}.safetensors", in_place=True
        )
        timings["compute_s"] = time.perf_counter() - started
        self.metrics.aggregate_seconds.set(timings["compute_s"])
        state.move_to(states / f"{state.state_root_hex}.safetensors")
        started = time.perf_counter()
        ctx.publish_state_file(state, self.signer.account)  # its own slot of the alias
        timings["publish_s"] = time.perf_counter() - started
        started = time.perf_counter()
        loss = self._validation_metric(state)
        timings["eval_s"] = time.perf_counter() - started
        self._hold(state)
        return result, loss

    def _hold(self, state: StateFile) -> None:
        """Keep ``state`` as the one the next round builds on; drop the file held before."""
        if self._held is not None and self._held.path != state.path:
            self._held.remove()
        self._held = state

    def _stored_vote(self, round_: int, previous_root: str) -> tuple[Vote, bytes] | None:
        """The vote this witness already signed for (task, round, prevStateRoot), if any."""
        task_id = self.cfg.task_id
        for record in reversed(read_records(self.cfg.state_dir, VOTES_FILE)):
            if (record.get("task"), record.get("round"), record.get("prev")) != (
                task_id,
                round_,
                previous_root.lower(),
            ):
                continue
            try:
                signed = decode_vote(str(record.get("vote", "")).encode(), self.market.domain())
            except GossipError as exc:
                log.warning("witness.stored_vote_unreadable", round=round_, error=str(exc))
                continue
            if signed.signer.lower() == self.signer.address.lower():
                return signed.message, signed.signature
        return None

    def _announce(self, vote: Vote, signature: bytes, *, equivocate: bool) -> None:
        """Announce the signed vote (gossip). TESTS AND DEMOS ONLY when ``equivocate``: announce a
        signed vote for a different state root than the one cast on chain."""
        if not equivocate:
            announce_vote(self.blobs, vote, signature, self.signer.address)
            return
        other = replace(vote, state_root=keccak(b"equivocation" + vote.state_root))
        _, other_signature = self.market.sign_vote(
            self.signer,
            other.task_id,
            other.round,
            other.state_root,
            other.aggregate_root,
            other.accepted_mask,
            prev_state_root=other.prev_state_root,
            metric=other.metric,
        )
        announce_vote(self.blobs, other, other_signature, self.signer.address)
        log.warning("witness.misbehaving", mode="equivocate", round=vote.round)

    def _court_duties(self, task: TaskView) -> None:
        """Referee open training claims; unless misbehaving, audit closed rounds and prove faults."""
        ctx = self.ctx
        assert ctx is not None
        if self.referee is None:
            # a large model's court (referee and challenger) judges from files, as the round is computed
            self._court_files = court_files(self.cfg, ctx)
            self.referee = RefereeDuty(ctx, self.signer, files=self._court_files)
        if self.challenger is None and self.cfg.challenge and self.cfg.misbehave is None:
            self.challenger = court_challenger(
                self.cfg, self.signer, self.market, self.blobs, ctx, withdraw=False, files=self._court_files
            )
        self._defer_on_error(self.referee.step)
        if self.defence is None and self.cfg.misbehave is None:
            self.defence = CensorshipDefence(
                self.market,
                self.signer,
                self.cfg.task_id,
                find_malformed=self._malformed_chunk,
                now=lambda: pending_time(self.market.w3),
                chunk_count=num_chunks(ctx.layout.numel),
            )
        if self.defence is not None:
            self._defer_on_error(self.defence.step)
        if self.challenger is not None:
            challenger = self.challenger
            self._defer_on_error(lambda: challenger.step(task))

    def _malformed_chunk(self, round_: int, fragment: int) -> MalformedChunk | None:
        """A malformed chunk of an excluded submission, if this witness holds its payload."""
        ctx = self.ctx
        assert ctx is not None
        s = self.market.submission(ctx.task_id, round_, fragment)
        try:
            payload = ctx.blobs.fetch(s.uri, expected_digest=s.payload_hash, max_bytes=ctx.max_payload_bytes)
        except SynclineError:
            return None
        chunk_root = bytes.fromhex(s.chunk_root[2:])
        return find_malformed_chunk(payload, chunk_root, numel=ctx.layout.numel, bits=ctx.spec.gradient_bits)

    def _defer_on_error(self, duty: Callable[[], None]) -> None:
        """Run a court duty; a chain or state problem defers it to the next step."""
        try:
            duty()
        except (ChainError, StateUnavailable) as exc:
            log.info("witness.court_duty_deferred", reason=str(exc).splitlines()[0][:160])

    def _validation_metric(self, state: TrainingState | StateFile) -> float:
        """The task's validation metric of ``state`` (its modality's: the validation loss of a
        language task, top-1 accuracy, MASE): what the vote carries x 1e6."""
        ctx = self.ctx
        assert ctx is not None
        if self._eval_model is None:
            self._eval_model = ctx.build_model()
        load_weights(self._eval_model, state)
        return ctx.adapter.metric(
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

    def _ensure_bonded(self) -> None:
        """Post the task's witness bond once (a bonded witness, or a task without a bond, sends nothing)."""
        if self._bonded:
            return
        try:
            receipt = self.market.ensure_witness_bonded(self.signer, self.cfg.task_id)
        except ChainError as exc:
            log.warning("witness.bond_failed", error=str(exc))
            return
        self._bonded = True
        if receipt is not None:
            log.info("witness.bonded", wei=self.market.witness_bond(self.cfg.task_id))

    def _send(self, what: str, call: Callable[[], object]) -> None:
        try:
            call()
        except ChainError as exc:
            # Losing a race (someone else sealed / carried forward / the round moved on) is normal.
            log.info("witness.call_skipped", what=what, reason=exc.error_name or str(exc)[:120])
