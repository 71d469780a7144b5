"""A witness's duties toward the court: referee training-fraud claims against its task.

For every open training-fraud challenge on the task, the witness re-executes the named segment
from the trainer's published checkpoint on CPU in fp32 (a bit-exact match with a ``cpu-fp32``
trainer acquits; anything else, another declared device class or other CPU kernels, is judged
against the spec's honest-divergence envelope) and votes
guilty or innocent. A witness
whose own bond was slashed cannot referee (the contract refuses it), and a vote it already cast is
never sent twice.

It votes only on a :class:`~syncline.court.referee.Verdict` (the data bound on chain in hand). When
it cannot judge (:class:`~syncline.court.referee.Undecided`, or its start state or shards are not
available) it retries on later steps until the claim's deadline, then abstains: its own fetch
failure is never a guilty vote. On an answered claim whose data is definitely absent from the
reachable store (:func:`~syncline.court.unavailable.segment_unavailable`) it votes ``Unavailable``
meanwhile, and keeps trying: a replay verdict replaces it once the data shows up (issue 27).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.court.files import CourtFiles
from syncline.court.referee import Undecided, referee_segment
from syncline.court.unavailable import segment_unavailable
from syncline.errors import ChainError, SynclineError
from syncline.observability import get_logger
from syncline.protocol.enums import ChallengeKind, ChallengeStatus
from syncline.run.context import TaskContext
from syncline.run.loop import pending_time

log = get_logger("syncline.witness")


@dataclass
class RefereeDuty:
    ctx: TaskContext
    signer: Signer
    # Challenges with nothing (more) to do here: other tasks or kinds, closed, or already voted on.
    decided: set[int] = field(default_factory=set)
    # Claims on which our standing verdict is Unavailable (a replay verdict may still replace it).
    unavailable: set[int] = field(default_factory=set)
    # A large model's referee replays from the state and checkpoints in files here (None: in memory).
    files: CourtFiles | None = None

    @property
    def market(self) -> MarketClient:
        return self.ctx.market

    def step(self) -> None:
        for challenge_id in range(1, self.market.challenge_count() + 1):
            if challenge_id in self.decided:
                continue
            c = self.market.challenge(challenge_id)
            ours = c.task_id == self.ctx.task_id and c.kind == ChallengeKind.TRAINING_FRAUD
            if not ours or c.status != ChallengeStatus.OPEN:
                self.decided.add(challenge_id)
                continue
            if pending_time(self.market.w3) > c.deadline:
                log.info("witness.referee_abstained", challenge=challenge_id, reason="deadline passed undecided")
                self.decided.add(challenge_id)
                continue
            self._referee(challenge_id, c.round, c.fragment, c.segment)

    def _referee(self, challenge_id: int, round_: int, fragment: int, segment: int) -> None:
        try:
            verdict = referee_segment(self.ctx, round_, fragment, segment, files=self.files)
        except SynclineError as exc:
            # Not a verdict on the trainer: a local problem (state not yet available, etc.). Retry later.
            log.info("witness.referee_deferred", challenge=challenge_id, reason=str(exc).splitlines()[0][:160])
            self._check_available(challenge_id, round_, fragment, segment)
            return
        if isinstance(verdict, Undecided):
            # A DP segment's noise opening is published with the answer to the claim, like its
            # checkpoints (docs/privacy.md): not in hand yet is our fetch's problem, not the trainer's.
            # The data bound on chain is not in hand (our fetch failed): retry until the deadline, never vote on it.
            log.info("witness.referee_undecided", challenge=challenge_id, segment=segment, reason=verdict.reason)
            self._check_available(challenge_id, round_, fragment, segment)
            return
        try:
            self.market.referee_vote(self.signer, challenge_id, verdict.guilty)
            log.info(
                "witness.refereed",
                challenge=challenge_id,
                round=round_,
                fragment=fragment,
                segment=segment,
                guilty=verdict.guilty,
                reason=verdict.reason,
            )
        except ChainError as exc:
            log.info("witness.referee_skipped", challenge=challenge_id, reason=exc.error_name or str(exc)[:160])
        self.decided.add(challenge_id)

    def _check_available(self, challenge_id: int, round_: int, fragment: int, segment: int) -> None:
        """Vote Unavailable (once) on an answered claim whose segment is definitely absent from the
        reachable store; anything less certain is our own problem and votes nothing."""
        if challenge_id in self.unavailable or not self.market.availability_demand(challenge_id).answered:
            return
        reason = segment_unavailable(self.ctx, round_, fragment, segment)
        if reason is None:
            return
        try:
            self.market.referee_unavailable(self.signer, challenge_id)
        except ChainError as exc:
            log.info("witness.referee_skipped", challenge=challenge_id, reason=exc.error_name or str(exc)[:160])
            if exc.error_name == "SynclineAlreadyRefereed":  # voted Unavailable before a restart
                self.unavailable.add(challenge_id)
            return
        self.unavailable.add(challenge_id)
        log.warning(
            "witness.referee_unavailable",
            challenge=challenge_id,
            round=round_,
            fragment=fragment,
            segment=segment,
            reason=reason,
        )
