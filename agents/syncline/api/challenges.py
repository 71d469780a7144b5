"""``POST /api/runs/{id}/challenges/build``: audit one closed round from public data (chain, blob
store, gossip) with the challenger's :class:`RoundAuditor`, and encode the court call that proves the
requested fault. The browser sends it with the task's challenge bond.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from syncline.api.errors import ApiError
from syncline.api.schemas import ChallengeProof, ChallengeRequest
from syncline.api.services import ApiServices
from syncline.api.specs import ONCHAIN_FIELDS
from syncline.chain.market import SPEC_CHALLENGE_BOND
from syncline.challenger.audit import (
    AggregationFraud,
    Censorship,
    Finding,
    RoundAuditor,
    TrainerEquivocation,
    TrainingChecker,
    TrainingFraud,
    WitnessEquivocation,
)
from syncline.challenger.training import make_training_checker
from syncline.run.context import TaskContext
from syncline.trainer.referee import Outcome

ZERO_ADDRESS = "0x" + "00" * 20

KIND_OF: dict[type[Any], str] = {
    TrainerEquivocation: "trainer_equivocation",
    WitnessEquivocation: "witness_equivocation",
    AggregationFraud: "aggregation_fraud",
    Censorship: "censorship",
    TrainingFraud: "training_fraud",
}


def call_of(finding: Finding, task_id: int) -> tuple[str, list[Any], str, str]:
    """(court function, ABI arguments, accused as the court records it, one-line description)."""
    if isinstance(finding, TrainerEquivocation):
        a, b = finding.onchain, finding.announced
        return (
            "proveTrainerEquivocation",
            [a.message.as_tuple(), bytes(a.signature), b.message.as_tuple(), bytes(b.signature)],
            a.signer.lower(),
            f"round {finding.round}: trainer {a.signer.lower()} (fragment {finding.fragment}) signed two different "
            f"commitments (payload 0x{a.message.payload_hash.hex()[:12]}... on chain, "
            f"0x{b.message.payload_hash.hex()[:12]}... announced)",
        )
    if isinstance(finding, WitnessEquivocation):
        va, vb = finding.onchain, finding.announced
        return (
            "proveWitnessEquivocation",
            [va.message.as_tuple(), bytes(va.signature), vb.message.as_tuple(), bytes(vb.signature)],
            finding.witness.lower(),
            f"round {finding.round}: witness {finding.witness.lower()} signed two different votes (state root "
            f"0x{va.message.state_root.hex()[:12]}... on chain, 0x{vb.message.state_root.hex()[:12]}... announced)",
        )
    if isinstance(finding, AggregationFraud):
        o = finding.opening
        return (
            "proveAggregationFraud",
            [o.as_tuple()],
            ZERO_ADDRESS,
            f"round {finding.round}: the finalized state differs from the recomputed aggregate in chunk "
            f"{o.chunk_index} (coordinates {o.lo}..{o.hi} of {len(o.input_chunks)} accepted inputs)",
        )
    if isinstance(finding, Censorship):
        return (
            "challengeCensorship",
            [task_id, finding.round, finding.fragment],
            ZERO_ADDRESS,
            f"round {finding.round}: the valid on-time submission of fragment {finding.fragment} was left out",
        )
    return (
        "challengeTraining",
        [task_id, finding.round, finding.fragment, finding.segment],
        "",
        f"round {finding.round}: fragment {finding.fragment} segment {finding.segment} does not re-execute: "
        f"{finding.reason}",
    )


def _findings(auditor: RoundAuditor, req: ChallengeRequest) -> Iterable[Finding]:
    if req.kind == "trainer_equivocation":
        return auditor.trainer_equivocations(req.round)
    if req.kind == "witness_equivocation":
        return auditor.witness_equivocations(req.round)
    return auditor.audit(req.round)


def _matches(finding: Finding, req: ChallengeRequest) -> bool:
    if KIND_OF[type(finding)] != req.kind:
        return False
    fragment = getattr(finding, "fragment", None)
    if req.fragment is not None and fragment is not None and fragment != req.fragment:
        return False
    return not (req.segment is not None and isinstance(finding, TrainingFraud) and finding.segment != req.segment)


def _checker(req: ChallengeRequest) -> TrainingChecker | None:
    """Full re-execution for training-fraud requests (restricted to the requested fragment); none otherwise."""
    if req.kind != "training_fraud":
        return None
    full = make_training_checker("all")
    assert full is not None

    def check(ctx: TaskContext, round_: int, fragment: int) -> Outcome | None:
        if req.fragment is not None and fragment != req.fragment:
            return None
        return full(ctx, round_, fragment)

    return check


def build_challenge(services: ApiServices, task_id: int, req: ChallengeRequest) -> ChallengeProof:
    market = services.market
    spec = market.spec_tuple(task_id)
    rounds = int(spec[ONCHAIN_FIELDS.index("rounds")])
    if req.round >= rounds:
        raise ApiError(422, f"round: task {task_id} has rounds 0..{rounds - 1}")
    rr = market.round(task_id, req.round)
    if rr.closed_at == 0:
        state = "is still open" if rr.opened_at else "has not opened"
        raise ApiError(409, f"round {req.round} {state}: only closed rounds can be challenged")
    ctx = services.task_context(task_id)
    auditor = RoundAuditor(ctx, market.domain(), _checker(req))
    finding = next((f for f in _findings(auditor, req) if _matches(f, req)), None)
    if finding is None:
        what = req.kind.replace("_", " ").replace(" fraud", "")
        later = " yet (its state or checkpoints are not available)" if auditor.incomplete else ""
        raise ApiError(409, f"round {req.round}: no provable {what} fault{later}")
    function, args, accused, description = call_of(finding, task_id)
    if isinstance(finding, TrainingFraud):
        accused = market.submission(task_id, finding.round, finding.fragment).trainer.lower()
    data = market.contract.encode_abi(function, args=args)
    return ChallengeProof(
        kind=req.kind,
        round=req.round,
        accused=accused,
        description=description,
        function=function,
        to=market.address.lower(),
        data=str(data),
        value_wei=str(int(spec[SPEC_CHALLENGE_BOND])),
    )
