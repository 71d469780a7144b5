"""A witness's defence of the rounds it voted against censorship claims.

A censorship claim says an on-time submission was left out of a finalized round. A witness that
voted that round's result defends it on chain:

* the submission was excluded for a malformed chunk (the witness holds the payload and its chunks
  open the committed chunk root): open that chunk with ``answerCensorship`` (the claim is rejected
  and its bond pays the witness);
* otherwise (payload withheld, bytes that do not open the commitment, published after the vote):
  ``demandAvailability`` — the accused trainer must open a chunk against its chunk root within the
  response window. Unanswered, the claim fails and its bond pays the demanders; answered, the
  data came only after the vote: the claim expires and nothing else moves (no slash, no fee
  given up, no credit to the trainer: docs/protocol.md §10.6);
* once the claim's deadline (and any response window) has passed: ``resolveCensorship``;
* a rollback longer than one batch is carried on with ``continueInvalidation`` (the seal waits).

``decide`` is pure (unit tested); ``CensorshipDefence`` reads the chain, asks ``decide`` and sends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

import torch

from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.errors import ChainError, candidate_failure
from syncline.observability import get_logger
from syncline.protocol import merkle
from syncline.protocol.chunking import gradient_chunk_contents, num_chunks
from syncline.protocol.enums import ChallengeKind, ChallengeStatus
from syncline.protocol.fixed_point import CHUNK_SIZE, read_safetensors
from syncline.protocol.hashing import keccak
from syncline.protocol.quantization import QuantizedGradient, _peek_metadata, _width

log = get_logger("syncline.witness")


class DefenceAction(Enum):
    """What a voter does next about one censorship claim."""

    NOTHING = "nothing"
    ANSWER_MALFORMED = "answer-malformed"
    DEMAND = "demand-availability"
    RESOLVE = "resolve"


@dataclass(frozen=True)
class ClaimView:
    """What ``decide`` needs to know about one open censorship claim."""

    deadline: int
    #: Response window of the availability demand (0: no demand yet).
    demand_deadline: int
    demand_answered: bool
    #: Whether this witness voted the finalized result of the claimed round (and is not the claimant).
    voted_result: bool
    demanded_by_me: bool


@dataclass(frozen=True)
class MalformedChunk:
    """A chunk of the excluded submission that opens its chunk root and breaks the chunk format."""

    index: int
    content: bytes
    proof: list[bytes]


def decide(claim: ClaimView, *, malformed: MalformedChunk | None, now: int) -> DefenceAction:
    """The next step of a voter about an open censorship claim at time ``now`` (pure)."""
    if now > claim.deadline:
        waiting = claim.demand_deadline != 0 and not claim.demand_answered and now <= claim.demand_deadline
        return DefenceAction.NOTHING if waiting else DefenceAction.RESOLVE
    if not claim.voted_result:
        return DefenceAction.NOTHING
    if malformed is not None:
        return DefenceAction.ANSWER_MALFORMED
    if not claim.demanded_by_me:
        return DefenceAction.DEMAND
    return DefenceAction.NOTHING


def payload_chunks(payload: bytes, *, numel: int, bits: int) -> list[bytes] | None:
    """The chunk contents of a gradient payload, decoded without the value checks of
    ``QuantizedGradient`` (those are what make a chunk malformed); ``None`` if it does not decode."""
    try:
        meta = _peek_metadata(payload, None)
        if meta["numel"] != numel or meta["bits"] != bits or meta["chunk_size"] != CHUNK_SIZE:
            return None
        _, _, dtype = _width(bits)
        tensors, _ = read_safetensors(
            payload, {"values": (dtype, (numel,)), "exponents": (torch.uint8, (num_chunks(numel),))}, max_bytes=None
        )
    except Exception as exc:  # any decoding failure of a trainer's bytes: not decodable
        candidate_failure(exc)
        return None
    raw = object.__new__(QuantizedGradient)
    object.__setattr__(raw, "bits", bits)
    object.__setattr__(raw, "values", tensors["values"])
    object.__setattr__(raw, "exponents", tensors["exponents"])
    return gradient_chunk_contents(raw)


def find_malformed_chunk(payload: bytes, chunk_root: bytes, *, numel: int, bits: int) -> MalformedChunk | None:
    """The first chunk of ``payload`` that the contract's chunk check rejects, if the payload's
    chunks open ``chunk_root`` (only then can the chunk be proven on chain); else ``None``."""
    contents = payload_chunks(payload, numel=numel, bits=bits)
    if contents is None:
        return None
    hashes = [keccak(c) for c in contents]
    if merkle.root(hashes) != chunk_root:
        return None
    limit, cap, _ = _width(bits)
    width = bits // 8
    for index, content in enumerate(contents):
        bad = content[1] > cap or any(
            int.from_bytes(content[2 + i : 2 + i + width], "big", signed=True) == -limit - 1
            for i in range(0, len(content) - 2, width)
        )
        if bad:
            return MalformedChunk(index, content, merkle.proof(hashes, index))
    return None


MalformedFinder = Callable[[int, int], MalformedChunk | None]
"""``(round, fragment) -> MalformedChunk | None``: the witness's evidence for an exclusion."""


@dataclass
class CensorshipDefence:
    """Defends every round this witness voted against censorship claims on its task."""

    market: MarketClient
    signer: Signer
    task_id: int
    find_malformed: MalformedFinder
    now: Callable[[], int]
    #: Chunks per submission (the demanded chunk is drawn from the claim id and this witness).
    chunk_count: int
    # Claims with nothing more to do here (other tasks or kinds, closed).
    done: set[int] = field(default_factory=set)

    def step(self) -> None:
        self._continue_rollback()
        for challenge_id in range(1, self.market.challenge_count() + 1):
            if challenge_id in self.done:
                continue
            c = self.market.challenge(challenge_id)
            ours = c.task_id == self.task_id and c.kind == ChallengeKind.CENSORSHIP
            if not ours or c.status != ChallengeStatus.OPEN:
                self.done.add(challenge_id)
                continue
            self._defend(challenge_id, c.round, c.fragment, c.deadline, c.challenger)

    def _continue_rollback(self) -> None:
        """Carry a pending rollback one batch further (the seal waits for it; anyone may send it)."""
        _, next_round, end = self.market.invalidation(self.task_id)
        if next_round >= end:
            return
        try:
            self.market.continue_invalidation(self.signer, self.task_id)
        except ChainError as exc:
            log.info("witness.rollback_skipped", reason=exc.error_name)
            return
        log.info("witness.rollback_continued", next_round=next_round, end=end)

    def _defend(self, challenge_id: int, round_: int, fragment: int, deadline: int, claimant: str) -> None:
        me = self.signer.address
        result = self.market.round(self.task_id, round_).result
        voted = self.market.vote_of(self.task_id, round_, me) == result and claimant.lower() != me.lower()
        demand = self.market.availability_demand(challenge_id)
        view = ClaimView(
            deadline=deadline,
            demand_deadline=demand.deadline,
            demand_answered=demand.answered,
            voted_result=voted,
            demanded_by_me=self.market.demanded_by(challenge_id, me),
        )
        now = self.now()
        malformed = self.find_malformed(round_, fragment) if voted and now <= deadline else None
        action = decide(view, malformed=malformed, now=now)
        if action is DefenceAction.NOTHING:
            return
        try:
            if action is DefenceAction.ANSWER_MALFORMED:
                assert malformed is not None
                self.market.answer_censorship(
                    self.signer, challenge_id, malformed.index, malformed.content, malformed.proof
                )
            elif action is DefenceAction.DEMAND:
                self.market.demand_availability(self.signer, challenge_id, self._chunk_to_demand(challenge_id))
            else:
                self.market.resolve_censorship(self.signer, challenge_id)
        except ChainError as exc:
            # A lost race (someone else answered or resolved first) is normal: re-read next step.
            log.info("witness.defence_skipped", challenge=challenge_id, action=action.value, reason=exc.error_name)
            return
        log.info("witness.defended", challenge=challenge_id, round=round_, fragment=fragment, action=action.value)

    def _chunk_to_demand(self, challenge_id: int) -> int:
        """A chunk the trainer cannot predict when it publishes only part of its payload."""
        seed = keccak(challenge_id.to_bytes(32, "big") + bytes.fromhex(self.signer.address[2:]))
        return int.from_bytes(seed, "big") % self.chunk_count


@dataclass
class AvailabilityResponder:
    """The accused trainer's side: opens every chunk demanded from one of its own submissions
    (read from its payload, proven against the chunk root it committed) in time, and answers every
    training claim against it (``answerTraining``) once the claimed segment's checkpoints are
    published and confirmed in the store (``segment_published``); an unanswered training claim
    convicts. While an answered claim is open it watches the referees' standing ``Unavailable``
    verdicts (``availabilityDemand``'s ``demanders``) and publishes the segment again on each new
    one: enough of them convict at the deadline (issue 27)."""

    market: MarketClient
    signer: Signer
    task_id: int
    fragment: int
    #: ``(round) -> payload bytes`` of this trainer's own submission (``None`` if it no longer has it).
    own_payload: Callable[[int], bytes | None]
    numel: int
    bits: int
    now: Callable[[], int]
    #: ``(round, segment) -> bool``: whether the claimed segment's checkpoints are published now
    #: (publishing them first when they are kept locally).
    segment_published: Callable[[int, int], bool] = lambda round_, segment: True
    done: set[int] = field(default_factory=set)
    #: Answered training claims still open: challenge id -> the Unavailable verdicts seen standing.
    answered: dict[int, int] = field(default_factory=dict)

    def step(self) -> None:
        me = self.signer.address.lower()
        for challenge_id in range(1, self.market.challenge_count() + 1):
            if challenge_id in self.done:
                continue
            c = self.market.challenge(challenge_id)
            if c.task_id == self.task_id and c.kind == ChallengeKind.TRAINING_FRAUD and c.accused.lower() == me:
                if c.status != ChallengeStatus.OPEN:
                    self.done.add(challenge_id)
                    self.answered.pop(challenge_id, None)
                elif challenge_id in self.answered:
                    self._republish_if_unavailable(challenge_id, c.round, c.segment)
                else:
                    self._answer_training(challenge_id, c.round, c.segment)
                continue
            ours = c.task_id == self.task_id and c.kind == ChallengeKind.CENSORSHIP and c.fragment == self.fragment
            if not ours or c.status != ChallengeStatus.OPEN:
                self.done.add(challenge_id)
                continue
            demand = self.market.availability_demand(challenge_id)
            if demand.deadline == 0:
                continue  # nothing demanded yet
            if demand.answered or self.now() > demand.deadline:
                self.done.add(challenge_id)
                continue
            self._answer(challenge_id, c.round, demand.chunk_index)

    def _answer_training(self, challenge_id: int, round_: int, segment: int) -> None:
        demand = self.market.availability_demand(challenge_id)
        if demand.answered:  # answered before (a restart): keep watching its verdicts
            self.answered[challenge_id] = 0
            return
        if self.now() > demand.deadline:
            self.done.add(challenge_id)
            return
        if not self.segment_published(round_, segment):
            log.info("trainer.training_answer_deferred", challenge=challenge_id, round=round_, segment=segment)
            return  # retried next step, within the response window
        try:
            self.market.answer_training(self.signer, challenge_id)
        except ChainError as exc:
            log.info("trainer.training_answer_skipped", challenge=challenge_id, reason=exc.error_name)
            return
        self.answered[challenge_id] = 0
        log.info("trainer.training_answered", challenge=challenge_id, round=round_, segment=segment)

    def _republish_if_unavailable(self, challenge_id: int, round_: int, segment: int) -> None:
        """A referee found the answered segment absent: publish it again (the upload may have been
        lost by the store since), so the referee replaces its verdict with a replay."""
        standing = self.market.availability_demand(challenge_id).demanders
        if standing <= self.answered[challenge_id]:
            self.answered[challenge_id] = standing
            return
        published = self.segment_published(round_, segment)
        log.warning(
            "trainer.segment_republished",
            challenge=challenge_id,
            round=round_,
            segment=segment,
            unavailable=standing,
            confirmed=published,
        )
        if published:
            self.answered[challenge_id] = standing

    def _answer(self, challenge_id: int, round_: int, chunk_index: int) -> None:
        payload = self.own_payload(round_)
        contents = None if payload is None else payload_chunks(payload, numel=self.numel, bits=self.bits)
        if contents is None:
            log.warning("trainer.availability_unanswerable", challenge=challenge_id, round=round_)
            return
        hashes = [keccak(c) for c in contents]
        try:
            self.market.answer_availability(
                self.signer, challenge_id, contents[chunk_index], merkle.proof(hashes, chunk_index)
            )
        except ChainError as exc:
            log.info("trainer.availability_skipped", challenge=challenge_id, reason=exc.error_name)
            return
        self.done.add(challenge_id)
        log.info("trainer.availability_answered", challenge=challenge_id, round=round_, chunk=chunk_index)
