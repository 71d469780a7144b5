"""The standalone challenger end to end: an outsider catches a colluding quorum nobody else audits.

The ``aggregation`` fraud scenario (witness-1 and witness-2 finalize round 1 at a state that is not
the median step) on the same tiny devnet run as ``test_fraud_e2e``, with one difference: the
witnesses' embedded challengers are off (``DemoPlan.witness_challenges``), so the honest witness-3
votes but audits nothing. The only auditor is ``syncline challenger run --config FILE`` (the
``ChallengerAgent`` process), run by an account that is neither sponsor, trainer nor witness and
started right after the task is posted. It must find the fault, prove it inside the challenge
window (an aggregation-fraud proof is decided in its own transaction), be paid its bond back plus
half of both slashed bonds, withdraw it, and exit 0 once the task is sealed; the culprits lose their
bonds, the round is rolled back, and nobody honest is slashed.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from syncline.chain.deployment import Deployment
from syncline.chain.devnet import Devnet, DevnetClock
from syncline.chain.keys import from_private_key
from syncline.chain.market import MarketClient
from syncline.demo.scenarios import SCENARIOS
from syncline.protocol.enums import ChallengeKind, ChallengeStatus
from syncline.protocol.receipt import TrainingReceipt
from syncline.sponsor.task_builder import PublishedTask

from ._agent_harness import read_jsonl
from .test_fraud_e2e import (
    BPS,
    CHALLENGER_SHARE_BPS,
    FraudDemo,
    cheat_round,
    check_challenger_paid,
    check_consequences,
    check_culprits_slashed_honest_spared,
    check_everyone_withdrew,
    check_ledger,
    fraud_test_plan,
    report_timing,
    run_fraud_demo,
)

pytestmark = [pytest.mark.chain, pytest.mark.slow]

SCENARIO = "aggregation"
OUTSIDER = "challenger-1"
OUTSIDER_KEY = 7  # devnet account 7: 0 is the sponsor, 1-3 the trainers, 4-6 the witnesses


class OutsiderDemo(FraudDemo):
    """``FraudDemo`` plus one ``syncline challenger run`` process of an outsider account, spawned
    once the task is posted (before any trainer or witness)."""

    outsider = ""  # the outsider's address (lower case), once the devnet is up

    def _run(self, devnet: Devnet, blob_url: str, started: float, clock: DevnetClock) -> TrainingReceipt:
        key = devnet.private_keys()[OUTSIDER_KEY]
        self.outsider = from_private_key(key).address.lower()

        def spawn_outsider(market: MarketClient, task_id: int, published: PublishedTask, sponsor: Any) -> None:
            deployment = Deployment.read(self.workdir / "deployment.json")
            self._spawn("challenger", 0, key, task_id, deployment, blob_url)

        self.after_post = spawn_outsider
        # the aggregation fraud needs no re-execution of training segments
        self.agent_setup = lambda name, _dir, _address: ({"training_checks": "off"} if name == OUTSIDER else {}, {})
        return super()._run(devnet, blob_url, started, clock)

    def _sealed(self, market: MarketClient, task_id: int, names: dict[str, str]) -> None:
        super()._sealed(market, task_id, {**names, self.outsider: OUTSIDER})


def test_standalone_challenger_catches_aggregation_fraud(state_env: Path, tmp_path: Path) -> None:
    scenario = SCENARIOS[SCENARIO]
    plan = replace(fraud_test_plan(scenario), witness_challenges=False)
    demo = OutsiderDemo(tmp_path, SCENARIO, plan)
    record, wall = run_fraud_demo(demo)
    outsider = demo.outsider
    assert outsider not in {record.sponsor, *(a for a, n in record.names.items() if n != OUTSIDER)}

    # Every challenge of the run is the outsider's: one aggregation-fraud proof on the cheat
    # round, upheld in its own transaction, inside the challenge window.
    assert [(o.view.kind, o.view.status, o.view.round) for o in record.outcomes] == [
        (ChallengeKind.AGGREGATION_FRAUD, ChallengeStatus.UPHELD, cheat_round(scenario))
    ]
    (first,) = record.outcomes
    assert first.view.challenger.lower() == outsider
    assert first.resolved_at == first.opened_at  # decided by the proof itself
    assert first.round_closed_at <= first.opened_at <= first.round_closed_at + plan.challenge_window_s
    # the witnesses audited nothing; the outsider's process logged its proof
    for name in (n for n in record.names.values() if n.startswith("witness-")):
        assert not (tmp_path / "agents" / name / "challenges.jsonl").exists(), name
    logged = read_jsonl(tmp_path / "agents" / OUTSIDER / "challenges.jsonl")
    assert [(x["challenge"], x["kind"], x["round"]) for x in logged] == [
        (first.view.challenge_id, "aggregation_fraud", first.view.round)
    ]
    report_timing(record, SCENARIO, first, wall)

    # The culprits lost their bonds, the round was rolled back, nobody honest was slashed.
    check_culprits_slashed_honest_spared(record, scenario, plan)
    check_consequences(record, scenario, first)
    # The outsider was credited its bond back plus half of both bonds, and withdrew exactly that.
    check_challenger_paid(record, plan)
    bounty = len(scenario.misbehave) * plan.witness_bond_wei * CHALLENGER_SHARE_BPS // BPS
    assert record.credited_by_reason[(outsider, "challenge-bounty")] == bounty
    assert record.credited[outsider] == plan.challenge_bond_wei + bounty
    assert record.withdrawn[outsider] == plan.challenge_bond_wei + bounty
    check_ledger(record, plan)
    # Every process, the outsider's included, exited 0 with nothing left to claim.
    assert OUTSIDER in record.agent_exit_codes
    check_everyone_withdrew(record)
