"""Independent re-checking of one closed round: every fault the court can punish.

The auditor reads only the chain, the blob store and the announced (gossiped) signed messages; it
trusts nothing a witness says. For each closed round it reports, cheapest check first:

- trainer equivocation: a valid announced commitment that differs from the one committed on chain;
- witness equivocation: a valid announced vote that differs from the vote the witness cast;
- aggregation fraud: the finalized state is not the rule and outer step applied to the accepted
  inputs (the proof opens the first differing chunk);
- censorship: a committed submission that is valid but was left out (rules that keep every valid
  input: not Krum / Multi-Krum);
- training fraud: an accepted submission whose inner-loop segment does not re-execute to its
  committed checkpoint (or whose payload does not derive from its last checkpoint), or, in an
  on-demand task, whose drawn segment its trainer did not publish by the spot-check deadline (a
  claim the trainer must answer on chain, see :mod:`syncline.protocol.spot_checks`), or, in an
  eager task, whose committed checkpoints stayed unavailable past the same deadline
  (:mod:`syncline.court.withheld`: one claim per submission).

For a large model (``state_on_disk``) the auditor is given :class:`~syncline.court.files.CourtFiles`:
the round is recomputed on disk, as the witnesses compute it (the previous state in a file, the
payloads in files, ``TaskContext.compute_round_file`` on a copy), the left-out payloads are
validated from their files, and the state it computed is kept as the next round's start (and
the start of the training checks); only building an aggregation-fraud proof, once the roots
differ, reads the states into memory.

Nothing the auditor could not fetch is ever a finding: a check whose data (a state, a payload, a
manifest, a checkpoint) is not in hand ends :class:`~syncline.court.referee.Undecided`, marks the
round ``incomplete`` and is run again on a later step, while the round is still in its window.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from syncline.chain.market import MarketClient, RoundView
from syncline.court.files import CourtFiles
from syncline.court.findings import (
    AggregationFraud,
    Censorship,
    Finding,
    TrainerEquivocation,
    TrainingFraud,
    WitnessEquivocation,
)
from syncline.court.proofs import build_aggregation_proof
from syncline.court.referee import PRIVATE_UNREVEALED, Outcome, Unanswered, Undecided
from syncline.errors import SynclineError
from syncline.observability import get_logger
from syncline.protocol.disk_round import PayloadFile, open_payload
from syncline.protocol.enums import AggregationRule, RoundStatus
from syncline.protocol.quantization import QuantizedGradient
from syncline.protocol.signed_messages import Commitment, Domain, Vote
from syncline.protocol.state import TrainingState
from syncline.protocol.streaming import FileRegion
from syncline.protocol.sync_round import CommittedSubmission, validate_submission
from syncline.run.context import StateUnavailable, TaskContext, remove_payload_files
from syncline.run.gossip import SignedCommitment, SignedVote, read_commitment, read_vote

log = get_logger("syncline.court")

_S = TypeVar("_S", CommittedSubmission, PayloadFile)
"""A committed payload in memory or in a file (both have ``fragment`` and ``fetch_error``)."""

# Rules whose aggregate the court recomputes chunk by chunk (``proveAggregationFraud``).
PROVABLE_RULES = (AggregationRule.MEAN, AggregationRule.TRIMMED_MEAN, AggregationRule.COORDINATE_MEDIAN)
# Rules that may leave valid inputs out: no censorship claim against them.
EXCLUDING_RULES = (AggregationRule.KRUM, AggregationRule.MULTI_KRUM)


TrainingCheck = Outcome | Unanswered | None
"""The first guilty segment's verdict, Undecided when a segment could not be judged (its data not
in hand: audit again later, never accuse), Unanswered when an on-demand task's drawn segment was
not published in time (a claim the trainer must answer), or None when all checked segments pass."""
TrainingChecker = Callable[[TaskContext, int, int], TrainingCheck]


@dataclass
class RoundAuditor:
    """Finds the provable faults of one closed round."""

    ctx: TaskContext
    domain: Domain
    training_checker: TrainingChecker | None = None
    # Set by ``audit`` when a check could not judge yet (a state or checkpoint blob not available):
    # the caller audits the round again later instead of treating it as clean.
    incomplete: bool = False
    # (round, fragment) whose training checks passed: a re-audit of an incomplete round skips them.
    cleared: set[tuple[int, int]] = field(default_factory=set)
    # Rounds whose aggregation and censorship checks ran whole (every input in hand): a re-audit
    # of a round still waiting for a training check does not recompute the round.
    recomputed: set[int] = field(default_factory=set)
    # A large model's auditor keeps the states and payloads in files here (None: in memory).
    files: CourtFiles | None = None

    @property
    def market(self) -> MarketClient:
        return self.ctx.market

    def audit(self, round_: int) -> Iterator[Finding]:
        """Yield each fault as soon as it is found (cheapest checks first), so the caller can
        prove an equivocation before spending minutes re-executing training segments."""
        self.incomplete = False
        rr = self.market.round(self.ctx.task_id, round_)
        yield from self.trainer_equivocations(round_)
        yield from self.witness_equivocations(round_)
        if rr.status != RoundStatus.FINALIZED:
            return
        if round_ not in self.recomputed:
            fraud: AggregationFraud | None = None
            if self.files is None:
                accepted, left_out = self._inputs(round_, rr)
                fraud = self.aggregation_fraud(round_, rr, accepted) if accepted else None
                found = [] if fraud is not None else self.censorship(round_, left_out)
            else:
                fraud, found = self._recompute_on_disk(round_, rr)
            if fraud is not None:
                # The round will be voided: its exclusions and inputs no longer matter.
                yield fraud
                return
            yield from found
            if not self.incomplete:
                self.recomputed.add(round_)
        rr = self.market.round(self.ctx.task_id, round_)
        if rr.status == RoundStatus.FINALIZED:
            yield from self.training_fraud(round_, rr)
        if not self.incomplete and self.files is not None:
            self.files.release(rr.prev_state_root)  # no check of this round needs its start state any more

    def _masks(self, rr: RoundView) -> tuple[int, int]:
        """The fragments the aggregation check needs (the accepted ones, if the rule is provable)
        and those the censorship check needs (the left-out ones, if the rule keeps every valid
        input)."""
        rule = self.ctx.spec.aggregation.rule
        accepted = rr.accepted_mask if rule in PROVABLE_RULES else 0
        left_out = 0 if rule in EXCLUDING_RULES else rr.committed_mask & ~rr.accepted_mask
        return accepted, left_out

    def _split(self, round_: int, subs: Sequence[_S], accepted: int, left_out: int) -> tuple[list[_S], list[_S]]:
        """``subs`` (fetched once, ascending fragment order) split by the masks; an accepted payload
        we could not fetch marks the audit incomplete (unavailable to us is not invalid: the round
        is judged again once it is in hand; a left-out one is no claim, and no reason to retry)."""
        for sub in subs:
            if sub.fetch_error is not None and accepted >> sub.fragment & 1:
                log.info("challenger.payload_unavailable", round=round_, fragment=sub.fragment, reason=sub.fetch_error)
                self.incomplete = True
        return [s for s in subs if accepted >> s.fragment & 1], [s for s in subs if left_out >> s.fragment & 1]

    def _inputs(self, round_: int, rr: RoundView) -> tuple[list[CommittedSubmission], list[CommittedSubmission]]:
        """The submissions the aggregation and censorship checks need, every payload fetched once."""
        accepted, left_out = self._masks(rr)
        if accepted == 0 and left_out == 0:
            return [], []
        return self._split(round_, self.ctx.committed_submissions(round_, rr.committed_mask), accepted, left_out)

    def _recompute_on_disk(self, round_: int, rr: RoundView) -> tuple[AggregationFraud | None, list[Censorship]]:
        """The aggregation and censorship checks with the state and the payloads in files."""
        assert self.files is not None
        accepted_mask, left_out_mask = self._masks(rr)
        if accepted_mask == 0 and left_out_mask == 0:
            return None, []
        subs = self.ctx.committed_payload_files(round_, self.files.payloads, rr.committed_mask)
        try:
            accepted, left_out = self._split(round_, subs, accepted_mask, left_out_mask)
            fraud = self._aggregation_fraud_on_disk(round_, rr, accepted) if accepted else None
            return fraud, [] if fraud is not None else self.censorship(round_, left_out)
        finally:
            remove_payload_files(subs)

    def _aggregation_fraud_on_disk(
        self, round_: int, rr: RoundView, accepted: list[PayloadFile]
    ) -> AggregationFraud | None:
        """:meth:`aggregation_fraud` on disk: the round recomputed on a copy of the previous
        state's file; the state it gives is kept for the next round when its root is the one
        finalized. Roots that differ are proven with the states in memory (a fault: rare)."""
        assert self.files is not None
        try:
            previous = self.files.state(self.ctx, rr.prev_state_root)
        except StateUnavailable as exc:
            log.info("challenger.state_unavailable", round=round_, reason=str(exc))
            self.incomplete = True
            return None
        expected, result = self.ctx.compute_round_file(previous, list(accepted), self.files.work_path(round_))
        if "0x" + result.state_root.hex() == rr.state_root:
            self.files.adopt(expected)
            return None
        expected.remove()
        if result.rejected:
            # An accepted input the court cannot open: no chunk proof can be built on it.
            for fragment, reason in result.rejected.items():
                log.info("challenger.accepted_input_unusable", round=round_, fragment=fragment, reason=reason)
            return None
        log.info(
            "challenger.roots_differ", round=round_, expected="0x" + result.state_root.hex(), finalized=rr.state_root
        )
        in_memory = self.ctx.committed_submissions(round_, rr.accepted_mask)
        return self.aggregation_fraud(round_, rr, [s for s in in_memory if s.fetch_error is None])

    def _validate(self, sub: CommittedSubmission) -> tuple[QuantizedGradient | None, str | None]:
        ctx = self.ctx
        return validate_submission(
            sub, numel=ctx.layout.numel, bits=ctx.spec.gradient_bits, max_bytes=ctx.max_payload_bytes
        )

    # ------------------------------------------------------------------ equivocation

    def _onchain_commitments(self, round_: int) -> dict[int, SignedCommitment]:
        out: dict[int, SignedCommitment] = {}
        for ev in self.market.get_logs("SubmissionCommitted", taskId=self.ctx.task_id, round=round_):
            a = ev["args"]
            message = Commitment(
                task_id=self.ctx.task_id,
                round=round_,
                fragment=int(a["fragment"]),
                payload_hash=bytes(a["payloadHash"]),
                chunk_root=bytes(a["chunkRoot"]),
                checkpoint_root=bytes(a["checkpointRoot"]),
                uri=str(a["uri"]),
            )
            out[message.fragment] = SignedCommitment(message, bytes(a["signature"]), str(a["trainer"]))
        return out

    def trainer_equivocations(self, round_: int) -> list[TrainerEquivocation]:
        found: list[TrainerEquivocation] = []
        for fragment, onchain in self._onchain_commitments(round_).items():
            announced = read_commitment(self.ctx.blobs, self.domain, self.ctx.task_id, round_, fragment)
            if announced is None or announced.signer.lower() != onchain.signer.lower():
                continue
            if announced.message.conflicts_with(onchain.message):
                found.append(TrainerEquivocation(round_, fragment, onchain, announced))
        return found

    def witness_equivocations(self, round_: int) -> list[WitnessEquivocation]:
        found: list[WitnessEquivocation] = []
        for ev in self.market.get_logs("VoteCast", taskId=self.ctx.task_id, round=round_):
            a = ev["args"]
            witness = str(a["witness"])
            message = Vote(
                task_id=self.ctx.task_id,
                round=round_,
                prev_state_root=bytes(a["prevStateRoot"]),
                state_root=bytes(a["stateRoot"]),
                aggregate_root=bytes(a["aggregateRoot"]),
                accepted_mask=int(a["acceptedMask"]),
                metric=int(a["metric"]),
            )
            onchain = SignedVote(message, bytes(a["signature"]), witness)
            announced = read_vote(self.ctx.blobs, self.domain, self.ctx.task_id, round_, witness)
            if announced is None or announced.signer.lower() != witness.lower():
                continue
            if announced.message.conflicts_with(message):
                found.append(WitnessEquivocation(round_, witness, onchain, announced))
        return found

    # ------------------------------------------------------------------ aggregation

    def _state(self, root: str, round_: int) -> TrainingState | None:
        """The state behind ``root``, or ``None`` (the round is then marked to be audited again)."""
        try:
            return self.ctx.fetch_state(root)
        except StateUnavailable as exc:
            log.info("challenger.state_unavailable", round=round_, reason=str(exc))
            self.incomplete = True
            return None

    def aggregation_fraud(
        self, round_: int, rr: RoundView, accepted: list[CommittedSubmission]
    ) -> AggregationFraud | None:
        """Recompute the round from its accepted inputs; a different state root is proven by
        opening the first differing chunk (the finalized state is fetched only then)."""
        previous = self._state(rr.prev_state_root, round_)
        if previous is None:
            return None
        expected = self.ctx.compute_round(previous, accepted)
        if "0x" + expected.state_root.hex() == rr.state_root:
            return None
        if expected.rejected:
            # An accepted input the court cannot open: no chunk proof can be built on it.
            for fragment, reason in expected.rejected.items():
                log.info("challenger.accepted_input_unusable", round=round_, fragment=fragment, reason=reason)
            return None
        claimed = self._state(rr.state_root, round_)
        if claimed is None:
            return None
        gradients: list[QuantizedGradient] = []
        for sub in accepted:
            qg, _ = self._validate(sub)
            assert qg is not None  # compute_round rejected none of them
            gradients.append(qg)
        opening = build_aggregation_proof(
            task_id=self.ctx.task_id,
            round_=round_,
            accepted=gradients,
            previous=previous,
            expected=expected.state,
            claimed=claimed,
        )
        return None if opening is None else AggregationFraud(round_, opening)

    # ------------------------------------------------------------------ censorship

    def censorship(
        self, round_: int, left_out: Sequence[CommittedSubmission] | Sequence[PayloadFile]
    ) -> list[Censorship]:
        """Left-out submissions that are valid (the rule keeps every valid input); their payloads
        in memory, or in files (validated range by range, as a witness on disk validates them)."""
        found: list[Censorship] = []
        for sub in left_out:
            if sub.fetch_error is not None:
                continue  # not in hand: never a claim (the round is audited again)
            if isinstance(sub, PayloadFile):
                gradient, reason = open_payload(
                    sub,
                    numel=self.ctx.layout.numel,
                    bits=self.ctx.spec.gradient_bits,
                    max_bytes=self.ctx.max_payload_bytes,
                )
                valid = gradient is not None
                if gradient is not None and isinstance(gradient.values, FileRegion):
                    gradient.values.close()
            else:
                qg, reason = self._validate(sub)
                valid = qg is not None
            if valid:
                found.append(Censorship(round_, sub.fragment))
            else:
                log.info("challenger.exclusion_justified", round=round_, fragment=sub.fragment, reason=reason)
        return found

    # ------------------------------------------------------------------ training

    def training_fraud(self, round_: int, rr: RoundView) -> Iterator[TrainingFraud]:
        if self.training_checker is None:
            return
        live = rr.accepted_mask & ~rr.revoked_mask
        for fragment in range(256):
            if not live >> fragment & 1 or (round_, fragment) in self.cleared:
                continue
            try:
                outcome = self.training_checker(self.ctx, round_, fragment)
            except SynclineError as exc:  # its start state or shards are not available yet
                log.info("challenger.training_check_deferred", round=round_, fragment=fragment, reason=str(exc)[:160])
                self.incomplete = True
                continue
            if isinstance(outcome, Undecided) and outcome.reason.startswith(PRIVATE_UNREVEALED):
                # a DP task's segment cannot be replayed without the noise opening: not judged, not retried
                log.info("challenger.training_check_private", round=round_, fragment=fragment, reason=outcome.reason)
                self.cleared.add((round_, fragment))
            elif isinstance(outcome, Undecided):  # our fetch failed: audit again later, never accuse
                log.info("challenger.training_check_undecided", round=round_, fragment=fragment, reason=outcome.reason)
                self.incomplete = True
            elif isinstance(outcome, Unanswered) or (outcome is not None and outcome.guilty):
                trainer = self.market.submission(self.ctx.task_id, round_, fragment).trainer
                yield TrainingFraud(round_, fragment, outcome.segment, outcome.reason, trainer.lower())
            else:
                self.cleared.add((round_, fragment))
