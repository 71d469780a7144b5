"""Late data never turns honest voters into culprits (issue 27 item 6), end to end on anvil.

A real run (3 trainers, 3 witnesses, k = 2, coordinate median) where trainer-2 commits on time
but reveals its payload only once the round has closed on chain (``--misbehave reveal-late``: a
withholder, or an honest outbox flushing after a blob outage). The witnesses wait the reveal
window (docs/protocol.md §7.1), then vote without it. Afterwards the payload is valid and public,
so an audit finds it "left out"; but no witness's challenger brings a claim against a result its
own account voted for, and whatever claim anyone brings expires (``AvailabilityShownLate``). The
outcome: no witness loses bond or fee, the late trainer earns nothing for its rounds (nor loses
stake), the honest trainers are paid for every round.

About 60-90 s on 2 loaded cores (agent start-up, 2 rounds of 8 s plus a 5 s reveal window each).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from syncline.chain.market import MarketClient, TrainerView, WitnessView
from syncline.demo.training_run import TrainingDemo
from syncline.protocol.enums import ChallengeKind, ChallengeStatus

from ._agent_harness import tiny_plan

pytestmark = [pytest.mark.chain, pytest.mark.slow]


@dataclass
class LateRecord:
    names: dict[str, str] = field(default_factory=dict)
    trainers: dict[str, TrainerView] = field(default_factory=dict)
    witnesses: dict[str, WitnessView] = field(default_factory=dict)
    accepted_masks: list[int] = field(default_factory=list)
    challenges: list[tuple[str, ChallengeKind, ChallengeStatus]] = field(default_factory=list)
    witness_slashed: int = 0
    stake_slashed: int = 0


def test_payload_revealed_after_the_vote_costs_no_voter(state_env: Path, tmp_path: Path) -> None:
    plan = tiny_plan(
        rounds=2,
        round_duration_s=8,
        grace_window_s=10,  # reveal window max(4, 10 // 2) = 5 s
        challenge_window_s=8,
        training_checks="off",
        checkpoints="eager",
        misbehave={"trainer-2": "reveal-late"},
        timeout_s=200.0,
    )
    demo = TrainingDemo(tmp_path, plan)
    record = LateRecord()

    def sealed(market: MarketClient, task_id: int, names: dict[str, str]) -> None:
        record.names = {a.lower(): n for a, n in names.items()}
        for a in market.trainers(task_id):
            record.trainers[names.get(a.lower(), a)] = market.trainer(task_id, a)
        for a, n in names.items():
            if n.startswith("witness-"):
                record.witnesses[n] = market.witness(task_id, a)
        record.accepted_masks = [market.round(task_id, r).accepted_mask for r in range(plan.rounds)]
        for cid in range(1, market.challenge_count() + 1):
            c = market.challenge(cid)
            if c.task_id == task_id:
                record.challenges.append((names.get(c.challenger.lower(), c.challenger), c.kind, c.status))
        record.witness_slashed = sum(
            int(e["args"]["amount"]) for e in market.get_logs("WitnessSlashed", taskId=task_id)
        )
        record.stake_slashed = sum(int(e["args"]["amount"]) for e in market.get_logs("StakeSlashed", taskId=task_id))

    demo.after_seal = sealed
    started = time.monotonic()
    demo.run()
    print(f"\n[late-reveal] run took {time.monotonic() - started:.0f} s; challenges {record.challenges}")

    late = record.trainers["trainer-2"]
    assert late.submitted == plan.rounds, late  # it committed on time every round
    assert late.accepted == 0 and late.accepted_weight == 0, late  # never aggregated, never credited
    for mask in record.accepted_masks:
        assert not mask >> late.fragment & 1, record.accepted_masks
    for name in ("trainer-1", "trainer-3"):
        honest = record.trainers[name]
        assert honest.accepted == plan.rounds and not honest.evicted, (name, honest)
    assert record.stake_slashed == 0
    assert record.witness_slashed == 0
    fees = {w.fees_wei // w.matched for w in record.witnesses.values() if w.matched}
    assert len(fees) == 1 and all(w.fees_wei == w.matched * min(fees) for w in record.witnesses.values()), fees
    for name, w in record.witnesses.items():
        assert w.slashed_wei == 0, (name, w)
    # No witness claimed against a result it voted for; any claim (none expected) did not uphold.
    for challenger, kind, status in record.challenges:
        assert not challenger.startswith("witness-"), record.challenges
        assert status != ChallengeStatus.UPHELD, record.challenges
        assert kind == ChallengeKind.CENSORSHIP, record.challenges
    declined = sum(
        (tmp_path / "logs" / f"witness-{i}.log").read_text(errors="replace").count("own_result_not_claimed")
        for i in (1, 2, 3)
    )
    print(f"[late-reveal] censorship findings a witness's challenger declined (own result): {declined}")
    log = (tmp_path / "logs" / "trainer-2.log").read_text(errors="replace")
    assert log.count("trainer.payload_revealed") >= 1, "the late trainer revealed its payloads (after the vote)"
