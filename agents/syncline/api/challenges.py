"""``POST /api/runs/{id}/challenges/build``: audit one closed round from public data (chain, blob
store, gossip) with the court's :class:`RoundAuditor`, and hand over the call the finding builds
(:meth:`~syncline.court.findings.Finding.call`): the browser signs and sends it.
"""

from __future__ import annotations

from collections.abc import Iterable

from syncline.api.errors import ApiError
from syncline.api.schemas import ChallengeProof, ChallengeRequest
from syncline.api.services import ApiServices
from syncline.court.audit import RoundAuditor, TrainingCheck, TrainingChecker
from syncline.court.findings import Finding, TrainingFraud
from syncline.court.sampling import make_training_checker
from syncline.protocol.spec import ONCHAIN_FIELDS
from syncline.run.context import TaskContext


def _findings(auditor: RoundAuditor, req: ChallengeRequest) -> Iterable[Finding]:
    if req.kind == "trainer_equivocation":
        return auditor.trainer_equivocations(req.round)
    if req.kind == "witness_equivocation":
        return auditor.witness_equivocations(req.round)
    return auditor.audit(req.round)


def _matches(finding: Finding, req: ChallengeRequest) -> bool:
    if finding.kind_name != req.kind:
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

    def check(ctx: TaskContext, round_: int, fragment: int) -> TrainingCheck:
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
    call = finding.call(market, task_id)
    return ChallengeProof(
        kind=req.kind,
        round=req.round,
        accused=finding.accused(),
        description=finding.describe(),
        function=call.function,
        to=call.target.lower(),
        data="0x" + call.calldata.hex(),
        value_wei=str(call.value),
    )
